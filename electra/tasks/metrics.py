"""Task metrics: GLUE's official metrics (scikit-learn/scipy), entity-level F1 (seqeval), and SQuAD
EM/F1 scored as the official v1.1 and v2.0 evaluation scripts score them.

Every metric is reported on the 0-100 scale the paper and the leaderboards use.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

# --- GLUE -----------------------------------------------------------------------------------------


def accuracy(gold: Sequence, pred: Sequence) -> float:
    return 100.0 * float(accuracy_score(gold, pred))


def binary_f1(gold: Sequence, pred: Sequence) -> float:
    """F1 of the positive class (label 1), as GLUE scores MRPC and QQP."""
    return 100.0 * float(f1_score(gold, pred, pos_label=1, average="binary", zero_division=0))


def mcc(gold: Sequence, pred: Sequence) -> float:
    return 100.0 * float(matthews_corrcoef(gold, pred))


def class_f1(gold: Sequence, pred: Sequence, positive) -> float:
    """F1 of one class (`positive`) among any labels, strings or integers: a two-class task's F1."""
    return 100.0 * float(f1_score(gold, pred, labels=[positive], average="macro", zero_division=0))


def macro_f1(gold: Sequence, pred: Sequence) -> float:
    """The unweighted mean of the per-class F1 over the classes in gold or predictions."""
    return 100.0 * float(f1_score(gold, pred, average="macro", zero_division=0))


def multilabel_f1(
    gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]], labels: Sequence[str]
) -> dict[str, float]:
    """Micro- and macro-F1 of label sets over `labels` (every label is a column, those never
    gold nor predicted scoring 0, as scikit-learn's `zero_division=0` has it)."""
    from sklearn.preprocessing import MultiLabelBinarizer

    binarize = MultiLabelBinarizer(classes=list(labels)).fit([])
    y, p = binarize.transform(gold), binarize.transform(pred)
    return {
        "micro_f1": 100.0 * float(f1_score(y, p, average="micro", zero_division=0)),
        "macro_f1": 100.0 * float(f1_score(y, p, average="macro", zero_division=0)),
    }


def correlations(gold: Sequence[float], pred: Sequence[float]) -> dict[str, float]:
    gold, pred = np.asarray(gold, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    if np.ptp(pred) == 0 or np.ptp(gold) == 0:  # undefined: a constant prediction has no rank order
        return {"pearson": 0.0, "spearman": 0.0}
    return {
        "pearson": 100.0 * float(pearsonr(gold, pred)[0]),
        "spearman": 100.0 * float(spearmanr(gold, pred)[0]),
    }


# --- Named entities -------------------------------------------------------------------------------


def entity_scores(gold: list[list[str]], pred: list[list[str]]) -> dict[str, float]:
    """Entity-level precision, recall and F1 over IOB tag sequences (seqeval, conlleval rules)."""
    from seqeval.metrics import f1_score as seq_f1
    from seqeval.metrics import precision_score, recall_score

    return {
        "f1": 100.0 * float(seq_f1(gold, pred, zero_division=0)),
        "precision": 100.0 * float(precision_score(gold, pred, zero_division=0)),
        "recall": 100.0 * float(recall_score(gold, pred, zero_division=0)),
    }


# --- SQuAD ----------------------------------------------------------------------------------------

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation, drop the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str, empty_matches_empty: bool) -> float:
    """Bag-of-tokens F1. v2.0 scores an empty answer 1 against an empty gold and 0 otherwise;
    v1.1 never sees empty golds and scores an empty prediction 0."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if empty_matches_empty and (not pred or not ref):
        return float(pred == ref)
    same = sum((collections.Counter(pred) & collections.Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def squad_v1_scores(
    golds: Mapping[str, list[str]], predictions: Mapping[str, str]
) -> dict[str, float]:
    """The v1.1 script: the maximum over gold answers, averaged over every question; a question
    without a prediction scores 0."""
    em = f1 = 0.0
    for qid, answers in golds.items():
        if qid not in predictions:
            continue
        pred = predictions[qid]
        em += max(exact_match(pred, a) for a in answers)
        f1 += max(token_f1(pred, a, empty_matches_empty=False) for a in answers)
    total = max(1, len(golds))
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def squad_v2_scores(
    golds: Mapping[str, list[str]],
    predictions: Mapping[str, str],
    null_scores: Mapping[str, float] | None = None,
    threshold: float = 1.0,
) -> dict[str, float]:
    """The v2.0 script. `golds` maps each question to its answers ([] when unanswerable).

    With `null_scores` (the script's "na_prob" file: higher means more likely unanswerable), a
    question whose score exceeds `threshold` counts as answered with the empty string, and the best
    thresholds for exact match and F1 are searched as the script does.
    """
    exact, f1, has_answer = {}, {}, {}
    for qid, answers in golds.items():
        answers = [a for a in answers if normalize_answer(a)] or [""]
        has_answer[qid] = answers != [""]
        pred = predictions[qid]
        exact[qid] = max(exact_match(pred, a) for a in answers)
        f1[qid] = max(token_f1(pred, a, empty_matches_empty=True) for a in answers)
    nulls = null_scores or {qid: 0.0 for qid in golds}

    def thresholded(raw: dict[str, float]) -> dict[str, float]:
        return {q: float(not has_answer[q]) if nulls[q] > threshold else s for q, s in raw.items()}

    exact_t, f1_t = thresholded(exact), thresholded(f1)
    out = {"exact": _mean(exact_t.values()), "f1": _mean(f1_t.values()), "total": len(golds)}
    for name, subset in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in golds if has_answer[q] == subset]
        if qids:
            out[f"{name}_exact"] = _mean(exact_t[q] for q in qids)
            out[f"{name}_f1"] = _mean(f1_t[q] for q in qids)
            out[f"{name}_total"] = len(qids)
    if null_scores is not None:
        for name, raw in (("exact", exact), ("f1", f1)):
            best, thresh = _best_threshold(predictions, raw, nulls, has_answer)
            out[f"best_{name}"], out[f"best_{name}_thresh"] = best, thresh
    return out


def _mean(values) -> float:
    values = list(values)
    return 100.0 * sum(values) / max(1, len(values))


def _best_threshold(predictions, scores, nulls, has_answer) -> tuple[float, float]:
    """Walks the questions from most to least answerable, answering each in turn, and keeps the
    threshold with the best total (the v2.0 script's `find_best_thresh`)."""
    current = best = sum(1 for q in scores if not has_answer[q])  # everything answered empty
    best_thresh = 0.0
    for qid in sorted(nulls, key=lambda q: nulls[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, best_thresh = current, nulls[qid]
    return 100.0 * best / max(1, len(scores)), best_thresh
