"""Multilabel classification of a text or a pair of texts on the user's own files: any number of
labels per example, a sigmoid per label on the [CLS] head of `electra.tasks.labelled`. A cell holds
a list (JSON Lines, Parquet), a JSON list in text, or labels separated by `|` (or `,`)."""

from __future__ import annotations

import collections
import json
from typing import Any

import torch
import torch.nn.functional as F

import electra.tasks.metrics as metrics
from electra.errors import ElectraError
from electra.tasks.labelled import ClassificationTask, label_name, label_order
from electra.tasks.settings import ClassificationSettings
from electra.tasks.tables import Table


class MultilabelTask(ClassificationTask):
    """Any number of labels per text or pair: a sigmoid per label on the [CLS] head, trained with
    binary cross-entropy summed over the labels; a label is predicted above `threshold`.
    Micro-F1 (the main metric) and macro-F1."""

    name = "multilabel"
    main_metric = "micro_f1"
    multilabel = True  # export's `problem_type`: multi_label_classification

    def __init__(self, settings: ClassificationSettings | None = None):
        settings = settings or ClassificationSettings()
        super().__init__(settings)
        self.threshold = settings.threshold

    def _names(self, label: tuple[str, ...]) -> tuple[str, ...]:
        return label

    def labels_of(self, table, raw) -> list[tuple[str, ...]]:
        sets = [label_list(table, n, v, self.label_column) for n, v in raw]
        self._check(table, raw, sets)
        return [self._ordered(s) for s in sets]

    def _ordered(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """A set of labels in the label set's order (as written before it is fitted)."""
        order = {name: i for i, name in enumerate(self.labels)}
        return tuple(sorted(names, key=order.__getitem__)) if order else names

    def label_tensor(self, examples) -> torch.Tensor:
        """Each example's labels as a multi-hot row, [N, 1, K]: `electra.finetuning.inference.trim` cuts dim 1 of
        [N, max_len] tensors, which K may equal."""
        hot = torch.zeros(len(examples), 1, len(self.labels))
        index = {name: i for i, name in enumerate(self.labels)}
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
        names = self.labels
        return [
            [names[j] for j in torch.nonzero(row > self.threshold).flatten().tolist()]
            for row in probs
        ]

    def records(self, examples, encoded, outputs, all_scores=False) -> list[dict]:
        """`electra predict`: {"id", "labels" (those above `threshold`, as decode chooses them),
        "scores" (every label's sigmoid)}."""
        probs = torch.sigmoid(outputs["logits"].float())
        names = self.labels
        return [
            {"id": e.id, "labels": chosen, "scores": dict(zip(names, p, strict=True))}
            for e, chosen, p in zip(examples, self._chosen(probs), probs.tolist(), strict=True)
        ]

    def score(self, predictions) -> dict[str, float]:
        gold = [p["label"] for p in predictions]
        pred = [p["prediction"] for p in predictions]
        names = self.labels or label_order({n for s in (*gold, *pred) for n in s})
        return metrics.multilabel_f1(gold, pred, names)

    def baseline(self, train) -> dict:
        """The most frequent training label set (the first seen of a tie) for every example."""
        # Each set in the label set's order: a training file read before the set was fitted
        # holds its labels as written.
        counts = collections.Counter(self._ordered(e.label) for e in train)
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
