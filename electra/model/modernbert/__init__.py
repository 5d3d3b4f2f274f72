"""The modern family: ModernBERT's architecture (docs/specification.md §The modern family), under
Hugging Face's `ModernBert*` names. Its record, declared here, is all the toolkit knows of it."""

from electra.model.family import Family, Ref, register_family
from electra.model.modernbert.config import ModernConfig
from electra.model.modernbert.hf import HF
from electra.model.modernbert.presets import PRESETS

_MODELING = "electra.model.modernbert.modeling"
_HEADS = "electra.model.modernbert.heads"
_PRETRAINING = "electra.model.modernbert.pretraining"

FAMILY = register_family(
    Family(
        name="modernbert",
        title="ModernBERT",
        summary="ModernBERT's; docs/pretraining.md §The modern family",
        config=ModernConfig,
        presets=PRESETS,
        encoder=Ref(_MODELING, "ModernBertModel"),
        masked_lm=Ref(_MODELING, "ModernBertForMaskedLM"),
        pretraining=Ref(_MODELING, "ModernBertForPreTraining"),
        layer=Ref(_MODELING, "ModernBertEncoderLayer"),
        heads={
            "sequence": Ref(_HEADS, "ModernBertForSequenceClassification"),
            "token": Ref(_HEADS, "ModernBertForTokenClassification"),
            "span_qa": Ref(_HEADS, "ModernBertForQuestionAnswering"),
        },
        forward_flops=Ref("electra.model.modernbert.flops", "forward_flops"),
        layerwise_depth=Ref(_MODELING, "layerwise_depth"),
        kernels=Ref("electra.model.modernbert.kernels", "KERNELS"),
        attention_paths=("sdpa", "flex", "varlen"),
        # No embedding projection: a shared table fixes the width too.
        shared_fields=("vocab_size", "hidden_size", "max_position_embeddings", "norm_eps"),
        shares_at_full_width=True,
        # Its rotary encoder takes no position ids yet.
        packs=False,
        document_mask=True,
        # --dropout means the same on both families: the embeddings', the attention's
        # (probabilities and output), inside each layer's MLP, before the head's last layer.
        dropout_fields=(
            "embedding_dropout",
            "attention_dropout",
            "mlp_dropout",
            "classifier_dropout",
        ),
        gdes_embeddings=Ref(_PRETRAINING, "ModernDisentangledEmbeddings"),
        copy_gate=Ref(_PRETRAINING, "ModernCopyGate"),
        cloze_towers=Ref(_PRETRAINING, "ModernTwoTowerClozeGenerator"),
        hf=HF,
    )
)
