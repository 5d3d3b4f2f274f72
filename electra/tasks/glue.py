"""The GLUE tasks: reading the standard TSV files, the paper's [CLS] head, the official metrics,
and test predictions in the GLUE submission format.

Files are read with quoting off (several hold bare `"`), a UTF-8 byte-order mark is dropped (MRPC),
and columns are found by header name, except in CoLA's headerless train/dev files.
"""

from __future__ import annotations

import collections
import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import electra.tasks.metrics as metrics
from electra.atomic import write_text_atomic
from electra.config import ModelConfig
from electra.data.tokenizer import special_ids
from electra.errors import ElectraError
from electra.model.heads import ElectraForSequenceClassification
from electra.tasks.base import Encoded, Task, pack, require_suffix, to_tensors, token_ids


@dataclass(frozen=True)
class Example:
    id: str
    text_a: str
    text_b: str | None
    label: str | float | None  # None in test files


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
    with open(path, encoding="utf-8-sig", newline="") as f:
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


def line_texts(line: str, number: int, source: str, count: int) -> list[str]:
    """The `count` TAB-separated texts of an input line (one: no TAB); any other number of
    fields, or an empty text, is an error naming the line."""
    texts = line.split("\t")
    if len(texts) != count:
        want = "two texts separated by a TAB" if count == 2 else "one text (no TAB)"
        raise ElectraError(
            f"{source}, line {number}: {len(texts)} TAB-separated fields, but this model reads "
            f"{want} per line"
        )
    if not all(t.strip() for t in texts):
        raise ElectraError(f"{source}, line {number}: an empty text: fill it in")
    return texts


class GlueTask(Task):
    family = "glue"
    packable = True

    def __init__(self, spec: GlueSpec):
        self.spec = spec
        self.name = spec.name
        self.epochs = spec.epochs
        self.main_metric = (f"{spec.dev_sets[0][0]}_" if len(spec.dev_sets) > 1 else "") + (
            spec.metrics[0]
        )
        self.files = {
            "train": {"train": ("train.tsv",)},
            "dev": {name: (file,) for name, file in spec.dev_sets},
            "test": {name: (file,) for name, file in spec.test_sets},
        }

    @property
    def regression(self) -> bool:
        return self.spec.labels is None

    @property
    def value_scale(self) -> float:
        """What the regression head's output is multiplied by to give a value on the labels'
        scale (decode, records, export): the head is trained on score/5 (§5), so STS-B's
        predictions come back on 0-5."""
        return 5.0

    def read(self, path: Path, split: str) -> list[Example]:
        return read_glue_tsv(path, self.spec, split)

    def double_unordered(self, examples: list[Example]) -> list[Example]:
        """Adds each pair swapped (the official `double_unordered`, for MRPC and STS-B)."""
        if not self.spec.pairs_symmetric:
            return super().double_unordered(examples)
        swapped = [Example(f"{e.id}-swapped", e.text_b, e.text_a, e.label) for e in examples]
        return examples + swapped

    def encode(self, examples, tokenizer, max_len, training) -> Encoded:
        special = special_ids(tokenizer)
        a = token_ids(tokenizer, [e.text_a for e in examples])
        pairs = examples and examples[0].text_b is not None
        b = token_ids(tokenizer, [e.text_b for e in examples]) if pairs else [None] * len(a)
        tensors = to_tensors(
            [pack(x, y, special, max_len) for x, y in zip(a, b, strict=True)], max_len, special.pad
        )
        if examples[0].label is not None:
            tensors["labels"] = self.label_tensor(examples)
        return Encoded(tensors)

    def label_tensor(self, examples: list[Example]) -> torch.Tensor:
        """The training targets: a class index, or a regression target divided by `value_scale`
        (§5: STS-B's score / 5)."""
        if self.regression:
            return torch.tensor([e.label / self.value_scale for e in examples])
        return torch.tensor([self.spec.labels.index(e.label) for e in examples])

    def build_model(self, cfg: ModelConfig) -> ElectraForSequenceClassification:
        return ElectraForSequenceClassification(
            cfg, 1 if self.regression else len(self.spec.labels)
        )

    def training_logits(self, model, batch) -> torch.Tensor:
        """The head's logits [B, outputs] for a training batch, packed (electra.finetuning.packing) or not."""
        return model(
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
            batch.get("position_ids"),
            batch.get("cls_index"),
        )

    def losses(self, model, batch) -> torch.Tensor:
        logits = self.training_logits(model, batch)
        if self.regression:
            return (logits.squeeze(-1).float() - batch["labels"]) ** 2
        return F.cross_entropy(logits.float(), batch["labels"], reduction="none")

    def infer(self, model, batch):
        logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        return {"logits": logits.float()}

    def decode(self, examples, encoded, outputs) -> list[dict]:
        logits = outputs["logits"]
        if self.regression:
            values = (logits.squeeze(-1) * self.value_scale).tolist()
            preds = [round(v, 4) for v in values]
        else:
            preds = [self.spec.labels[i] for i in logits.argmax(-1).tolist()]
        return [
            {"id": e.id, "prediction": p, "label": e.label}
            for e, p in zip(examples, preds, strict=True)
        ]

    def score(self, predictions) -> dict[str, float]:
        gold = [p["label"] for p in predictions]
        pred = [p["prediction"] for p in predictions]
        if self.regression:
            scores = metrics.correlations(gold, pred)
        else:
            scores = {}
            if "accuracy" in self.spec.metrics:
                scores["accuracy"] = metrics.accuracy(gold, pred)
            if "f1" in self.spec.metrics:
                scores["f1"] = metrics.binary_f1([int(g) for g in gold], [int(p) for p in pred])
            if "mcc" in self.spec.metrics:
                scores["mcc"] = metrics.mcc(gold, pred)
        return {k: scores[k] for k in self.spec.metrics}

    def baseline(self, train) -> dict:
        if self.regression:
            # The training mean: the best constant under the squared error the head is trained on.
            # Pearson and Spearman of a constant are undefined; `metrics.correlations` scores them
            # 0.0, as it scores a seed that collapsed to one value, so that such a seed is compared
            # like for like and does not beat it (null would leave nothing to compare).
            mean = statistics.fmean(e.label for e in train)
            return {
                "rule": f"the training mean {mean:.2f} for every pair",
                "prediction": round(mean, 4),
            }
        counts = collections.Counter(e.label for e in train)
        majority = max(self.spec.labels, key=lambda label: counts[label])  # a tie: the first label
        share = f"{100.0 * counts[majority] / len(train):.1f}% of train"
        return {
            "rule": f"the training majority class {majority!r} ({share}) for every example",
            "prediction": majority,
        }

    def constant_predictions(self, prediction, examples) -> list[dict]:
        return [{"id": e.id, "prediction": prediction, "label": e.label} for e in examples]

    def write_submission(self, predictions, set_name, out_dir) -> Path:
        """`index<TAB>prediction` rows under a header, the file name GLUE's server expects;
        STS-B scores are clipped to [0, 5]."""
        name = self.spec.submission + _SUBMISSION_SUFFIX.get(set_name, "")
        path = Path(out_dir) / f"{name}.tsv"
        lines = ["index\tprediction"]
        for p in predictions:
            value = p["prediction"]
            if self.regression:
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

    def from_line(self, line: str, number: int, source: str) -> Example:
        """A text, or a TAB-separated pair for a pair task."""
        texts = line_texts(line, number, source, 2 if self.spec.test.text_b is not None else 1)
        return Example(str(number - 1), texts[0], texts[1] if len(texts) > 1 else None, None)

    def records(self, examples, encoded, outputs, all_scores=False) -> list[dict]:
        """{"id", "label", "score"} (+ "scores": every label's) from the softmax of the logits;
        regression: {"id", "value"} on the labels' scale. The labels are the spec's, so the
        own-data tasks built on this one inherit it."""
        logits = outputs["logits"].float()
        if self.regression:
            values = (logits.squeeze(-1) * self.value_scale).tolist()
            return [{"id": e.id, "value": v} for e, v in zip(examples, values, strict=True)]
        labels = self.spec.labels
        rows = []
        for e, p in zip(examples, logits.softmax(-1).tolist(), strict=True):
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
