"""A fine-tuning run's examples and predictions: reading splits, predicting and scoring them,
reading `predictions.jsonl` back (`electra.jsonl` writes it), and the median and spread over
seeds."""

from __future__ import annotations

import statistics
from pathlib import Path

from torch import nn

from electra.engine.runtime import (
    Runtime,
)
from electra.errors import ElectraError
from electra.finetuning.inference import predict
from electra.jsonl import read_jsonl
from electra.tasks.base import Encoded, Task, utf8_text
from electra.tasks.splits import SplitFiles


def read_split(task: Task, files: SplitFiles, split: str) -> dict[str, list]:
    """A split's examples by evaluation set (MNLI's dev split has two: matched and mismatched).
    A task fitted to its training file reads the others (`read_train`)."""
    return {name: read_file(task, path, split) for name, path in files[split].items()}


def read_train(task: Task, files: SplitFiles) -> tuple[Task, list]:
    """The task fitted to the training examples (`Task.fit`: the label set, the tag set, ...),
    and those examples. Read first: the other splits are read by the fitted task."""
    path = files.file("train")
    train = read_file(task, path, "train")
    return task.fit(train, path), train


def read_file(task: Task, path: Path, split: str) -> list:
    """One file's examples, read by the task; a file that is not UTF-8 is one error naming it,
    and so is an id given twice in a dev or test file, whose predictions are matched by id."""
    with utf8_text(path):
        examples = task.read(path, split)
    if split != "train":
        check_unique_ids(path, examples)
    return examples


def check_unique_ids(path: Path, examples: list) -> None:
    seen: set[str] = set()
    for e in examples:
        if e.id in seen:
            raise ElectraError(
                f"{path}: the id {e.id!r} is given to two examples: make the ids unique "
                "(or leave them out, and the examples are numbered)"
            )
        seen.add(e.id)


def evaluate_sets(
    task: Task,
    model: nn.Module,
    sets: dict[str, list],
    encoded: dict[str, Encoded],
    runtime: Runtime,
) -> tuple[dict[str, float], list[dict]]:
    """Predictions for every set, and their scores where gold labels are known."""
    scores, rows = {}, []
    for name, examples in sets.items():
        preds = predict(task, model, examples, encoded[name], runtime)
        if all(p["label"] is not None for p in preds):
            prefix = f"{name}_" if len(sets) > 1 else ""
            scores.update({prefix + k: v for k, v in task.score(preds).items()})
        rows += [{**p, "set": name} if len(sets) > 1 else p for p in preds]
    return scores, rows


def score_predictions(task: Task, path: Path) -> dict[str, float]:
    """Recomputes a run's metrics from its `predictions.jsonl`."""
    rows = read_jsonl(path)
    missing = [r.get("id") for r in rows if "prediction" not in r or r.get("label") is None]
    if missing:
        raise ElectraError(
            f"{path}: {len(missing)} rows lack a prediction or a gold label (first id: {missing[0]})"
        )
    sets: dict[str, list[dict]] = {}
    for r in rows:
        sets.setdefault(r.get("set", ""), []).append(r)
    scores = {}
    for name, preds in sets.items():
        prefix = f"{name}_" if len(sets) > 1 else ""
        scores.update({prefix + k: v for k, v in task.score(preds).items()})
    return scores


def summarize(per_seed: list[dict]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Median of each metric over seeds, and its spread (min, max, standard deviation)."""
    names = per_seed[0]["metrics"].keys()
    medians, spread = {}, {}
    for name in names:
        values = [s["metrics"][name] for s in per_seed]
        medians[name] = statistics.median(values)
        spread[name] = {
            "min": min(values),
            "max": max(values),
            "std": statistics.pstdev(values),
        }
    return medians, spread
