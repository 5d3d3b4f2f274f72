"""The ELECTRA family: BERT's architecture as ELECTRA pretrains it (docs/specification.md
§Architecture), under Hugging Face's `Electra*` names. Its record, declared here, is all the
toolkit knows of it."""

from electra.model.electra.config import ElectraModelConfig
from electra.model.electra.hf import HF
from electra.model.electra.presets import PRESETS
from electra.model.family import Family, Ref, register_family

_MODELING = "electra.model.electra.modeling"
_HEADS = "electra.model.electra.heads"
_PRETRAINING = "electra.model.electra.pretraining"

FAMILY = register_family(
    Family(
        name="electra",
        title="ELECTRA",
        summary="BERT's, ELECTRA's own",
        config=ElectraModelConfig,
        presets=PRESETS,
        encoder=Ref(_MODELING, "ElectraModel"),
        masked_lm=Ref(_MODELING, "ElectraForMaskedLM"),
        pretraining=Ref(_MODELING, "ElectraForPreTraining"),
        layer=Ref(_MODELING, "ElectraLayer"),
        heads={
            "sequence": Ref(_HEADS, "ElectraForSequenceClassification"),
            "token": Ref(_HEADS, "ElectraForTokenClassification"),
            "official_qa": Ref(_HEADS, "ElectraForQuestionAnswering"),
            "span_qa": Ref(_HEADS, "ElectraForSpanQuestionAnswering"),
        },
        forward_flops=Ref("electra.model.electra.flops", "forward_flops"),
        layerwise_depth=Ref(_MODELING, "layerwise_depth"),
        kernels=Ref("electra.model.electra.kernels", "KERNELS"),
        shared_fields=(
            "vocab_size",
            "embedding_size",
            "max_position_embeddings",
            "type_vocab_size",
            "hidden_act",
            "layer_norm_eps",
        ),
        packs=True,
        # BERT's hidden dropout is also its embeddings' and the head's.
        dropout_fields=("hidden_dropout_prob", "attention_probs_dropout_prob"),
        gdes_embeddings=Ref(_PRETRAINING, "DisentangledEmbeddings"),
        copy_gate=Ref(_PRETRAINING, "copy_gate"),
        cloze_towers=Ref(_PRETRAINING, "TwoTowerClozeGenerator"),
        hf=HF,
    )
)
