"""The trivial baseline beside every fine-tuning score: what always answering the training set's
most common label gets, and a warning where the model does no better."""

from __future__ import annotations

import json
from typing import Any

from electra.tasks.base import Task

# Counts, and the thresholds SQuAD 2.0 tunes, are reported with the scores but are no bar to beat.
_NOT_SCORES = ("total", "thresh")


def baseline_scores(task: Task, fitted: dict | None, sets: dict[str, list]) -> dict | None:
    """The trivial predictor `fitted` (`Task.baseline`) scored with the task's own metrics on
    every labelled set, named as `evaluate_sets` names the model's scores: {"rule", "prediction",
    "metrics"}. None without a predictor or a labelled set."""
    if fitted is None:
        return None
    scores = {}
    for name, examples in sets.items():
        rows = task.constant_predictions(fitted["prediction"], examples)
        if all(r["label"] is not None for r in rows):
            prefix = f"{name}_" if len(sets) > 1 else ""
            scores.update(
                {prefix + k: v for k, v in task.score(rows).items() if not k.endswith(_NOT_SCORES)}
            )
    return {**fitted, "metrics": scores} if scores else None


def sole_prediction(rows: list[dict]) -> tuple[bool, Any]:
    """Whether every prediction (every tag, for tagging) is one value, and that value: the mark
    of a model that learned the label prior and nothing else."""
    values: set[str] = set()
    for r in rows:
        p = r["prediction"]
        values.update(json.dumps(v) for v in (p if isinstance(p, list) else [p]))
        if len(values) > 1:
            return False, None
    return bool(values), json.loads(values.pop()) if values else None


def judge(
    main_metric: str, baseline: dict | None, scores: dict[str, float], rows: list[dict]
) -> dict[str, Any]:
    """A run's flags: whether its main metric beats the baseline's (strictly: predicting the
    baseline's constant scores exactly the baseline; None without a baseline), and whether all its
    predictions are one value."""
    bar = (baseline or {}).get("metrics", {}).get(main_metric)
    single, _ = sole_prediction(rows)
    beats = None if bar is None or main_metric not in scores else scores[main_metric] > bar
    return {"beats_baseline": beats, "single_prediction": single}


def baseline_warning(
    seed: int, main_metric: str, baseline: dict | None, result: dict, rows: list[dict], cfg
) -> str | None:
    """The two lines `finetune` prints for a seed that does not beat the baseline, else None."""
    if result["beats_baseline"] is not False:
        return None
    single, value = sole_prediction(rows)
    shown = "the empty answer" if value == "" else repr(value)
    same = f"; every dev prediction is {shown}" if single else ""
    return (
        f"warning: seed {seed} does not beat the baseline: dev {main_metric} "
        f"{result['metrics'][main_metric]:.2f}, baseline {baseline['metrics'][main_metric]:.2f} "
        f"by predicting {baseline['rule']}{same}\n"
        f"  likely fixes: a longer-pretrained model, another --lr (this run {cfg.lr:g}) or more "
        f"--epochs (this run {cfg.epochs})"
    )


def summary_lines(results: dict[str, Any], split: str) -> list[str]:
    """What `electra finetune` and `electra evaluate` print: each metric with its spread over seeds
    and the baseline's score beside it, then what the baseline predicts."""
    baseline = results.get("baseline") or {"metrics": {}}
    seeds, lines = results.get("seeds", []), []
    for name, value in results["metrics"].items():
        notes = []
        if len(seeds) > 1:
            low, high = results["spread"][name]["min"], results["spread"][name]["max"]
            notes.append(f"min {low:.2f}, max {high:.2f} over {len(seeds)} seeds")
        if name in baseline["metrics"]:
            notes.append(f"baseline {baseline['metrics'][name]:.2f}")
            lost = results.get("seeds_not_beating_baseline")
            if name == results["main_metric"] and lost:
                which = ", ".join(map(str, lost))
                notes[-1] += f", not beaten by seed{'s' if len(lost) > 1 else ''} {which}"
            elif name == results["main_metric"] and results.get("beats_baseline") is False:
                notes[-1] += ", not beaten"
        shown = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"{results['task']} {split} {name}: {value:.2f}{shown}")
    if baseline.get("rule"):
        lines.append(f"baseline: {baseline['rule']}")
    return lines
