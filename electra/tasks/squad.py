"""SQuAD 1.1 and 2.0: the official JSON format, sliding windows over long contexts, the
answerability-aware head of docs/specification.md §Fine-tuning, n-best span decoding, and official
scoring.

Token-to-character offsets come from the tokenizer, so an answer is cut straight from the original
context. A window that does not hold the gold answer is trained to point at position 0 and is
labelled unanswerable; at prediction time each token is scored only in the window where it has the
most context on both sides (BERT's "max context" rule), and the question's null score is the lowest
(most answerable) answerability logit over its windows.

With `qa_head="linear"` the head is BERT's and Hugging Face's instead (`heads.py`,
`ElectraForSpanQuestionAnswering`): start and end logits, trained with cross-entropy towards the
gold tokens (position 0, [CLS], where the window has no answer), the best span the highest start +
end logit sum with start <= end among the top `n_best` starts and ends, and the null score HF's
run_squad compares with its threshold: the lowest [CLS] score (start[0] + end[0]) over the windows
minus the best span's score.
"""

from __future__ import annotations

import copy
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import electra.tasks.metrics as metrics
from electra.atomic import write_json_atomic
from electra.data.tokenizer import special_ids
from electra.errors import ElectraError
from electra.finetuning.config import QA_HEADS
from electra.model.heads import ElectraForQuestionAnswering, ElectraForSpanQuestionAnswering
from electra.tasks.base import Encoded, Task, require_suffix, to_tensors, token_ids

ANSWERABILITY_WEIGHT = 0.5
# The default null threshold of each head: the official test setting for the answerability logit,
# and HF's `null_score_diff_threshold` for the linear head's null-minus-best-span score.
NULL_THRESHOLDS = {"official": -2.75, "linear": 0.0}
# The linear head's null score for a question with no valid span in any window: no answer.
NO_SPAN_NULL_SCORE = 1e4


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
                                f"{context[start : start + len(text)]!r}): correct answer_start "
                                "(0-based, in characters) or the answer text"
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


def squad_settings(cfg) -> dict:
    """`SquadTask`'s settings from a `FinetuneConfig`."""
    names = ("doc_stride", "max_query_length", "n_best", "max_answer_length", "null_threshold")
    return {name: getattr(cfg, name) for name in (*names, "qa_head")}


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
        null_threshold: float | None = None,
        qa_head: str = "official",
    ):
        self.version = version
        self.name = "squad1" if version == "1.1" else "squad2"
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length
        self.n_best = n_best
        self.max_answer_length = max_answer_length
        self._requested_threshold = null_threshold
        self._set_head(qa_head)
        v = "v1.1" if version == "1.1" else "v2.0"
        self.files = {s: {s: (f"{s}-{v}.json", f"{s}.json")} for s in ("train", "dev", "test")}

    def _set_head(self, qa_head: str) -> None:
        """The head and the null threshold that goes with it. None means the head's own default:
        -2.75 is a point on the official head's answerability logit and means nothing for the
        linear head's score difference, whose default is HF's 0.0."""
        if qa_head not in QA_HEADS:
            raise ElectraError(f"qa_head={qa_head!r}: use {' or '.join(QA_HEADS)}")
        self.qa_head = qa_head
        threshold = self._requested_threshold
        if threshold is None:
            threshold = NULL_THRESHOLDS[qa_head]
        self.null_threshold = threshold
        # The linear head's logits go back whole to the host, one per token (padded by `predict`).
        self.token_outputs = ("start_logits", "end_logits") if qa_head == "linear" else ()

    def head_config(self):
        return {"qa_head": self.qa_head}

    def with_head_config(self, head):
        task = copy.copy(self)
        task._set_head(head.get("qa_head", "official"))  # models saved before the setting
        return task

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

    def build_model(self, cfg) -> ElectraForQuestionAnswering | ElectraForSpanQuestionAnswering:
        if self.qa_head == "linear":
            return ElectraForSpanQuestionAnswering(cfg)
        return ElectraForQuestionAnswering(cfg)

    def losses(self, model, batch) -> torch.Tensor:
        if self.qa_head == "linear":  # HF's loss, per example: the mean of start and end CE
            out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            start = F.cross_entropy(
                out["start_logits"].float(), batch["start_positions"], reduction="none"
            )
            end = F.cross_entropy(
                out["end_logits"].float(), batch["end_positions"], reduction="none"
            )
            return (start + end) / 2
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
        if self.qa_head == "linear":
            out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            return {k: v.float() for k, v in out.items()}
        out = model(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], n_top=self.n_best
        )
        return {k: _to_n_best(v, self.n_best) for k, v in out.items()}

    def decode(self, examples, encoded, outputs) -> list[dict]:
        return self._decode(examples, encoded, outputs, self._best_spans(encoded, outputs))

    def _decode(self, examples, encoded, outputs, spans) -> list[dict]:
        """`decode`, given each question's best span (`_best_spans`)."""
        null = self._null_scores(encoded, outputs, spans)
        golds = gold_answers(examples)
        out = []
        for ex_index, q in enumerate(examples):
            span = q.context[spans[ex_index][2] : spans[ex_index][3]] if ex_index in spans else ""
            no_answer = self.version != "1.1" and null[ex_index] > self.null_threshold
            out.append(
                {
                    "id": q.id,
                    "prediction": "" if no_answer else span,
                    "label": golds[q.id] if q.answers or q.is_impossible else None,
                    "best_span": span,
                    "null_score": null[ex_index],
                }
            )
        return out

    def _best_spans(self, encoded, outputs) -> dict[int, tuple[float, float, int, int]]:
        """Each question's best span over its windows (the first of a tie): (the score it is
        ranked by, its log-probability, its start and end character offsets in the context). A
        question with no valid span in any window is left out."""
        best: dict[int, tuple[float, float, int, int]] = {}
        for ex_index, row, s, e, score, log_prob in self._span_candidates(encoded, outputs):
            if ex_index not in best or score > best[ex_index][0]:
                offsets = encoded.meta["offsets"][row]
                best[ex_index] = (score, log_prob, offsets[s][0], offsets[e][1])
        return best

    def _null_scores(self, encoded, outputs, spans) -> dict[int, float]:
        """Each question's null score, the higher the less answerable. Official head: the lowest
        answerability logit over its windows. Linear head: the lowest start[0] + end[0] ([CLS])
        over its windows minus the best span's score (`spans`, `_best_spans`; HF's run_squad);
        with no valid span, no answer."""
        if self.qa_head == "linear":
            cls = (outputs["start_logits"][:, 0] + outputs["end_logits"][:, 0]).tolist()
        else:
            cls = outputs["answerable_logit"].tolist()
        lowest: dict[int, float] = defaultdict(lambda: math.inf)
        for row, ex_index in enumerate(encoded.meta["example"]):
            lowest[ex_index] = min(lowest[ex_index], cls[row])
        if self.qa_head != "linear":
            return lowest
        return {i: lowest[i] - spans[i][0] if i in spans else NO_SPAN_NULL_SCORE for i in lowest}

    def score(self, predictions) -> dict[str, float]:
        golds = {p["id"]: p["label"] for p in predictions}
        if self.version == "1.1":
            return metrics.squad_v1_scores(golds, {p["id"]: p["prediction"] for p in predictions})
        # The v2.0 script's use: best non-null spans, null scores and the threshold, for the
        # best-threshold search.
        scores = metrics.squad_v2_scores(
            golds,
            {p["id"]: p["best_span"] for p in predictions},
            {p["id"]: p["null_score"] for p in predictions},
            threshold=self.null_threshold,
        )
        # Exact and F1 of the predictions as made, the run's threshold applied: the same numbers
        # where that threshold is this task's, and the run's own where it is not (`electra score`
        # of a predictions.jsonl knows neither the head nor the threshold it was decoded with).
        made = metrics.squad_v2_scores(golds, {p["id"]: p["prediction"] for p in predictions})
        return {**scores, **made}

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

    # --- `electra predict` --------------------------------------------------------------------

    def read_inputs(self, path: Path) -> list[Question]:
        """Questions of a SQuAD JSON file; its answers, if any, are ignored."""
        require_suffix(path, (".json",), self.name)
        return read_squad(path)

    def from_line(self, line: str, number: int, source: str) -> Question:
        """A question and its context, TAB-separated."""
        fields = line.split("\t")
        if len(fields) != 2:
            raise ElectraError(
                f"{source}, line {number}: expected a question, a TAB and its context, found "
                f"{len(fields)} TAB-separated field{'s' if len(fields) > 1 else ''}"
            )
        if not fields[0].strip() or not fields[1].strip():
            empty = "question" if not fields[0].strip() else "context"
            raise ElectraError(f"{source}, line {number}: an empty {empty}: fill it in")
        return Question(str(number - 1), fields[0], fields[1], (), False)

    def records(self, examples, encoded, outputs, all_scores=False) -> list[dict]:
        """{"id", "answer", "start" (its character offset in the context; null without one),
        "score" (the model's probability of the best span), "no_answer", "null_score"}: the
        answers `evaluate` gives, with their offsets."""
        spans = self._best_spans(encoded, outputs)
        rows = []
        for i, (q, pred) in enumerate(
            zip(examples, self._decode(examples, encoded, outputs, spans), strict=True)
        ):
            no_answer = self.version != "1.1" and pred["null_score"] > self.null_threshold
            _, log_prob, start, _ = spans.get(i, (0.0, -math.inf, None, None))
            rows.append(
                {
                    "id": q.id,
                    "answer": pred["prediction"],
                    "start": None if no_answer or not pred["prediction"] else start,
                    "score": math.exp(log_prob),
                    "no_answer": no_answer,
                    "null_score": pred["null_score"],
                }
            )
        return rows

    def _span_candidates(self, encoded, outputs):
        """(question, row, start and end token, score, log-probability) of every valid span
        among each window's top `n_best` starts and ends: in the context, start <= end, at most
        `max_answer_length` tokens, its start in its max-context window."""
        linear = self.qa_head == "linear"
        for row, ex_index in enumerate(encoded.meta["example"]):
            offsets = encoded.meta["offsets"][row]
            max_context = encoded.meta["max_context"][row]
            for s, e, score, log_prob in (
                self._linear_row(outputs, row, len(offsets))
                if linear
                else self._official_row(outputs, row, len(offsets))
            ):
                if s >= len(offsets) or offsets[s] is None or not max_context[s]:
                    continue
                if e >= len(offsets) or offsets[e] is None or e < s:
                    continue
                if e - s + 1 <= self.max_answer_length:
                    yield ex_index, row, s, e, score, log_prob

    def _official_row(self, outputs, row, n):
        """The official head's top starts and, for each, its top ends, ranked by log-probability
        (`n`, the row's tokens, is unused: the candidates are already the top ones)."""
        start_lp, start_ix = outputs["start_log_probs"][row].tolist(), outputs["start_index"][row]
        end_lp, end_ix = outputs["end_log_probs"][row].tolist(), outputs["end_index"][row]
        for i, s in enumerate(start_ix.tolist()):
            for j, e in enumerate(end_ix[i].tolist()):
                score = start_lp[i] + end_lp[i][j]
                yield s, e, score, score

    def _linear_row(self, outputs, row, n):
        """The top `n_best` starts by the top `n_best` ends of the row's `n` tokens, ranked by
        start + end logit; the log-probability is under the start and end softmaxes."""
        start, end = outputs["start_logits"][row, :n], outputs["end_logits"][row, :n]
        norm = float(start.logsumexp(0) + end.logsumexp(0))
        k = min(self.n_best, n)
        ends = end.topk(k).indices.tolist()
        for s in start.topk(k).indices.tolist():
            for e in ends:
                score = float(start[s] + end[e])
                yield s, e, score, score - norm

    def truncation_note(self, max_len: int) -> str:
        return (
            f"had questions longer than {self.max_query_length} tokens, cut to fit as in "
            "training (long contexts are read in windows)"
        )

    def truncated(self, examples, encoded, tokenizer, max_len) -> int:
        """Questions cut to `max_query_length` tokens (long contexts are windowed, not cut)."""
        ids = token_ids(tokenizer, [q.question for q in examples])
        return sum(len(q) > self.max_query_length for q in ids)


def _to_n_best(value: torch.Tensor, n_best: int) -> torch.Tensor:
    """An official-head output in fp32 with its top-k dimensions filled up to `n_best`: a batch
    trimmed to fewer than `n_best` tokens has fewer candidates, and batches are concatenated.
    The filling is index 0, never a span (decoding skips it), at a log-probability below any."""
    if value.is_floating_point():
        value = value.float()
    if value.dim() < 2 or value.shape[-1] >= n_best:
        return value
    gap = n_best - value.shape[-1]
    pad = (0, gap) if value.dim() == 2 else (0, gap, 0, gap)  # [B, k] or [B, k, k]
    return F.pad(value, pad, value=-1e4 if value.is_floating_point() else 0)


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
