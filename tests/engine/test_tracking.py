"""A logging window: the training step sums a step function's statistics and knows nothing of
objectives; what a log shows is the step function's (`Objective.metrics`), the discriminator's AUC
included, which agrees with scikit-learn's."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
import torch
from sklearn.metrics import roc_auc_score

import electra.engine.step as step_module
from electra.engine.step import Window
from electra.objectives import StepOutput
from electra.objectives.metrics import (
    AUC_HISTOGRAMS,
    auc_from_histograms,
    auc_histograms,
    auc_stat,
    detection_metrics,
)


def test_histogram_auc_matches_sklearn_over_several_batches():
    torch.manual_seed(0)
    pos, neg, all_scores, all_labels = 0, 0, [], []
    for _ in range(3):
        labels = torch.rand(16, 32) < 0.15
        mask = torch.rand(16, 32) < 0.9
        logits = torch.randn(16, 32) + 1.5 * labels  # replaced tokens score higher
        p, n = auc_histograms(logits, labels, mask)
        pos, neg = pos + p, neg + n
        all_scores.append(logits[mask])
        all_labels.append(labels[mask])
    expected = roc_auc_score(torch.cat(all_labels).numpy(), torch.cat(all_scores).numpy())
    assert auc_from_histograms(pos, neg) == pytest.approx(expected, abs=1e-3)
    assert int(pos.sum() + neg.sum()) == sum(len(s) for s in all_scores)  # padding left out


def test_auc_edge_cases():
    logits = torch.tensor([[5.0, -5.0, 0.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    perfect = auc_histograms(logits, torch.tensor([[True, False, False]]), mask)
    assert auc_from_histograms(*perfect) == 1.0
    one_class = auc_histograms(logits, torch.zeros(1, 3, dtype=torch.bool), mask)
    assert math.isnan(auc_from_histograms(*one_class))


def test_the_step_returns_a_loss_and_stats_and_names_no_objective():
    assert [f.name for f in dataclasses.fields(StepOutput)] == ["loss", "stats"]
    source = Path(step_module.__file__).read_text(encoding="utf-8")
    named = re.findall(r"disc\w*|\w*auc\w*|mlm\w*|generator|replaced\w*|electra15|electric", source)
    assert not named, named


def _out(loss: float, **stats) -> StepOutput:
    return StepOutput(torch.tensor(loss), {k: torch.as_tensor(v) for k, v in stats.items()})


def test_window_logs_what_the_metrics_function_makes_of_the_sums():
    seen = {}

    def metrics(sums, counts):
        seen.update(sums=sums, counts=counts)
        return {"loss": sums["loss"].item() / counts["loss"], "derived": sums["hist"].sum().item()}

    window = Window(metrics)
    window.add(_out(1.0, hist=[1.0, 2.0]))
    window.add(_out(3.0, hist=[3.0, 4.0], late=5.0))  # a statistic reported in part of a window
    window.end_step(torch.tensor(2.0), torch.tensor(False))
    record = window.summary()
    assert record == {"loss": 2.0, "grad_norm": 2.0, "skipped_steps": 0, "derived": 10.0}
    assert seen["sums"]["hist"].tolist() == [4.0, 6.0]  # summed whole, not averaged
    assert seen["counts"] == {"hist": 2, "late": 1, "loss": 2}
    # The default: each scalar's mean over the micro-batches that reported it; the rest unlogged.
    window = Window()
    window.add(_out(1.0, hist=[1.0, 2.0]))
    window.add(_out(3.0, late=5.0))
    window.end_step(torch.tensor(2.0), torch.tensor(False))
    assert window.summary() == {"late": 5.0, "loss": 2.0, "grad_norm": 2.0, "skipped_steps": 0}


def test_detection_metrics_turn_summed_histograms_into_the_windows_auc():
    torch.manual_seed(0)
    labels = torch.rand(8, 16) < 0.2
    logits = torch.randn(8, 16) + 2.0 * labels
    mask = torch.ones(8, 16, dtype=torch.bool)
    window = Window(detection_metrics)
    for rows in (slice(0, 4), slice(4, 8)):
        window.add(
            _out(
                1.0,
                disc_loss=0.5,
                **{AUC_HISTOGRAMS: auc_stat(logits[rows], labels[rows], mask[rows])},
            )
        )
    window.end_step(torch.tensor(1.0), torch.tensor(False))
    record = window.summary()
    assert list(record) == ["disc_loss", "loss", "grad_norm", "skipped_steps", "disc_auc"]
    assert record["disc_auc"] == pytest.approx(
        auc_from_histograms(*auc_histograms(logits, labels, mask))
    )
