"""The ELECTRA family as `transformers` names it (`ElectraConfig`, `ElectraForPreTraining`, ...)."""

from __future__ import annotations

from electra.model.family import Ref
from electra.model.hf_names import HFNames, TaskHead

_HOOKS = "electra.model.electra.hf_heads"

HF = HFNames(
    model_type="electra",
    discriminator="ElectraForPreTraining",
    generator="ElectraForMaskedLM",
    tied=("generator_lm_head.weight", "electra.embeddings.word_embeddings.weight"),
    encoder="ElectraModel",
    heads=(
        TaskHead(
            "ElectraForSequenceClassification",
            "ElectraForSequenceClassification",
            "AutoModelForSequenceClassification",
            "text-classification",
            "classification head",
            # Ours is the paper's one linear layer; HF's, two (`export_state` rewrites it).
            own_weight=("classifier.weight", "electra's one-layer classifier"),
        ),
        TaskHead(
            "ElectraForTokenClassification",
            "ElectraForTokenClassification",
            "AutoModelForTokenClassification",
            "token-classification",
            "token classification head",
        ),
        # Our linear start/end head is HF's QA class; the XLNet-style head (our
        # `ElectraForQuestionAnswering`) has no HF counterpart, so it is no entry here.
        TaskHead(
            "ElectraForSpanQuestionAnswering",
            "ElectraForQuestionAnswering",
            "AutoModelForQuestionAnswering",
            "question-answering",
            "question answering head",
        ),
    ),
    config_extra=(("position_embedding_type", "absolute"),),
    # Buffers that older `transformers` versions saved with the weights.
    dropped_keys=("electra.embeddings.position_ids", "electra.embeddings.token_type_ids"),
    unexported=(
        (
            "ElectraForQuestionAnswering",
            "the official XLNet-style QA head has no Hugging Face class; fine-tune with "
            "--qa-head linear for a model that exports",
        ),
    ),
    export_state=Ref(_HOOKS, "export_state"),
    import_classifier=Ref(_HOOKS, "import_classifier"),
    card_note=Ref(_HOOKS, "card_note"),
)
