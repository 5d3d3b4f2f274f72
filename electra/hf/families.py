"""Encoder families as `transformers` names them: for each, the classes of its pretraining networks,
its bare encoder and its task heads, and the `config.json` that names them. What import, export
and `electra export`'s message need to know of a family is here, so a new family (a second
encoder) is one more `Family` in `FAMILIES`, not an edit of several tables keyed by class names.

Names only (strings): the modules that build our networks are `electra.model`'s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TaskHead:
    """One fine-tuned head: our class (`electra.model.heads`), the `transformers` class that loads
    its export, the Auto class and pipeline that take that folder, and what messages call it."""

    ours: str
    hf_class: str
    auto_class: str
    pipeline: str
    description: str


@dataclass(frozen=True)
class Family:
    """The `transformers` names of one encoder family (its `model_type`)."""

    model_type: str
    discriminator: str  # the pretraining folder we write first (`electra.hf.pretrained.ROLES`)
    generator: str
    encoder: str  # the bare encoder, as `AutoModel` saves it
    heads: tuple[TaskHead, ...]
    # config.json fields that `transformers` reads and our ModelConfig leaves implicit.
    config_extra: tuple[tuple[str, Any], ...] = ()

    @property
    def task_heads(self) -> tuple[str, ...]:
        """The `transformers` task classes, in the order of `heads`."""
        return tuple(h.hf_class for h in self.heads)

    def exported_head(self, ours: str) -> TaskHead | None:
        """The head whose export `ours` (our model class) becomes; None where HF has none."""
        return next((h for h in self.heads if h.ours == ours), None)

    def task_head(self, hf_class: str) -> TaskHead:
        return next(h for h in self.heads if h.hf_class == hf_class)

    def config_json(self, architecture: str, model_config: Any, **extra: Any) -> dict[str, Any]:
        """A `config.json` as `transformers` writes it for `architecture`: the family's fields,
        the model's (a dataclass, its field names HF's), then `extra` (labels, problem type)."""
        return {
            "architectures": [architecture],
            "model_type": self.model_type,
            **dict(self.config_extra),
            **asdict(model_config),
            **extra,
        }


ELECTRA = Family(
    model_type="electra",
    discriminator="ElectraForPreTraining",
    generator="ElectraForMaskedLM",
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

MODERNBERT = Family(
    model_type="modernbert",
    discriminator="ModernBertForPreTraining",
    generator="ModernBertForMaskedLM",
    encoder="ModernBertModel",
    heads=(
        TaskHead(
            "ModernBertForSequenceClassification",
            "ModernBertForSequenceClassification",
            "AutoModelForSequenceClassification",
            "text-classification",
            "classification head",
        ),
        TaskHead(
            "ModernBertForTokenClassification",
            "ModernBertForTokenClassification",
            "AutoModelForTokenClassification",
            "token-classification",
            "token classification head",
        ),
        TaskHead(
            "ModernBertForQuestionAnswering",
            "ModernBertForQuestionAnswering",
            "AutoModelForQuestionAnswering",
            "question-answering",
            "question answering head",
        ),
    ),
)

FAMILIES = {f.model_type: f for f in (ELECTRA, MODERNBERT)}


def auto_class(architecture: str) -> str:
    """The `transformers` Auto class that loads a folder of `architecture` (the class itself
    where it is not a task head: `ElectraForPreTraining` loads with its own class)."""
    for family in FAMILIES.values():
        if architecture in family.task_heads:
            return family.task_head(architecture).auto_class
    return architecture
