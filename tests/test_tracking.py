"""The discriminator AUC accumulated on the device agrees with scikit-learn's."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import roc_auc_score

from electra.engine.tracking import auc_from_histograms, auc_histograms


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
