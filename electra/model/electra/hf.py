"""The ELECTRA family as `transformers` names it (`ElectraConfig`, `ElectraForPreTraining`, ...)."""

from __future__ import annotations

from electra.model.hf_names import HFNames, TaskHead

HF = HFNames(
    model_type="electra",
    title="ELECTRA",
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
)
