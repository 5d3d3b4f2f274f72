"""Classification and regression of a text or a pair of texts: the general case, on the user's own
files (CSV, TSV, JSON Lines or Parquet, `electra.tasks.tables`); GLUE's tasks are named
configurations of these (`electra.tasks.glue`: its reader, metrics, labels and defaults), and
multilabel classification puts a sigmoid on each label of the same head
(`electra.tasks.multilabel`).

The head is the paper's, on [CLS]. What a fine-tuned model needs to read new files the same way
(the text columns, the label set, the regression scale) is its head config, saved in
finetune.json; the label set and the scale are fitted on the training split (`fit`), and the text
columns are the training file's.

Labels are text, normalised alike in every format: `1` and `1.0` in a CSV and `1` or `1.0` in JSON
Lines are one label, `1`, and predictions name labels as strings; JSON `true`/`false` are the
labels "true"/"false", and a file mixing them with other labels is refused. Their order
(`--labels`, else sorted: numerically when every label is an integer) fixes the head's outputs,
and with two classes the second is the positive one of F1. A text field must be a string: a
number, list, object or null where a text is expected is refused, naming the line and field.
"""

from __future__ import annotations

import collections
import copy
import math
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import electra.tasks.metrics as metrics
from electra.errors import ElectraError
from electra.model.configs import AnyModelConfig
from electra.model.heads import build_head
from electra.tasks.base import Encoded, Task, pack, row_format, to_tensors, token_ids
from electra.tasks.settings import ClassificationSettings
from electra.tasks.splits import SPLITS
from electra.tasks.tables import Table, header_columns, read_table, split_file

_INTEGER = re.compile(r"[+-]?\d+")
_INTEGRAL = re.compile(r"([+-]?\d+)\.0*")  # "1.0", as a float column with gaps is written


@dataclass(frozen=True)
class Example:
    id: str
    text_a: str
    text_b: str | None
    label: Any  # a label, a target, or a tuple of labels (multilabel); None in test files


def line_texts(line: str, number: int, source: str, count: int | None) -> list[str]:
    """The `count` TAB-separated texts of an input line (one: no TAB), or one or two where
    `count` is None (a model with no record of what it reads: a Hugging Face folder); any other
    number of fields, or an empty text, is an error naming the line."""
    texts = line.split("\t")
    if count is None and len(texts) > 2:
        raise ElectraError(
            f"{source}, line {number}: {len(texts)} TAB-separated fields, but this model reads "
            "one text, or a pair separated by one TAB, per line: remove the other TABs"
        )
    if count is not None and len(texts) != count:
        want = "two texts separated by a TAB" if count == 2 else "one text (no TAB)"
        raise ElectraError(
            f"{source}, line {number}: {len(texts)} TAB-separated fields, but this model reads "
            f"{want} per line"
        )
    if not all(t.strip() for t in texts):
        raise ElectraError(f"{source}, line {number}: an empty text: fill it in")
    return texts


class ClassificationTask(Task):
    """One label per text or pair: accuracy, and F1 of the second label (two classes) or
    macro-F1 (more)."""

    name = "classification"
    family = "classification"
    packable = True
    finetune_test = True  # finetune also predicts (and scores, when labelled) an optional test file
    writes_submission = False  # no benchmark server: predictions.jsonl is the output
    main_metric = "accuracy"
    regression = False

    def __init__(self, settings: ClassificationSettings | None = None):
        settings = settings or ClassificationSettings()
        if len(settings.text_columns or ()) > 2:
            raise ElectraError(
                f"--text-columns takes one text column or a pair, not {len(settings.text_columns)}"
            )
        # () until fitted to a training file; a model saved with none (a Hugging Face folder
        # records no columns) reads one text or a pair, as each input gives (`read_with`).
        self.text_columns = tuple(settings.text_columns or ())
        self.label_column = settings.label_column or "label"
        # a CSV's separator; None: sniffed from its header
        self.delimiter = "\t" if settings.delimiter == "tab" else settings.delimiter
        self.label_set = LabelSet(settings.labels or ())
        self.files = {
            s: {s: (f"{s}.csv", f"{s}.tsv", f"{s}.jsonl", f"{s}.parquet")} for s in SPLITS
        }

    @property
    def labels(self) -> tuple[str, ...]:
        """The head's outputs, in order (empty until fitted, or given with --labels)."""
        return self.label_set.names

    # --- fitting to the training split, and the fitted settings a model is saved with --------

    def fit(self, train: list[Example], path: Path) -> ClassificationTask:
        """The training file's text columns (unless given) and label set (unless given)."""
        task = copy.copy(self)
        task.text_columns = self._text_columns(header_columns(path, self.delimiter))
        names = {n for e in train for n in self._names(e.label)}
        task.label_set = self.label_set.fitted(names, path, self.label_column)
        return task

    def _names(self, label: Any) -> tuple[str, ...]:
        return (label,)

    def head_config(self) -> dict[str, Any]:
        return {"labels": list(self.labels), **self._columns_config()}

    def with_head_config(self, head: dict[str, Any]) -> ClassificationTask:
        self.label_set = LabelSet(head["labels"])
        self.label_set.source = "the labels the model was fine-tuned with"
        self._columns_from_head(head)
        return self

    def _columns_config(self) -> dict[str, Any]:
        return {"text_columns": list(self.text_columns), "label_column": self.label_column}

    def _columns_from_head(self, head: dict[str, Any]) -> None:
        self.text_columns = tuple(head.get("text_columns", self.text_columns))
        self.label_column = head.get("label_column", self.label_column)

    def read_with(
        self,
        text_columns: Sequence[str] = (),
        delimiter: str | None = None,
        label_column: str | None = None,
    ) -> None:
        """New files read by other text columns (as many as the model reads: one or two for a
        model that records none, a Hugging Face folder), label column or separator than its
        training files' (`electra predict` and `evaluate`'s --text-columns, --label-column,
        --delimiter)."""
        if text_columns:
            wanted = len(self.text_columns)
            if not wanted and len(text_columns) > 2:
                raise ElectraError(
                    f"--text-columns: {len(text_columns)} columns, but a model reads one text "
                    "or a pair: name one column, or two"
                )
            if wanted and len(text_columns) != wanted:
                raise ElectraError(
                    f"--text-columns: this model reads {wanted} text column"
                    f"{'s' * (wanted > 1)} ({', '.join(self.text_columns)}), "
                    f"not {len(text_columns)}: name {wanted}"
                )
            self.text_columns = tuple(text_columns)
        if label_column:
            self.label_column = label_column
        if delimiter:
            self.delimiter = "\t" if delimiter == "tab" else delimiter

    # --- the user's files ----------------------------------------------------------------------

    def locate(self, data, split):
        found = split_file(data, split, self.name)
        return found if isinstance(found, str) else {split: found}

    def read(self, path: Path, split: str) -> list[Example]:
        table = read_table(path, self.delimiter)
        table.note_blank()
        return self._examples(table, split, with_labels=True)

    def row_texts(self, example: Example) -> tuple[str | None, ...]:
        return (example.text_a, example.text_b)

    def is_labelled(self, example: Example) -> bool:
        return example.label is not None

    def read_inputs(self, path: Path) -> list[Example | None]:
        """A file's examples, and None for each blank row, so that every input keeps its place."""
        table = read_table(path, self.delimiter)
        examples: list[Example | None] = list(self._examples(table, "test", with_labels=False))
        for position, _ in table.blank:
            examples.insert(position, None)
        return examples

    def _text_columns(self, columns: list[str]) -> tuple[str, ...]:
        """The given columns, else `text`, else `text_a` (and `text_b`): fitted to the training
        file's, so that every split is read as a single text or as pairs alike."""
        if self.text_columns:
            return self.text_columns
        if "text" in columns:
            return ("text",)
        if "text_a" in columns:
            return ("text_a", "text_b") if "text_b" in columns else ("text_a",)
        return ()

    def _examples(self, table: Table, split: str, with_labels: bool) -> list[Example]:
        """Examples in file order; a test file may lack the label column (then unlabelled)."""
        columns = self._text_columns(table.columns)
        if not columns:
            table.require("text", "--text-columns")  # none of the default columns: the error
        for column in columns:
            table.require(column, "--text-columns")
        labelled = with_labels and (split != "test" or self.label_column in table.columns)
        if labelled:
            table.require(self.label_column, "--label-column")
        ids = "id" in table.columns and "id" not in (*columns, self.label_column)
        texts = [
            [_text(table, number, row.get(c), c) for c in columns] for number, row in table.rows
        ]
        raw = [(number, row.get(self.label_column)) for number, row in table.rows]
        labels = self.labels_of(table, raw) if labelled else [None] * len(texts)
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

    def labels_of(self, table: Table, raw: list[tuple[int, Any]]) -> list[Any]:
        """The labels of a file's rows ((number, value) each), checked against the label set
        where there is one (given, fitted, or the model's)."""
        same_kind_of_label(table, raw, self.label_column)
        names = [single_label(table, n, v, self.label_column) for n, v in raw]
        self._check(table, raw, [(name,) for name in names])
        return names

    def _check(self, table: Table, raw: list[tuple[int, Any]], names: list[tuple[str, ...]]):
        if self.labels:
            for (number, _), row in zip(raw, names, strict=True):
                for name in row:
                    self.label_set.check(name, table, number, self.label_column)

    def from_line(self, line: str, number: int, source: str) -> Example:
        """A text, or (for a model fine-tuned on pairs) two texts TAB-separated; a model with no
        record of its columns (a Hugging Face folder) takes either, line by line."""
        texts = line_texts(line, number, source, self._texts_per_input())
        return Example(str(number - 1), texts[0], texts[1] if len(texts) > 1 else None, None)

    def _texts_per_input(self) -> int | None:
        return len(self.text_columns) or None

    def double_unordered(self, examples: list[Example]) -> list[Example]:
        """Adds each pair swapped, as for MRPC and STS-B: the user says their pairs are unordered."""
        if len(self.text_columns) != 2:
            raise ElectraError(f"double_unordered needs pairs of texts; {self.name} has one text")
        return examples + [
            Example(f"{e.id}-swapped", e.text_b, e.text_a, e.label) for e in examples
        ]

    # --- the [CLS] head ------------------------------------------------------------------------

    def encode(self, examples, tokenizer, max_len, training) -> Encoded:
        special, frame = row_format(tokenizer)
        a = token_ids(tokenizer, [e.text_a for e in examples])
        # Each example by itself: lines of a model that takes one text or a pair may mix them.
        seconds = iter(token_ids(tokenizer, [e.text_b for e in examples if e.text_b is not None]))
        b = [None if e.text_b is None else next(seconds) for e in examples]
        rows = [pack(x, y, special, max_len, frame) for x, y in zip(a, b, strict=True)]
        tensors = to_tensors(rows, max_len, special.pad)
        if examples[0].label is not None:
            tensors["labels"] = self.label_tensor(examples)
        return Encoded(tensors)

    def label_tensor(self, examples: list[Example]) -> torch.Tensor:
        """The training targets: each example's class index."""
        return torch.tensor([self.labels.index(e.label) for e in examples])

    def build_model(self, cfg: AnyModelConfig) -> nn.Module:
        """The [CLS] head of the encoder's family (`electra.model.heads.build_head`)."""
        return build_head("sequence", cfg, len(self.labels))

    def training_logits(self, model, batch) -> torch.Tensor:
        """The head's logits [B, outputs] for a training batch, packed (electra.finetuning.packing)
        or not."""
        return model(
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
            batch.get("position_ids"),
            batch.get("cls_index"),
        )

    def losses(self, model, batch) -> torch.Tensor:
        logits = self.training_logits(model, batch)
        return F.cross_entropy(logits.float(), batch["labels"], reduction="none")

    def infer(self, model, batch):
        logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        return {"logits": logits.float()}

    def decode(self, examples, encoded, outputs) -> list[dict]:
        preds = [self.labels[i] for i in outputs["logits"].argmax(-1).tolist()]
        return [
            {"id": e.id, "prediction": p, "label": e.label}
            for e, p in zip(examples, preds, strict=True)
        ]

    def score(self, predictions) -> dict[str, float]:
        gold = [str(p["label"]) for p in predictions]
        pred = [str(p["prediction"]) for p in predictions]
        scores = {"accuracy": metrics.accuracy(gold, pred)}
        # `electra score` builds the task without a model: the labels are those in the file.
        names = self.labels or label_order({*gold, *pred})
        if len(names) == 2:
            scores["f1"] = metrics.class_f1(gold, pred, positive=names[1])
        else:
            scores["macro_f1"] = metrics.macro_f1(gold, pred)
        return scores

    def baseline(self, train) -> dict:
        counts = collections.Counter(e.label for e in train)
        majority = max(self.labels, key=lambda label: counts[label])  # a tie: the first label
        share = f"{100.0 * counts[majority] / len(train):.1f}% of train"
        return {
            "rule": f"the training majority class {majority!r} ({share}) for every example",
            "prediction": majority,
        }

    def constant_predictions(self, prediction, examples) -> list[dict]:
        return [{"id": e.id, "prediction": prediction, "label": e.label} for e in examples]

    def records(self, examples, encoded, outputs, all_scores=False) -> list[dict]:
        """`electra predict`: {"id", "label", "score"} (+ "scores": every label's) from the
        softmax of the logits."""
        labels = self.labels
        rows = []
        for e, p in zip(examples, outputs["logits"].float().softmax(-1).tolist(), strict=True):
            scores = dict(zip(labels, p, strict=True))
            best = max(range(len(labels)), key=p.__getitem__)  # the first of a tie, as argmax
            row = {"id": e.id, "label": labels[best], "score": p[best]}
            rows.append({**row, "scores": scores} if all_scores else row)
        return rows

    def truncated(self, examples, encoded, tokenizer, max_len) -> int:
        """Inputs cut to fit `max_len`. Only a row filled to `max_len` can have been cut, so only
        those (few) are tokenized again to tell."""
        full = encoded.tensors["attention_mask"].sum(1) == max_len
        count = 0
        for i in full.nonzero().flatten().tolist():
            e = examples[i]
            texts = [t for t in (e.text_a, e.text_b) if t is not None]
            count += sum(map(len, token_ids(tokenizer, texts))) + len(texts) + 1 > max_len
        return count


class RegressionTask(ClassificationTask):
    """A number per text or pair, trained on the target divided by the training file's largest
    |target| (STS-B's targets divided by 5, its largest score); Pearson and Spearman."""

    name = "regression"
    main_metric = "pearson"
    metrics: tuple[str, ...] = ("pearson", "spearman")
    regression = True
    baseline_unit = "example"  # what the trivial predictor's rule says it predicts for

    def __init__(self, settings: ClassificationSettings | None = None):
        super().__init__(settings)
        self.scale = 0.0  # fitted to the training file (or the fine-tuned model's)

    @property
    def labels(self) -> tuple[str, ...]:
        return ()

    def fit(self, train: list[Example], path: Path) -> RegressionTask:
        task = copy.copy(self)
        task.text_columns = self._text_columns(header_columns(path, self.delimiter))
        if not self.scale:
            task.scale = max(abs(e.label) for e in train) or 1.0
        return task

    @property
    def value_scale(self) -> float:
        """What the head's output is multiplied by to give a value on the targets' scale (decode,
        records, export): the training file's largest |target|."""
        return self.scale

    def labels_of(self, table, raw) -> list[float]:
        return [_number(table, n, v, self.label_column) for n, v in raw]

    def label_tensor(self, examples) -> torch.Tensor:
        """The target divided by `value_scale` (§5: STS-B's score / 5)."""
        return torch.tensor([e.label / self.value_scale for e in examples])

    def build_model(self, cfg: AnyModelConfig) -> nn.Module:
        return build_head("sequence", cfg, 1)

    def losses(self, model, batch) -> torch.Tensor:
        logits = self.training_logits(model, batch)
        return (logits.squeeze(-1).float() - batch["labels"]) ** 2

    def _values(self, outputs) -> list[float]:
        return (outputs["logits"].float().squeeze(-1) * self.value_scale).tolist()

    def decode(self, examples, encoded, outputs) -> list[dict]:
        preds = [round(v, 4) for v in self._values(outputs)]
        return [
            {"id": e.id, "prediction": p, "label": e.label}
            for e, p in zip(examples, preds, strict=True)
        ]

    def score(self, predictions) -> dict[str, float]:
        scores = metrics.correlations(
            [p["label"] for p in predictions], [p["prediction"] for p in predictions]
        )
        return {k: scores[k] for k in self.metrics}

    def baseline(self, train) -> dict:
        # The training mean: the best constant under the squared error the head is trained on.
        # Pearson and Spearman of a constant are undefined; `metrics.correlations` scores them
        # 0.0, as it scores a seed that collapsed to one value, so that such a seed is compared
        # like for like and does not beat it (null would leave nothing to compare).
        mean = statistics.fmean(e.label for e in train)
        return {
            "rule": f"the training mean {mean:.2f} for every {self.baseline_unit}",
            "prediction": round(mean, 4),
        }

    def records(self, examples, encoded, outputs, all_scores=False) -> list[dict]:
        """`electra predict`: {"id", "value"} on the targets' scale."""
        return [
            {"id": e.id, "value": v} for e, v in zip(examples, self._values(outputs), strict=True)
        ]

    def head_config(self) -> dict[str, Any]:
        return {"scale": self.scale, **self._columns_config()}

    def with_head_config(self, head):
        self.scale = float(head["scale"])
        self._columns_from_head(head)
        return self


def _text(table: Table, number: int, value: Any, column: str) -> str:
    """A text field: a string (JSON Lines and Parquet may hold other values, refused here rather
    than read as their Python spelling, "[1, 2]" or "None")."""
    if value is not None and not isinstance(value, str):
        raise ElectraError(
            f"{table.where(number, column)}: {_kind(value)} ({str(value)[:40]}) where a text is "
            "expected: write the text as a string (in quotes, in JSON)"
        )
    if value is None or not value.strip():  # None: a JSON field absent from this line, or a null
        what = "no text" if value is None else "empty text"
        raise ElectraError(f"{table.where(number, column)}: {what}: fill it in or remove the row")
    return value


def _kind(value: Any) -> str:
    """What a JSON (or Parquet) value is, in words."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list | tuple):
        return "a list"
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"


def same_kind_of_label(table: Table, raw: list[tuple[int, Any]], column: str) -> None:
    """A file's labels are JSON booleans all, or none: `true` is the label "true", and one among
    "1"/"0" labels (or 1/0) would be a third class where the user meant 1; refused, naming the
    first label of the fewer kind."""
    booleans = [(n, v) for n, v in raw if isinstance(v, bool)]
    others = [(n, v) for n, v in raw if v is not None and not isinstance(v, bool)]
    if not booleans or not others:
        return
    if len(booleans) <= len(others):
        (number, value), usual = booleans[0], "not booleans"
        shown = f"{str(value).lower()} (a JSON boolean)"
    else:
        (number, value), usual = others[0], "JSON booleans (true/false)"
        shown = repr(value)
    raise ElectraError(
        f"{table.where(number, column)}: label {shown} where the file's other labels are "
        f'{usual}: write every label alike, as true/false or as strings ("1"/"0")'
    )


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


def label_name(table: Table, number: int, value: Any, column: str) -> str:
    """A label as text, the same whatever the format: strings stripped, integers and integral
    floats (`1.0` as Parquet, pandas or JSON may write them, as a number or as text) written as
    integers, JSON booleans as true/false (a file mixing them with other labels is refused:
    `same_kind_of_label`)."""
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
    """A classifier's labels: given with --labels, fitted to the training file, or saved with a
    fine-tuned model; an unknown label is an error naming where the set came from."""

    def __init__(self, labels: Sequence[str]):
        self.names = tuple(labels)
        self.source = "--labels" if self.names else ""
        twice = sorted(n for n, k in collections.Counter(self.names).items() if k > 1)
        if twice:
            raise ElectraError(f"--labels names {twice[0]!r} twice: give each label once")

    def fitted(self, names: set[str], path: Path, column: str) -> LabelSet:
        """The set for a training file whose labels are `names`: the given one, else theirs in
        `label_order`. A classifier needs two labels or more."""
        fitted = copy.copy(self)
        if not self.names:
            fitted.names, fitted.source = label_order(names), "the training file's labels"
        by_case = collections.defaultdict(list)
        for name in fitted.names:
            by_case[name.casefold()].append(name)
        for alike in (v for v in by_case.values() if len(v) > 1):
            print(
                f"warning: {path}: labels {' and '.join(map(repr, alike))} differ only in "
                "case and are distinct classes; if they are one, write them alike",
                file=sys.stderr,
            )
        if len(fitted.names) < 2:
            raise ElectraError(
                f"{path}, column {column!r}: one label ({fitted.names[0]!r}) in the training "
                "file: a classifier needs two or more"
            )
        return fitted

    def check(self, name: str, table: Table, number: int, column: str) -> None:
        if name not in self.names:
            shown = ", ".join(map(repr, self.names))[:200]
            fix = "add it to --labels" if self.source == "--labels" else "fix or remove the row"
            raise ElectraError(
                f"{table.where(number, column)}: label {name!r} is not among {self.source} "
                f"({shown}): {fix}"
            )
