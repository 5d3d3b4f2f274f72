"""Each task family's own settings: the columns and labels of a classifier on your files, the tag
column of a tagger, the windows and head of question answering (docs/finetuning.md).

`FinetuneConfig` holds one of each (`classification`, `tagging`, `qa`); a task is built from its
family's (`electra.tasks.get_task`). On the command line and in an old `finetune.json` they are
flat (`--text-columns`, `"qa_head"`): `electra.tasks.finetune_config.FinetuneConfig.from_values`
routes each name to its family. Light on purpose: building the command line's flags imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from electra.errors import ElectraError

QA_HEADS = ("official", "linear")  # QaSettings.qa_head (electra.tasks.qa_heads)
DELIMITERS = (",", ";", "|", "\t", "tab")  # ClassificationSettings.delimiter


@dataclass
class ClassificationSettings:
    """classification, multilabel and regression on your own files (electra.tasks.labelled)."""

    # One text column or a pair; unset: text, or text_a text_b
    text_columns: tuple[str, ...] | None = None
    label_column: str | None = None  # unset: label
    # The label set, in order; unset: read from the training file
    labels: tuple[str, ...] | None = None
    # A CSV's field separator: , ; | or tab; default: the one the file's header holds most often
    delimiter: str | None = None
    threshold: float = 0.5  # multilabel: a label is predicted when its probability is above this

    def __post_init__(self) -> None:
        # Saved before None meant unset: "" and [] (finetune.json), and a flag given empty.
        self.text_columns = tuple(self.text_columns) if self.text_columns else None
        self.labels = tuple(self.labels) if self.labels else None
        self.label_column = self.label_column or None
        if not 0.0 <= self.threshold <= 1.0:
            raise ElectraError(
                f"threshold={self.threshold}: a probability, between 0 and 1 (default 0.5)"
            )
        if self.delimiter is not None and self.delimiter not in DELIMITERS:
            raise ElectraError(
                f"delimiter={self.delimiter!r}: use , ; | or tab (for a CSV's field separator)"
            )


@dataclass
class TaggingSettings:
    """tagging on your own files (electra.tasks.tagging)."""

    tag_column: int = -1  # tagging, CoNLL-style files: the tag's column (0-based; -1 the last)

    def __post_init__(self) -> None:
        if self.tag_column == 0:
            raise ElectraError("tag_column=0 is the word's column: pick the tag's (-1 is the last)")


@dataclass
class QaSettings:
    """SQuAD and qa (electra.tasks.qa): the windows over long contexts, decoding, the head."""

    doc_stride: int = 128  # tokens between the starts of a long context's windows
    max_query_length: int = 64  # question tokens kept
    n_best: int = 20  # candidate starts and ends scored per window
    max_answer_length: int = 30  # tokens
    # SQuAD 2.0: predict no answer when the null score is above this; default: the head's
    # (official -2.75, linear 0.0, as Hugging Face's).
    null_threshold: float | None = None
    # qa: official (the paper's XLNet-style head) or linear (one start/end layer, as Hugging
    # Face's ElectraForQuestionAnswering, which only that one can be exported to)
    qa_head: str = "official"

    def __post_init__(self) -> None:
        if self.qa_head not in QA_HEADS:
            raise ElectraError(f"qa_head={self.qa_head!r}: use {' or '.join(QA_HEADS)}")
        for name in ("doc_stride", "max_query_length", "n_best", "max_answer_length"):
            if getattr(self, name) < 1:
                raise ElectraError(f"{name} must be at least 1 (got {getattr(self, name):g})")


# FinetuneConfig's field of each family, in the order their flags are listed.
FAMILIES = {"qa": QaSettings, "classification": ClassificationSettings, "tagging": TaggingSettings}
