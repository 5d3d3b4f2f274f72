"""The DeBERTa-v3 family: BERT's post-LayerNorm layers with disentangled attention over
log-bucketed relative positions (docs/specification.md §The DeBERTa-v3 family), under Hugging
Face's `DebertaV2*` names; microsoft's deberta-v3 and mdeberta-v3 folders (model_type
`deberta-v2`) come here. Its record, declared here, is all the toolkit knows of it."""

from electra.model.deberta.config import DebertaV3Config
from electra.model.deberta.hf import HF
from electra.model.deberta.presets import PRESETS
from electra.model.family import Family, Ref, register_family

_MODELING = "electra.model.deberta.modeling"
_HEADS = "electra.model.deberta.heads"
_PRETRAINING = "electra.model.deberta.pretraining"

FAMILY = register_family(
    Family(
        name="deberta-v3",
        title="DeBERTa-v3",
        summary="DeBERTa-v3's; docs/pretraining.md §The DeBERTa-v3 family",
        config=DebertaV3Config,
        presets=PRESETS,
        encoder=Ref(_MODELING, "DebertaV2Model"),
        masked_lm=Ref(_MODELING, "DebertaV2ForMaskedLM"),
        pretraining=Ref(_MODELING, "DebertaV2ForPreTraining"),
        layer=Ref(_MODELING, "DebertaV2Layer"),
        heads={
            "sequence": Ref(_HEADS, "DebertaV2ForSequenceClassification"),
            "token": Ref(_HEADS, "DebertaV2ForTokenClassification"),
            "span_qa": Ref(_HEADS, "DebertaV2ForQuestionAnswering"),
        },
        forward_flops=Ref("electra.model.deberta.flops", "forward_flops"),
        layerwise_depth=Ref(_MODELING, "layerwise_depth"),
        kernels=Ref("electra.model.deberta.kernels", "KERNELS"),
        attention_paths=("sdpa", "flex"),
        # No embedding projection: a shared token table fixes the generator's width.
        shared_fields=("vocab_size", "hidden_size", "layer_norm_eps", "pad_token_id"),
        shares_at_full_width=True,
        generator_layers_fraction=0.5,  # DeBERTa-v3's generator: half the depth
        dropout_fields=("hidden_dropout_prob", "attention_probs_dropout_prob"),
        gdes_embeddings=Ref(_PRETRAINING, "DebertaDisentangledEmbeddings"),
        copy_gate=Ref(_PRETRAINING, "DebertaCopyGate"),
        cloze_towers=Ref(_PRETRAINING, "DebertaTwoTowerClozeGenerator"),
        hf=HF,
    )
)
