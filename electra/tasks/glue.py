"""The GLUE tasks, named configurations of the general classification and regression tasks
(`electra.tasks.labelled`, whose [CLS] head they use): the standard TSV files' reader, the official
metrics, each task's labels and epochs, and test predictions in the GLUE submission format.

Files are read with quoting off (several hold bare `"`), a UTF-8 byte-order mark is dropped (MRPC),
and columns are found by header name, except in CoLA's headerless train/dev files.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import electra.tasks.metrics as metrics
from electra.atomic import write_text_atomic
from electra.errors import ElectraError
from electra.tasks.base import Task, require_suffix
from electra.tasks.labelled import ClassificationTask, Example, LabelSet, RegressionTask
from electra.tasks.tables import long_fields


@dataclass(frozen=True)
class Columns:
    """Where a file's fields are: header names, or 0-based positions for a headerless file."""

    text_a: str | int
    text_b: str | int | None = None
    label: str | int | None = None
    id: str | int | None = None


_ENTAILMENT = ("entailment", "not_entailment")


@dataclass(frozen=True)
class GlueSpec:
    name: str
    submission: str  # the submission file's stem, e.g. "SST-2"
    labels: tuple[str, ...] | None  # None: regression on a 0-5 score
    train: Columns  # train and dev files
    test: Columns
    metrics: tuple[str, ...] = ("accuracy",)
    epochs: int = 3
    dev_sets: tuple[tuple[str, str], ...] = (("dev", "dev.tsv"),)
    test_sets: tuple[tuple[str, str], ...] = (("test", "test.tsv"),)
    pairs_symmetric: bool = False  # swapped pairs are valid examples (MRPC, STS-B)


GLUE = {
    s.name: s
    for s in (
        GlueSpec(
            "cola",
            "CoLA",
            ("0", "1"),
            train=Columns(text_a=3, label=1),
            test=Columns("sentence", id="index"),
            metrics=("mcc",),
        ),
        GlueSpec(
            "sst2",
            "SST-2",
            ("0", "1"),
            train=Columns("sentence", label="label"),
            test=Columns("sentence", id="index"),
        ),
        GlueSpec(
            "mrpc",
            "MRPC",
            ("0", "1"),
            train=Columns("#1 String", "#2 String", "Quality"),
            test=Columns("#1 String", "#2 String", id="index"),
            metrics=("accuracy", "f1"),
            pairs_symmetric=True,
        ),
        GlueSpec(
            "stsb",
            "STS-B",
            None,
            train=Columns("sentence1", "sentence2", "score"),
            test=Columns("sentence1", "sentence2", id="index"),
            metrics=("spearman", "pearson"),
            epochs=10,
            pairs_symmetric=True,
        ),
        GlueSpec(
            "qqp",
            "QQP",
            ("0", "1"),
            train=Columns("question1", "question2", "is_duplicate"),
            test=Columns("question1", "question2", id="id"),
            metrics=("accuracy", "f1"),
        ),
        GlueSpec(
            "mnli",
            "MNLI",
            ("contradiction", "entailment", "neutral"),
            train=Columns("sentence1", "sentence2", "gold_label"),
            test=Columns("sentence1", "sentence2", id="index"),
            dev_sets=(("matched", "dev_matched.tsv"), ("mismatched", "dev_mismatched.tsv")),
            test_sets=(("matched", "test_matched.tsv"), ("mismatched", "test_mismatched.tsv")),
        ),
        GlueSpec(
            "qnli",
            "QNLI",
            _ENTAILMENT,
            train=Columns("question", "sentence", "label"),
            test=Columns("question", "sentence", id="index"),
        ),
        GlueSpec(
            "rte",
            "RTE",
            _ENTAILMENT,
            train=Columns("sentence1", "sentence2", "label"),
            test=Columns("sentence1", "sentence2", id="index"),
            epochs=10,
        ),
        GlueSpec(
            "wnli",
            "WNLI",
            ("0", "1"),
            train=Columns("sentence1", "sentence2", "label"),
            test=Columns("sentence1", "sentence2", id="index"),
        ),
    )
}
_SUBMISSION_SUFFIX = {"matched": "-m", "mismatched": "-mm"}


def read_glue_tsv(path: Path, spec: GlueSpec, split: str) -> list[Example]:
    cols = spec.test if split == "test" else spec.train
    with open(path, encoding="utf-8-sig", newline="") as f, long_fields():
        rows = list(enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), start=1))
    if isinstance(cols.text_a, str):  # a header row names the columns
        if not rows:
            raise ElectraError(f"{path} is empty: expected a {spec.name} {split} TSV file")
        header = rows.pop(0)[1]
        index = _column_index(header, cols, path, spec, split)
    else:
        index = {k: v for k, v in vars(cols).items() if v is not None}
    if not rows:
        raise ElectraError(f"{path} has no examples: expected a {spec.name} {split} TSV file")
    need = max(index.values()) + 1
    examples = []
    for line, row in rows:
        if len(row) < need:
            raise ElectraError(
                f"{path}, line {line}: expected at least {need} tab-separated fields, found "
                f"{len(row)}: is this the {spec.name} {split} file?"
            )
        label = None if "label" not in index else _label(row[index["label"]], spec, path, line)
        examples.append(
            Example(
                id=row[index["id"]] if "id" in index else str(len(examples)),
                text_a=row[index["text_a"]],
                text_b=row[index["text_b"]] if "text_b" in index else None,
                label=label,
            )
        )
    return examples


def _column_index(header, cols: Columns, path, spec, split) -> dict[str, int]:
    index = {}
    for key, name in vars(cols).items():
        if name is None:
            continue
        if name not in header:
            raise ElectraError(
                f"{path}, line 1: no {name!r} column in the header ({', '.join(header)[:120]}): "
                f"is this the {spec.name} {split} file?"
            )
        index[key] = header.index(name)
    return index


def _label(raw: str, spec: GlueSpec, path, line) -> str | float:
    if spec.labels is None:
        try:
            return float(raw)
        except ValueError:
            raise ElectraError(f"{path}, line {line}: score {raw!r} is not a number") from None
    if raw not in spec.labels:
        raise ElectraError(
            f"{path}, line {line}: unknown label {raw!r} (expected one of {', '.join(spec.labels)})"
        )
    return raw


class GlueTask:
    """What makes a GLUE task of the general ones (`glue_task`): its files and their reader, its
    fixed labels, its metrics and epochs, and the submission files. A benchmark: nothing is
    fitted to its training file, and nothing but the weights is saved with a model."""

    finetune_test = False  # the test split is predicted by `evaluate --split test`, for the server
    writes_submission = True
    fixed_splits = True  # CoLA's train and dev share 16 sentences, STS-B's 6 pairs: as published

    def __init__(self, spec: GlueSpec):
        self.spec = spec
        self.name = spec.name
        self.epochs = spec.epochs
        self.metrics = spec.metrics
        self.label_set = LabelSet(spec.labels or ())
        self.main_metric = (f"{spec.dev_sets[0][0]}_" if len(spec.dev_sets) > 1 else "") + (
            spec.metrics[0]
        )
        self.files = {
            "train": {"train": ("train.tsv",)},
            "dev": {name: (file,) for name, file in spec.dev_sets},
            "test": {name: (file,) for name, file in spec.test_sets},
        }

    def locate(self, data, split):
        return Task.locate(self, data, split)

    def fit(self, train: list[Example], path: Path) -> Task:
        return Task.fit(self, train, path)

    def head_config(self) -> dict[str, Any]:
        return Task.head_config(self)

    def with_head_config(self, head: dict[str, Any]) -> Task:
        return Task.with_head_config(self, head)

    def read_with(self, text_columns=(), delimiter=None, label_column=None) -> None:
        Task.read_with(self, text_columns, delimiter, label_column)

    def read(self, path: Path, split: str) -> list[Example]:
        return read_glue_tsv(path, self.spec, split)

    def double_unordered(self, examples: list[Example]) -> list[Example]:
        """Adds each pair swapped (the official `double_unordered`, for MRPC and STS-B)."""
        if not self.spec.pairs_symmetric:
            return Task.double_unordered(self, examples)
        swapped = [Example(f"{e.id}-swapped", e.text_b, e.text_a, e.label) for e in examples]
        return examples + swapped

    def score(self, predictions) -> dict[str, float]:
        if self.spec.labels is None:
            return RegressionTask.score(self, predictions)
        gold = [p["label"] for p in predictions]
        pred = [p["prediction"] for p in predictions]
        scores = {}
        if "accuracy" in self.spec.metrics:
            scores["accuracy"] = metrics.accuracy(gold, pred)
        if "f1" in self.spec.metrics:
            scores["f1"] = metrics.binary_f1([int(g) for g in gold], [int(p) for p in pred])
        if "mcc" in self.spec.metrics:
            scores["mcc"] = metrics.mcc(gold, pred)
        return {k: scores[k] for k in self.spec.metrics}

    def write_submission(self, predictions, set_name, out_dir) -> Path:
        """`index<TAB>prediction` rows under a header, the file name GLUE's server expects;
        STS-B scores are clipped to [0, 5]."""
        name = self.spec.submission + _SUBMISSION_SUFFIX.get(set_name, "")
        path = Path(out_dir) / f"{name}.tsv"
        lines = ["index\tprediction"]
        for p in predictions:
            value = p["prediction"]
            if self.spec.labels is None:
                value = f"{min(5.0, max(0.0, value)):.3f}"
            lines.append(f"{p['id']}\t{value}")
        write_text_atomic(path, "\n".join(lines) + "\n")
        return path

    # --- `electra predict` --------------------------------------------------------------------

    def read_inputs(self, path: Path) -> list[Example]:
        """A test file, or a labelled (train/dev) file whose labels are dropped."""
        require_suffix(path, (".tsv", ".txt"), self.name)
        try:
            examples = self.read(path, "test")
        except ElectraError as as_test:
            try:  # the labelled layout (CoLA's has no header)
                examples = self.read(path, "dev")
            except ElectraError as as_dev:  # wrong both ways: say both, not only the last tried
                raise ElectraError(f"{as_test}; read as labelled: {as_dev}") from None
        return [Example(e.id, e.text_a, e.text_b, None) for e in examples]

    def _texts_per_input(self) -> int:
        """A text, or a TAB-separated pair for a pair task."""
        return 2 if self.spec.test.text_b is not None else 1


class GlueClassification(GlueTask, ClassificationTask):
    """CoLA, SST-2, MRPC, QQP, MNLI, QNLI, RTE, WNLI."""


class GlueRegression(GlueTask, RegressionTask):
    """STS-B: the head is trained on score/5 (§5), so its predictions come back on 0-5."""

    value_scale = 5.0
    baseline_unit = "pair"


def glue_task(spec: GlueSpec) -> GlueClassification | GlueRegression:
    """The GLUE task `spec` describes: a classification, or STS-B's regression."""
    return GlueRegression(spec) if spec.labels is None else GlueClassification(spec)
