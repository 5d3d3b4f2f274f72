"""Task metrics against scikit-learn/scipy and hand-computed values, and SQuAD scoring on cases
whose EM/F1 the official scripts' rules fix by hand."""

from __future__ import annotations

import math
import random

import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from electra.tasks import get_task, metrics


def glue_preds(task, gold, pred):
    return get_task(task).score(
        [
            {"id": str(i), "prediction": p, "label": g}
            for i, (g, p) in enumerate(zip(gold, pred, strict=True))
        ]
    )


def test_glue_metrics_match_sklearn_and_scipy():
    rng = random.Random(0)
    gold = [rng.choice("01") for _ in range(200)]
    pred = [g if rng.random() < 0.7 else rng.choice("01") for g in gold]
    g, p = [int(x) for x in gold], [int(x) for x in pred]
    mrpc = glue_preds("mrpc", gold, pred)
    assert mrpc["accuracy"] == pytest.approx(100 * accuracy_score(g, p))
    assert mrpc["f1"] == pytest.approx(100 * f1_score(g, p))
    assert glue_preds("cola", gold, pred)["mcc"] == pytest.approx(100 * matthews_corrcoef(g, p))
    # MCC by its definition, from the confusion matrix
    tp = sum(a == b == 1 for a, b in zip(g, p, strict=True))
    tn = sum(a == b == 0 for a, b in zip(g, p, strict=True))
    fp = sum(a == 0 and b == 1 for a, b in zip(g, p, strict=True))
    fn = sum(a == 1 and b == 0 for a, b in zip(g, p, strict=True))
    by_hand = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert metrics.mcc(g, p) == pytest.approx(100 * by_hand)

    scores = [rng.uniform(0, 5) for _ in range(100)]
    noisy = [s + rng.gauss(0, 1) for s in scores]
    sts = glue_preds("stsb", scores, noisy)
    assert sts["spearman"] == pytest.approx(100 * spearmanr(scores, noisy)[0])
    assert sts["pearson"] == pytest.approx(100 * pearsonr(scores, noisy)[0])
    assert list(sts) == ["spearman", "pearson"]  # the paper reports Spearman


def test_entity_f1_counts_whole_entities():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    half = [["B-PER", "O", "O", "B-LOC"]]  # the person is cut short: one of two entities right
    s = metrics.entity_scores(gold, half)
    assert s["precision"] == pytest.approx(50.0)  # B-PER alone is a wrong entity
    assert s["recall"] == pytest.approx(50.0)
    assert metrics.entity_scores(gold, gold)["f1"] == 100.0


def test_squad_normalization_and_f1_by_hand():
    assert metrics.normalize_answer("The  Cat's, HAT!") == "cats hat"
    assert metrics.normalize_answer("an apple a day") == "apple day"
    assert metrics.exact_match("the Eiffel tower.", "Eiffel Tower") == 1.0
    # pred {cat, sat}, gold {cat, sat, on}: precision 1, recall 2/3, F1 0.8
    assert metrics.token_f1("the cat sat", "a cat sat on", False) == pytest.approx(0.8)
    assert metrics.token_f1("", "cat", False) == 0.0
    assert metrics.token_f1("", "", True) == 1.0  # v2.0: empty against no-answer
    assert metrics.token_f1("cat", "", True) == 0.0


def test_squad_v1_takes_the_best_gold_and_counts_missing_as_wrong():
    golds = {"q1": ["Denver Broncos", "The Broncos"], "q2": ["1990"], "q3": ["blue"]}
    preds = {"q1": "broncos", "q2": "in 1990"}  # q3 missing
    s = metrics.squad_v1_scores(golds, preds)
    # q1: EM 1 against "The Broncos"; q2: EM 0, F1 2/3; q3: 0
    assert s["exact_match"] == pytest.approx(100 / 3)
    assert s["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)


def test_squad_v2_no_answers_thresholds_and_best_threshold():
    golds = {"a": ["red car"], "b": [], "c": ["blue"], "d": []}
    preds = {"a": "red car", "b": "green", "c": "blue sky", "d": "x"}
    nulls = {"a": -3.0, "b": 2.0, "c": -1.0, "d": 0.5}
    # Threshold 0: b and d answer empty (correct); a is exact; c has F1 2/3.
    s = metrics.squad_v2_scores(golds, preds, nulls, threshold=0.0)
    assert s["exact"] == pytest.approx(75.0)
    assert s["f1"] == pytest.approx(100 * (1 + 1 + 2 / 3 + 1) / 4)
    assert s["HasAns_exact"] == pytest.approx(50.0) and s["NoAns_exact"] == 100.0
    # Best exact: answer only a (c's span is not exact) -> 3/4 at threshold -3. Best F1: answer
    # a and c (c adds 2/3) and abstain on d and b -> (1 + 2/3 + 1 + 1) / 4 at threshold -1.
    assert s["best_exact"] == pytest.approx(75.0) and s["best_exact_thresh"] == -3.0
    assert s["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4) and s["best_f1_thresh"] == -1.0
    # Without null scores every prediction stands: b and d are wrong.
    s = metrics.squad_v2_scores(golds, preds)
    assert s["exact"] == pytest.approx(25.0) and "best_exact" not in s
    # A gold list of only empty strings means unanswerable.
    assert metrics.squad_v2_scores({"e": [""]}, {"e": ""})["exact"] == 100.0
