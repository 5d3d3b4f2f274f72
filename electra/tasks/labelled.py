"""Tasks from the user's own files: classification, multilabel classification and regression of a
text or a pair of texts, read from CSV, TSV, JSON Lines or Parquet (`electra.tasks.tables`).

Classification and regression are GLUE's tasks with the user's columns and labels (they reuse
`GlueTask`'s encoding, [CLS] head, decoding and baselines); multilabel puts a sigmoid on each
label of the same head. What a fine-tuned model needs to read new files the same way (the text
columns, the label set, the regression scale) is its head config, saved in finetune.json.

Labels are text, normalised alike in every format: `1` and `1.0` in a CSV and `1` or `1.0` in JSON
Lines are one label, `1`, and predictions name labels as strings. Their order (`--labels`, else sorted: numerically when every label is an
integer) fixes the head's outputs, and with two classes the second is the positive one of F1.
"""

from __future__ import annotations

import collections
import json
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import electra.tasks.metrics as metrics
from electra.errors import ElectraError
from electra.finetuning.config import FinetuneConfig
from electra.tasks.glue import Columns, Example, GlueSpec, GlueTask, line_texts
from electra.tasks.tables import SPLITS, DataSource, Table, read_table, split_file

_INTEGER = re.compile(r"[+-]?\d+")
_INTEGRAL = re.compile(r"([+-]?\d+)\.0*")  # "1.0", as a float column with gaps is written


class UserFiles:
    """What the tasks on the user's files share: finding the split files, the text and label
    columns, examples with their line numbers checked, and plain-text input for `predict`. A mixin
    before `GlueTask` (or another `Task`) in the bases; `labels_of` is the task's own part."""

    finetune_test = True  # finetune also predicts (and scores, when labelled) an optional test file
    writes_submission = False  # no benchmark server: predictions.jsonl is the output

    def _columns_from(self, cfg: FinetuneConfig) -> None:
        if len(cfg.text_columns) > 2:
            raise ElectraError(
                f"--text-columns takes one text column or a pair, not {len(cfg.text_columns)}"
            )
        self.text_columns = tuple(cfg.text_columns)  # () until the training file's header
        self.label_column = cfg.label_column or "label"
        # a CSV's separator; None: sniffed from its header
        self.delimiter = "\t" if cfg.delimiter == "tab" else cfg.delimiter
        self.files = {
            s: {s: (f"{s}.csv", f"{s}.tsv", f"{s}.jsonl", f"{s}.parquet")} for s in SPLITS
        }

    def read_with(self, text_columns: Sequence[str] = (), delimiter: str | None = None) -> None:
        """New files read by other text columns (as many as the model reads) or separator than
        its training files' (`electra predict --text-columns/--delimiter`)."""
        if text_columns:
            if len(text_columns) != len(self.text_columns):
                raise ElectraError(
                    f"--text-columns: this model reads {len(self.text_columns)} text column"
                    f"{'s' * (len(self.text_columns) > 1)} ({', '.join(self.text_columns)}), "
                    f"not {len(text_columns)}"
                )
            self.text_columns = tuple(text_columns)
        if delimiter:
            self.delimiter = "\t" if delimiter == "tab" else delimiter

    def split_files(self, data: DataSource, split: str) -> dict[str, Path]:
        return {split: split_file(data, split, self.name)}

    def has_split(self, data: DataSource, split: str) -> bool:
        return split_file(data, split, self.name, optional=True) is not None

    def read(self, path: Path, split: str) -> list[Example]:
        table = read_table(path, self.delimiter)
        table.note_blank()
        return self._examples(table, split, with_labels=True)

    def read_inputs(self, path: Path) -> list[Example | None]:
        """A file's examples, and None for each blank row, so that every input keeps its place."""
        table = read_table(path, self.delimiter)
        examples: list[Example | None] = list(self._examples(table, "test", with_labels=False))
        for position, _ in table.blank:
            examples.insert(position, None)
        return examples

    def _text_columns(self, table: Table) -> tuple[str, ...]:
        """The given columns, else `text`, else `text_a` (and `text_b`); kept from the first file
        read (the training file), so that every split is read as a single text or as pairs alike."""
        if not self.text_columns:
            if "text" in table.columns:
                self.text_columns = ("text",)
            elif "text_a" in table.columns:
                pair = "text_b" in table.columns
                self.text_columns = ("text_a", "text_b") if pair else ("text_a",)
            else:
                table.require("text", "--text-columns")
        for column in self.text_columns:
            table.require(column, "--text-columns")
        return self.text_columns

    def _examples(self, table: Table, split: str, with_labels: bool) -> list[Example]:
        """Examples in file order; a test file may lack the label column (then unlabelled)."""
        columns = self._text_columns(table)
        labelled = with_labels and (split != "test" or self.label_column in table.columns)
        if labelled:
            table.require(self.label_column, "--label-column")
        ids = "id" in table.columns and "id" not in (*columns, self.label_column)
        texts = [
            [_text(table, number, row.get(c), c) for c in columns] for number, row in table.rows
        ]
        raw = [(number, row.get(self.label_column)) for number, row in table.rows]
        labels = self.labels_of(table, raw, split) if labelled else [None] * len(texts)
        return [
            Example(
                id=str(row["id"]) if ids and row.get("id") is not None else str(i),
                text_a=t[0],
                text_b=t[1] if len(t) > 1 else None,
                label=label,
            )
            for i, (_, row), t, label in zip(
                table.positions(), table.rows, texts, labels, strict=True
            )
        ]

    def labels_of(self, table: Table, raw: list[tuple[int, Any]], split: str) -> list[Any]:
        raise NotImplementedError

    def from_line(self, line: str, number: int, source: str) -> Example:
        """A text, or (for a model fine-tuned on pairs) two texts TAB-separated."""
        texts = line_texts(line, number, source, len(self.text_columns))
        return Example(str(number - 1), texts[0], texts[1] if len(texts) > 1 else None, None)

    def double_unordered(self, examples: list[Example]) -> list[Example]:
        """Adds each pair swapped, as for MRPC and STS-B: the user says their pairs are unordered."""
        if len(self.text_columns) != 2:
            raise ElectraError(f"double_unordered needs pairs of texts; {self.name} has one text")
        return examples + [
            Example(f"{e.id}-swapped", e.text_b, e.text_a, e.label) for e in examples
        ]

    def _columns_config(self) -> dict[str, Any]:
        return {"text_columns": list(self.text_columns), "label_column": self.label_column}

    def _columns_from_head(self, head: dict[str, Any]) -> None:
        self.text_columns = tuple(head.get("text_columns", self.text_columns))
        self.label_column = head.get("label_column", self.label_column)


def _text(table: Table, number: int, value: Any, column: str) -> str:
    text = "" if value is None else str(value)
    if not text.strip():  # None: a JSON field absent from this line, or a null
        what = "no text" if value is None else "empty text"
        raise ElectraError(f"{table.where(number, column)}: {what}: fill it in or remove the row")
    return text


def label_name(table: Table, number: int, value: Any, column: str) -> str:
    """A label as text, the same whatever the format: strings stripped, integers and integral
    floats (`1.0` as Parquet, pandas or JSON may write them, as a number or as text) written as
    integers, booleans as true/false."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    name = "" if value is None else str(value).strip()
    if not name:
        what = "no label" if value is None else "empty label"
        raise ElectraError(f"{table.where(number, column)}: {what}: fill it in or remove the row")
    integral = _INTEGRAL.fullmatch(name)
    return str(int(integral.group(1))) if integral else name


def single_label(table: Table, number: int, value: Any, column: str) -> str:
    """A classification label; a list (or a list written as text) is refused, not taken as a
    class named "['a']"."""
    text = value.strip() if isinstance(value, str) else ""
    if isinstance(value, list | tuple | dict) or (text.startswith("[") and text.endswith("]")):
        raise ElectraError(
            f"{table.where(number, column)}: a list of labels ({str(value)[:60]}) where one label "
            "is expected: write one label, or fine-tune with --task multilabel"
        )
    return label_name(table, number, value, column)


def label_order(names: set[str]) -> tuple[str, ...]:
    """A stable order: numeric when every label is an integer (2 before 10), else alphabetical."""
    if all(_INTEGER.fullmatch(n) for n in names):
        return tuple(sorted(names, key=int))
    return tuple(sorted(names))


class LabelSet:
    """A classifier's labels: given with --labels, read from the training file, or saved with a
    fine-tuned model; an unknown label is an error naming where the set came from."""

    def __init__(self, labels: Sequence[str]):
        self.names = tuple(labels)
        self.source = "--labels" if self.names else ""
        twice = sorted({n for n in self.names if self.names.count(n) > 1})
        if twice:
            raise ElectraError(f"--labels names {twice[0]!r} twice: give each label once")

    def fit(self, names: set[str], table: Table, column: str) -> None:
        if not self.names:
            self.names, self.source = label_order(names), "the training file's labels"
        by_case = collections.defaultdict(list)
        for name in self.names:
            by_case[name.casefold()].append(name)
        for alike in (v for v in by_case.values() if len(v) > 1):
            print(
                f"warning: {table.path}: labels {' and '.join(map(repr, alike))} differ only in "
                "case and are distinct classes; if they are one, write them alike",
                file=sys.stderr,
            )
        if len(self.names) < 2:
            raise ElectraError(
                f"{table.path}, column {column!r}: one label ({self.names[0]!r}) in the training "
                "file: a classifier needs two or more"
            )

    def check(self, name: str, table: Table, number: int, column: str) -> None:
        if name not in self.names:
            shown = ", ".join(map(repr, self.names))[:200]
            fix = "add it to --labels" if self.source == "--labels" else "fix or remove the row"
            raise ElectraError(
                f"{table.where(number, column)}: label {name!r} is not among {self.source} "
                f"({shown}): {fix}"
            )


# --- classification and regression: GLUE's machinery with the user's columns -------------------


class NamedLabels(UserFiles):
    """The label set a fine-tuned model saves and is rebuilt with (classification, multilabel)."""

    def head_config(self) -> dict[str, Any]:
        return {"labels": list(self.label_set.names), **self._columns_config()}

    def with_head_config(self, head):
        self.label_set = LabelSet(head["labels"])
        self.label_set.source = "the labels the model was fine-tuned with"
        self.spec = _spec(self.name, self.label_set.names, self.spec.metrics)
        self._columns_from_head(head)
        return self


class ClassificationTask(NamedLabels, GlueTask):
    """One label per text or pair: accuracy, and F1 of the second label (two classes) or
    macro-F1 (more)."""

    def __init__(self, cfg: FinetuneConfig, name: str = "classification"):
        self.label_set = LabelSet(cfg.labels)
        # An empty label tuple until the training file is read (None would mean regression).
        super().__init__(_spec(name, self.label_set.names, ("accuracy",)))
        self._columns_from(cfg)

    def labels_of(self, table, raw, split) -> list[str]:
        names = [single_label(table, n, v, self.label_column) for n, v in raw]
        if split == "train":
            self.label_set.fit(set(names), table, self.label_column)
            self.spec = _spec(self.name, self.label_set.names, self.spec.metrics)
        for (number, _), name in zip(raw, names, strict=True):
            self.label_set.check(name, table, number, self.label_column)
        return names

    def score(self, predictions) -> dict[str, float]:
        gold = [str(p["label"]) for p in predictions]
        pred = [str(p["prediction"]) for p in predictions]
        scores = {"accuracy": metrics.accuracy(gold, pred)}
        # `electra score` builds the task without a model: the labels are those in the file.
        names = self.label_set.names or label_order({*gold, *pred})
        if len(names) == 2:
            scores["f1"] = metrics.class_f1(gold, pred, positive=names[1])
        else:
            scores["macro_f1"] = metrics.macro_f1(gold, pred)
        return scores


class RegressionTask(UserFiles, GlueTask):
    """A number per text or pair, trained on the target divided by the training file's largest
    |target| (STS-B's targets divided by 5, its largest score); Pearson and Spearman."""

    def __init__(self, cfg: FinetuneConfig, name: str = "regression"):
        super().__init__(_spec(name, None, ("pearson", "spearman")))
        self._columns_from(cfg)
        self.scale = 0.0  # set from the training file (or the fine-tuned model)

    def labels_of(self, table, raw, split) -> list[float]:
        targets = [_number(table, n, v, self.label_column) for n, v in raw]
        if split == "train" and not self.scale:
            self.scale = max(abs(y) for y in targets) or 1.0
        return targets

    @property
    def value_scale(self) -> float:
        """The training file's largest |target| in place of STS-B's 5: GlueTask trains on the
        target divided by it and multiplies the output back (decode, records, export)."""
        return self.scale

    def baseline(self, train) -> dict:
        fitted = super().baseline(train)
        return {**fitted, "rule": fitted["rule"].replace("every pair", "every example")}

    def head_config(self) -> dict[str, Any]:
        return {"scale": self.scale, **self._columns_config()}

    def with_head_config(self, head):
        self.scale = float(head["scale"])
        self._columns_from_head(head)
        return self


def _spec(name: str, labels, scores: tuple[str, ...]) -> GlueSpec:
    # Columns are read by name from the user's header (UserFiles); GlueSpec's are unused.
    return GlueSpec(name, name, labels, Columns("text"), Columns("text"), metrics=scores)


def _number(table: Table, number: int, value: Any, column: str) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        target = float(value)
    except (TypeError, ValueError):
        raise ElectraError(
            f"{table.where(number, column)}: regression target {value!r} is not a number: "
            "fix it or remove the row"
        ) from None
    if not math.isfinite(target):
        raise ElectraError(
            f"{table.where(number, column)}: regression target {value!r} is not finite: fix it "
            "or remove the row"
        )
    return target


# --- multilabel -------------------------------------------------------------------------------


class MultilabelTask(NamedLabels, GlueTask):
    """Any number of labels per text or pair: a sigmoid per label on the [CLS] head, trained with
    binary cross-entropy summed over the labels; a label is predicted above `threshold`.
    Micro-F1 (the main metric) and macro-F1."""

    multilabel = True  # export's `problem_type`: multi_label_classification

    def __init__(self, cfg: FinetuneConfig, name: str = "multilabel"):
        self.label_set = LabelSet(cfg.labels)
        super().__init__(_spec(name, self.label_set.names, ("micro_f1", "macro_f1")))
        self._columns_from(cfg)
        self.threshold = cfg.threshold

    def labels_of(self, table, raw, split) -> list[tuple[str, ...]]:
        sets = [label_list(table, n, v, self.label_column) for n, v in raw]
        if split == "train":
            self.label_set.fit({n for s in sets for n in s}, table, self.label_column)
            self.spec = _spec(self.name, self.label_set.names, self.spec.metrics)
        order = {name: i for i, name in enumerate(self.label_set.names)}
        for (number, _), names in zip(raw, sets, strict=True):
            for name in names:
                self.label_set.check(name, table, number, self.label_column)
        return [tuple(sorted(s, key=order.__getitem__)) for s in sets]

    def label_tensor(self, examples) -> torch.Tensor:
        """Each example's labels as a multi-hot row, [N, 1, K]: `finetune.trim` cuts dim 1 of
        [N, max_len] tensors, which K may equal."""
        hot = torch.zeros(len(examples), 1, len(self.label_set.names))
        index = {name: i for i, name in enumerate(self.label_set.names)}
        for row, e in enumerate(examples):
            hot[row, 0, [index[n] for n in e.label]] = 1.0
        return hot

    def losses(self, model, batch) -> torch.Tensor:
        logits = self.training_logits(model, batch)
        targets = batch["labels"].squeeze(1)
        return F.binary_cross_entropy_with_logits(logits.float(), targets, reduction="none").sum(-1)

    def decode(self, examples, encoded, outputs) -> list[dict]:
        chosen = self._chosen(torch.sigmoid(outputs["logits"]))
        return [
            {"id": e.id, "prediction": list(p), "label": None if e.label is None else list(e.label)}
            for e, p in zip(examples, chosen, strict=True)
        ]

    def _chosen(self, probs: torch.Tensor) -> list[list[str]]:
        names = self.label_set.names
        return [
            [names[j] for j in torch.nonzero(row > self.threshold).flatten().tolist()]
            for row in probs
        ]

    def records(self, examples, encoded, outputs, all_scores=False) -> list[dict]:
        """`electra predict`: {"id", "labels" (those above `threshold`, as decode chooses them),
        "scores" (every label's sigmoid)}."""
        probs = torch.sigmoid(outputs["logits"].float())
        names = self.label_set.names
        return [
            {"id": e.id, "labels": chosen, "scores": dict(zip(names, p, strict=True))}
            for e, chosen, p in zip(examples, self._chosen(probs), probs.tolist(), strict=True)
        ]

    def score(self, predictions) -> dict[str, float]:
        gold = [p["label"] for p in predictions]
        pred = [p["prediction"] for p in predictions]
        names = self.label_set.names or label_order({n for s in (*gold, *pred) for n in s})
        return metrics.multilabel_f1(gold, pred, names)

    def baseline(self, train) -> dict:
        """The most frequent training label set (the first seen of a tie) for every example."""
        counts = collections.Counter(e.label for e in train)
        best = max(counts, key=counts.__getitem__)  # Counter keeps first-seen order: ties go first
        share = f"{100.0 * counts[best] / len(train):.1f}% of train"
        shown = json.dumps(list(best)) if best else "no label"
        return {
            "rule": f"the most frequent training label set {shown} ({share}) for every example",
            "prediction": list(best),
        }

    def constant_predictions(self, prediction, examples) -> list[dict]:
        return [
            {
                "id": e.id,
                "prediction": list(prediction),
                "label": None if e.label is None else list(e.label),
            }
            for e in examples
        ]


def label_list(table: Table, number: int, value: Any, column: str) -> tuple[str, ...]:
    """A multilabel cell: a list (JSON Lines, Parquet), a JSON list in text (`["a", "b"]`), or
    labels separated by `|`, or by `,` where there is no `|`. Empty text or [] is no label."""
    where = table.where(number, column)
    if value is None:
        raise ElectraError(f"{where}: no labels value: write [] (or an empty cell) for none")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError as e:
                raise ElectraError(f"{where}: not a JSON list ({e})") from None
        else:
            value = [p for p in text.split("|" if "|" in text else ",") if p.strip()]
    if not isinstance(value, list | tuple):
        value = [value]  # one label, e.g. an integer
    names = [label_name(table, number, v, column) for v in value]
    return tuple(dict.fromkeys(names))  # a label given twice is that label once
