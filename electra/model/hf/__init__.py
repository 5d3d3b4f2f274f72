"""The hf family: any encoder of a `transformers` model type that `electra.model.hf.types` lists
(BERT, RoBERTa, XLM-RoBERTa, CamemBERT, DistilBERT, DeBERTa-v2/v3), run on `transformers`' own
modules (docs/any-encoder.md). ELECTRA and ModernBERT folders go to the native families. Its
record, declared here, is all the toolkit knows of it."""

from electra.model.family import Family, Ref, register_family
from electra.model.hf.config import HFConfig
from electra.model.hf.hf import HF
from electra.model.hf.presets import PRESETS

_MODELING = "electra.model.hf.modeling"
_HEADS = "electra.model.hf.heads"

FAMILY = register_family(
    Family(
        name="hf",
        title="transformers",
        summary="any transformers encoder by model_type; docs/any-encoder.md",
        config=HFConfig,
        presets=PRESETS,
        encoder=Ref(_MODELING, "transformers_encoder"),
        masked_lm=Ref(_MODELING, "TransformersForMaskedLM"),
        pretraining=Ref(_MODELING, "TransformersForReplacedTokenDetection"),
        layer=Ref(_MODELING, "TransformersLayer"),
        heads={
            "sequence": Ref(_HEADS, "TransformersForSequenceClassification"),
            "token": Ref(_HEADS, "TransformersForTokenClassification"),
            "span_qa": Ref(_HEADS, "TransformersForQuestionAnswering"),
        },
        forward_flops=Ref("electra.model.hf.flops", "forward_flops"),
        layerwise_depth=Ref(_MODELING, "layerwise_depth"),
        # No embedding projection: a shared token table fixes the generator's width.
        shared_fields=("vocab_size", "hidden_size", "max_position_embeddings", "type_vocab_size"),
        shares_at_full_width=True,
        generator_layers_fraction=0.5,  # DeBERTa-v3's generator: half the depth
        dropout_fields=("hidden_dropout_prob", "attention_probs_dropout_prob"),
        gdes_embeddings=Ref(_MODELING, "gdes_embeddings"),
        copy_gate=Ref(_MODELING, "TransformersCopyGate"),
        hf=HF,
    )
)
