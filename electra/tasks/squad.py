"""SQuAD 1.1 and 2.0: the official JSON format, sliding windows over long contexts, the
answerability-aware head of docs/specification.md §Fine-tuning, n-best span decoding, and official
scoring.

Token-to-character offsets come from the tokenizer, so an answer is cut straight from the original
context. A window that does not hold the gold answer is trained to point at position 0 and is
labelled unanswerable; at prediction time each token is scored only in the window where it has the
most context on both sides (BERT's "max context" rule), and the question's null score is the lowest
(most answerable) answerability logit over its windows.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from electra import metrics
from electra.atomic import write_json_atomic
from electra.errors import ElectraError
from electra.heads import ElectraForQuestionAnswering
from electra.tasks.base import Encoded, Task, to_tensors
from electra.tokenizer import special_ids

ANSWERABILITY_WEIGHT = 0.5


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]  # (text, character offset); empty when unanswerable
    is_impossible: bool


def _line_of(raw: str, needle: str) -> int:
    at = raw.find(json.dumps(needle))
    return raw.count("\n", 0, at) + 1 if at >= 0 else 0


def read_squad(path: Path) -> list[Question]:
    raw = Path(path).read_text(encoding="utf-8")
    if not raw.strip():
        raise ElectraError(f"{path} is empty: expected a SQuAD JSON file")
    try:
        data = json.loads(raw)["data"]
    except (ValueError, KeyError, TypeError) as e:
        raise ElectraError(f"{path} is not a SQuAD JSON file ({{'data': [...]}}): {e}") from None
    questions = []
    try:
        for article in data:
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    answers = []
                    for a in qa.get("answers", []):
                        text, start = a["text"], int(a["answer_start"])
                        if context[start : start + len(text)] != text:
                            line = _line_of(raw, qa["id"])
                            raise ElectraError(
                                f"{path}, line {line} (question {qa['id']}): answer {text!r} is "
                                f"not at offset {start} of its context (found "
                                f"{context[start : start + len(text)]!r})"
                            )
                        answers.append((text, start))
                    impossible = bool(qa.get("is_impossible", False))
                    questions.append(
                        Question(qa["id"], qa["question"], context, tuple(answers), impossible)
                    )
    except (KeyError, TypeError) as e:
        raise ElectraError(f"{path}: a SQuAD entry lacks the field {e}") from None
    if not questions:
        raise ElectraError(f"{path} has no questions")
    return questions


def gold_answers(questions: list[Question]) -> dict[str, list[str]]:
    return {q.id: [] if q.is_impossible else [a[0] for a in q.answers] for q in questions}


class SquadTask(Task):
    family = "qa"
    epochs = 2
    max_seq_len = 512
    eval_batch_size = 8
    main_metric = "f1"

    def __init__(
        self,
        version: str = "2.0",
        doc_stride: int = 128,
        max_query_length: int = 64,
        n_best: int = 20,
        max_answer_length: int = 30,
        null_threshold: float = -2.75,
    ):
        self.version = version
        self.name = "squad1" if version == "1.1" else "squad2"
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length
        self.n_best = n_best
        self.max_answer_length = max_answer_length
        self.null_threshold = null_threshold
        v = "v1.1" if version == "1.1" else "v2.0"
        self.files = {s: {s: (f"{s}-{v}.json", f"{s}.json")} for s in ("train", "dev", "test")}

    def read(self, path, split):
        return read_squad(path)

    def encode(self, examples, tokenizer, max_len, training) -> Encoded:
        special = special_ids(tokenizer)
        questions = tokenizer.encode_batch([q.question for q in examples], add_special_tokens=False)
        contexts = tokenizer.encode_batch([q.context for q in examples], add_special_tokens=False)
        rows, starts, ends, impossible = [], [], [], []
        meta = {"example": [], "offsets": [], "max_context": []}
        for ex_index, (q, question, context) in enumerate(
            zip(examples, questions, contexts, strict=True)
        ):
            query = question.ids[: self.max_query_length]
            room = max_len - len(query) - 3
            if room < 1:
                raise ElectraError(
                    f"max_seq_len={max_len} leaves no room for the context after a "
                    f"{len(query)}-token question: raise it or lower max_query_length"
                )
            doc_ids, doc_offsets = context.ids, context.offsets
            span = _gold_tokens(q, doc_offsets) if training and not q.is_impossible else None
            windows = _windows(len(doc_ids), room, self.doc_stride)
            for w_start, w_len in windows:
                ids = [
                    special.cls,
                    *query,
                    special.sep,
                    *doc_ids[w_start : w_start + w_len],
                    special.sep,
                ]
                types = [0] * (len(query) + 2) + [1] * (w_len + 1)
                rows.append((ids, types))
                first = len(query) + 2
                offsets = [None] * first + list(doc_offsets[w_start : w_start + w_len]) + [None]
                meta["example"].append(ex_index)
                meta["offsets"].append(offsets)
                meta["max_context"].append(
                    [False] * first
                    + [
                        _is_max_context(windows, (w_start, w_len), w_start + i)
                        for i in range(w_len)
                    ]
                    + [False]
                )
                inside = span is not None and w_start <= span[0] and span[1] < w_start + w_len
                starts.append(span[0] - w_start + first if inside else 0)
                ends.append(span[1] - w_start + first if inside else 0)
                impossible.append(0.0 if inside else 1.0)
        tensors = to_tensors(rows, max_len, special.pad)
        if training:
            tensors["start_positions"] = torch.tensor(starts)
            tensors["end_positions"] = torch.tensor(ends)
            tensors["is_impossible"] = torch.tensor(impossible)
        return Encoded(tensors, meta)

    def build_model(self, cfg) -> ElectraForQuestionAnswering:
        return ElectraForQuestionAnswering(cfg)

    def losses(self, model, batch) -> torch.Tensor:
        out = model(
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
            start_positions=batch["start_positions"],
        )
        start = F.cross_entropy(
            out["start_logits"].float(), batch["start_positions"], reduction="none"
        )
        end = F.cross_entropy(out["end_logits"].float(), batch["end_positions"], reduction="none")
        answerable = F.binary_cross_entropy_with_logits(
            out["answerable_logit"].float(), batch["is_impossible"], reduction="none"
        )
        return (start + end) / 2 + ANSWERABILITY_WEIGHT * answerable

    def infer(self, model, batch):
        out = model(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], n_top=self.n_best
        )
        return {k: v.float() if v.is_floating_point() else v for k, v in out.items()}

    def decode(self, examples, encoded, outputs) -> list[dict]:
        best: dict[int, tuple[float, str]] = {}
        null: dict[int, float] = defaultdict(lambda: math.inf)
        start_lp, start_ix = outputs["start_log_probs"].tolist(), outputs["start_index"].tolist()
        end_lp, end_ix = outputs["end_log_probs"].tolist(), outputs["end_index"].tolist()
        answerable = outputs["answerable_logit"].tolist()
        for row, ex_index in enumerate(encoded.meta["example"]):
            offsets = encoded.meta["offsets"][row]
            max_context = encoded.meta["max_context"][row]
            context = examples[ex_index].context
            null[ex_index] = min(null[ex_index], answerable[row])
            for i, s in enumerate(start_ix[row]):
                if s >= len(offsets) or offsets[s] is None or not max_context[s]:
                    continue
                for j, e in enumerate(end_ix[row][i]):
                    if e >= len(offsets) or offsets[e] is None or e < s:
                        continue
                    if e - s + 1 > self.max_answer_length:
                        continue
                    score = start_lp[row][i] + end_lp[row][i][j]
                    if ex_index not in best or score > best[ex_index][0]:
                        best[ex_index] = (score, context[offsets[s][0] : offsets[e][1]])
        golds = gold_answers(examples)
        out = []
        for ex_index, q in enumerate(examples):
            span = best.get(ex_index, (0.0, ""))[1]
            null_score = null[ex_index]
            no_answer = self.version != "1.1" and null_score > self.null_threshold
            out.append(
                {
                    "id": q.id,
                    "prediction": "" if no_answer else span,
                    "label": golds[q.id] if q.answers or q.is_impossible else None,
                    "best_span": span,
                    "null_score": null_score,
                }
            )
        return out

    def score(self, predictions) -> dict[str, float]:
        golds = {p["id"]: p["label"] for p in predictions}
        if self.version == "1.1":
            return metrics.squad_v1_scores(golds, {p["id"]: p["prediction"] for p in predictions})
        # The v2.0 script's use: best non-null spans, null scores and the threshold.
        return metrics.squad_v2_scores(
            golds,
            {p["id"]: p["best_span"] for p in predictions},
            {p["id"]: p["null_score"] for p in predictions},
            threshold=self.null_threshold,
        )

    def baseline(self, train) -> dict | None:
        if self.version == "1.1":
            return None  # every question has an answer: the empty one scores 0, no bar at all
        return {"rule": "no answer for every question", "prediction": ""}

    def constant_predictions(self, prediction, examples) -> list[dict]:
        golds = gold_answers(examples)
        # `score` reads the best span and the null score: an infinite null score answers empty
        # under any threshold, the best_* search included.
        null = math.inf if prediction == "" else -math.inf
        return [
            {
                "id": q.id,
                "prediction": prediction,
                "label": golds[q.id] if q.answers or q.is_impossible else None,
                "best_span": prediction,
                "null_score": null,
            }
            for q in examples
        ]

    def write_submission(self, predictions, set_name, out_dir) -> Path:
        """The official format: {question id: answer text} (and null scores for 2.0)."""
        path = Path(out_dir) / "predictions.json"
        write_json_atomic(path, {p["id"]: p["prediction"] for p in predictions})
        if self.version != "1.1":
            write_json_atomic(
                Path(out_dir) / "null_odds.json", {p["id"]: p["null_score"] for p in predictions}
            )
        return path


def _gold_tokens(q: Question, offsets: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The context tokens covering the first gold answer's characters."""
    text, start = q.answers[0]
    end = start + len(text)
    covering = [i for i, (s, e) in enumerate(offsets) if s < end and e > start]
    return (covering[0], covering[-1]) if covering else None


def _windows(n_tokens: int, room: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) of each window: `room` tokens, advancing by `stride`, until the end."""
    windows, start = [], 0
    while True:
        length = min(room, n_tokens - start)
        windows.append((start, length))
        if start + length >= n_tokens:
            return windows
        start += min(length, stride)


def _is_max_context(windows, current, position) -> bool:
    """True if `position` has the most context (min of left and right, plus a small bonus for
    longer windows) in `current` among the windows that hold it."""
    best_score, best = None, None
    for start, length in windows:
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best = score, (start, length)
    return best == current


def score_file(
    version: str,
    data: Path,
    predictions: Path,
    null_odds: Path | None = None,
    threshold: float = 1.0,
) -> dict[str, float]:
    """`electra score`: a predictions file scored as the official script for `version` does."""
    golds = gold_answers(read_squad(data))
    preds = _read_json_map(predictions)
    if version == "1.1":
        return metrics.squad_v1_scores(golds, preds)
    missing = [q for q in golds if q not in preds]
    if missing:
        raise ElectraError(
            f"{predictions} has no answer for {len(missing)} of {len(golds)} questions (first: "
            f'{missing[0]}): write "" for a question you predict unanswerable'
        )
    nulls = _read_json_map(null_odds) if null_odds else None
    if nulls is not None and (gaps := [q for q in golds if q not in nulls]):
        raise ElectraError(f"{null_odds} has no score for question {gaps[0]}")
    return metrics.squad_v2_scores(golds, preds, nulls, threshold)


def _read_json_map(path: Path) -> dict:
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ElectraError(f"cannot read {path}: {e}") from None
    if not isinstance(value, dict):
        raise ElectraError(f"{path} must be a JSON object mapping question ids to values")
    return value
