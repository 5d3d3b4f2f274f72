"""Extractive question answering on the user's own records: `electra finetune --task qa`.

Files are `train.*`, `dev.*` and optionally `test.*`, each either

- SQuAD-format JSON (`.json`): `{"data": [{"paragraphs": [{"context", "qas": [{"id",
  "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}`, or
- flat JSON Lines (`.jsonl`), one question a line, as Hugging Face's `datasets` write SQuAD:
  `{"id", "question", "context", "answers": {"text": [...], "answer_start": [...]}}`, the
  answers also accepted as a list of `{"text", "answer_start"}`. An empty answers list means the
  question has no answer in its context (HF's SQuAD 2.0 files); a test record may leave
  `answers` out (nothing to score).

The task is SQuAD 2.0 (a question may have no answer: the model learns to abstain, scored with
HasAns/NoAns and the best-threshold search) when the training file marks any question
unanswerable or, in SQuAD JSON, carries `is_impossible` at all; else SQuAD 1.1. The version is
fitted to the training file (`fit`) and saved with the fine-tuned model. SQuAD 1.1 and 2.0
(`electra.tasks.squad`) are named configurations of this task: the official files, a fixed version,
and the submission files.

Token-to-character offsets come from the tokenizer, so an answer is cut straight from the original
context. A window that does not hold the gold answer is trained to point at position 0 and is
labelled unanswerable; at prediction time each token is scored only in the window where it has the
most context on both sides (BERT's "max context" rule). Either head (`qa_head`, a strategy of
`electra.tasks.qa_heads`) scores the candidate spans and each question's null score.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from pathlib import Path

import torch

import electra.tasks.metrics as metrics
from electra.errors import ElectraError
from electra.tasks.base import Encoded, Task, row_format, to_tensors, token_ids
from electra.tasks.qa_files import (
    Question,
    any_null,
    check_squad_texts,
    gold_answers,
    nulls,
    read_qa_jsonl,
    read_squad,
)
from electra.tasks.qa_heads import QA_HEADS, LinearHead, OfficialHead
from electra.tasks.settings import QaSettings


class QaTask(Task):
    """Extractive question answering over windows of long contexts, with either head; SQuAD 1.1
    or 2.0 as the training file decides (`fit`)."""

    name = "qa"
    family = "qa"
    epochs = 2
    max_seq_len = 512
    eval_batch_size = 8
    main_metric = "f1"
    finetune_test = True  # finetune also predicts (and scores, when answered) an optional test file
    writes_submission = False  # no benchmark server: predictions.jsonl is the output

    def __init__(self, settings: QaSettings | None = None, version: str | None = None):
        """`version`: "1.1" or "2.0"; None until fitted to a training file."""
        self.settings = settings or QaSettings()
        self.version = version
        self.doc_stride = self.settings.doc_stride
        self.max_query_length = self.settings.max_query_length
        self.n_best = self.settings.n_best
        self.max_answer_length = self.settings.max_answer_length
        self._set_head(self.settings.qa_head)
        self.files = {s: {s: (f"{s}.json", f"{s}.jsonl")} for s in ("train", "dev", "test")}

    def _set_head(self, qa_head: str) -> None:
        """The head and the null threshold that goes with it. None means the head's own default:
        -2.75 is a point on the official head's answerability logit and means nothing for the
        linear head's score difference, whose default is HF's 0.0."""
        if qa_head not in QA_HEADS:
            raise ElectraError(f"qa_head={qa_head!r}: use {' or '.join(QA_HEADS)}")
        self.head: OfficialHead | LinearHead = QA_HEADS[qa_head](self.n_best)
        threshold = self.settings.null_threshold
        self.null_threshold = self.head.null_threshold if threshold is None else threshold
        self.token_outputs = self.head.token_outputs

    @property
    def qa_head(self) -> str:
        return self.head.name

    def fit(self, train: list[Question], path: Path) -> QaTask:
        """SQuAD 2.0 when the training file has an unanswerable question or, in SQuAD JSON,
        carries `is_impossible` at all (a 2.0 file marks answerable questions false); else 1.1."""
        marked = Path(path).suffix.lower() != ".jsonl" and '"is_impossible"' in Path(
            path
        ).read_text(encoding="utf-8")
        task = copy.copy(self)
        task.version = "2.0" if marked or any_null(train) else "1.1"
        return task

    def head_config(self):
        return {"qa_head": self.qa_head, "version": self.version}

    def with_head_config(self, head):
        task = copy.copy(self)
        task._set_head(head.get("qa_head", "official"))  # models saved before the setting
        task.version = head.get("version")
        return task

    def read(self, path, split):
        path = Path(path)
        _check_suffix(path)
        if path.suffix.lower() == ".jsonl":
            questions = read_qa_jsonl(path, need_answers=split != "test")[0]
        else:
            questions = read_squad(path)
            check_squad_texts(path, questions)
        if split != "train" and self.version == "1.1" and (q := next(nulls(questions), None)):
            raise ElectraError(
                f"{path}: question {q.id} has no answer, but the training file has no "
                "unanswerable question (SQuAD 1.1), so the model never learned to abstain: add "
                "unanswerable questions to the training file, or leave this one out"
            )
        return questions

    def row_texts(self, example: Question) -> tuple[str | None, ...]:
        return (example.question, example.context)

    def is_labelled(self, example: Question) -> bool:
        return bool(example.answers) or example.is_impossible

    def read_inputs(self, path: Path) -> list[Question]:
        """`electra predict`: the questions of a file in either format; answers, if any, are
        ignored."""
        path = Path(path)
        _check_suffix(path)
        if path.suffix.lower() == ".jsonl":
            return read_qa_jsonl(path, need_answers=False)[0]
        questions = read_squad(path)
        check_squad_texts(path, questions)
        return questions

    def encode(self, examples, tokenizer, max_len, training) -> Encoded:
        special, frame = row_format(tokenizer)
        before, between, after = map(len, frame.pair)
        questions = tokenizer.encode_batch([q.question for q in examples], add_special_tokens=False)
        contexts = tokenizer.encode_batch([q.context for q in examples], add_special_tokens=False)
        rows, starts, ends, impossible = [], [], [], []
        meta = {"example": [], "offsets": [], "max_context": []}
        for ex_index, (q, question, context) in enumerate(
            zip(examples, questions, contexts, strict=True)
        ):
            query = question.ids[: self.max_query_length]
            room = max_len - len(query) - frame.pair_extra
            if room < 1:
                raise ElectraError(
                    f"max_seq_len={max_len} leaves no room for the context after a "
                    f"{len(query)}-token question: raise it or lower max_query_length"
                )
            doc_ids, doc_offsets = context.ids, context.offsets
            span = _gold_tokens(q, doc_offsets) if training and not q.is_impossible else None
            windows = _windows(len(doc_ids), room, self.doc_stride)
            for w_start, w_len in windows:
                rows.append(frame.row(query, doc_ids[w_start : w_start + w_len]))
                first = before + len(query) + between  # the window's first token
                offsets = [None] * first + list(doc_offsets[w_start : w_start + w_len])
                offsets += [None] * after
                meta["example"].append(ex_index)
                meta["offsets"].append(offsets)
                meta["max_context"].append(
                    [False] * first
                    + [
                        _is_max_context(windows, (w_start, w_len), w_start + i)
                        for i in range(w_len)
                    ]
                    + [False] * after
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

    def build_model(self, cfg):
        return self.head.build_model(cfg)

    def losses(self, model, batch) -> torch.Tensor:
        return self.head.losses(model, batch)

    def infer(self, model, batch):
        return self.head.infer(model, batch)

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
        """Each question's null score, the higher the less answerable, from the lowest of its
        windows' (`QaHead.cls_scores`; `spans`: each question's best, `_best_spans`)."""
        cls = self.head.cls_scores(outputs)
        lowest: dict[int, float] = defaultdict(lambda: math.inf)
        for row, ex_index in enumerate(encoded.meta["example"]):
            lowest[ex_index] = min(lowest[ex_index], cls[row])
        return self.head.null_scores(lowest, spans)

    def score(self, predictions) -> dict[str, float]:
        if self.version is None:  # `electra score` of a predictions file: no training file read
            task = copy.copy(self)
            task.version = "2.0" if any(p["label"] == [] for p in predictions) else "1.1"
            return task.score(predictions)
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

    # --- `electra predict` --------------------------------------------------------------------

    def from_line(self, line: str, number: int, source: str) -> Question:
        """A question and its context, TAB-separated."""
        fields = line.split("\t")
        if len(fields) != 2:
            raise ElectraError(
                f"{source}, line {number}: expected a question, a TAB and its context, found "
                f"{len(fields)} TAB-separated field{'s' if len(fields) > 1 else ''}: put one TAB "
                "between the question and its context"
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
        among each window's top `n_best` starts and ends (`QaHead.candidates`): in the context,
        start <= end, at most `max_answer_length` tokens, its start in its max-context window."""
        for row, ex_index in enumerate(encoded.meta["example"]):
            offsets = encoded.meta["offsets"][row]
            max_context = encoded.meta["max_context"][row]
            for s, e, score, log_prob in self.head.candidates(
                self._row(outputs, row, len(offsets))
            ):
                if s >= len(offsets) or offsets[s] is None or not max_context[s]:
                    continue
                if e >= len(offsets) or offsets[e] is None or e < s:
                    continue
                if e - s + 1 <= self.max_answer_length:
                    yield ex_index, row, s, e, score, log_prob

    def _row(self, outputs, row: int, tokens: int) -> dict[str, torch.Tensor]:
        """One window's outputs, those with one value per token cut to its `tokens` (batches are
        padded to the widest)."""
        return {
            k: v[row, :tokens] if k in self.token_outputs else v[row] for k, v in outputs.items()
        }

    def truncation_note(self, max_len: int) -> str:
        return (
            f"had questions longer than {self.max_query_length} tokens, cut to fit as in "
            "training (long contexts are read in windows)"
        )

    def truncated(self, examples, encoded, tokenizer, max_len) -> int:
        """Questions cut to `max_query_length` tokens (long contexts are windowed, not cut)."""
        ids = token_ids(tokenizer, [q.question for q in examples])
        return sum(len(q) > self.max_query_length for q in ids)


def _check_suffix(path: Path) -> None:
    if path.suffix and path.suffix.lower() not in (".json", ".jsonl"):
        raise ElectraError(
            f"{path}: qa reads .json (SQuAD format) or .jsonl (flat records) files, not "
            f"{path.suffix}"
        )


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
