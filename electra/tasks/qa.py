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
decided by the training file and saved with the fine-tuned model. Windows, heads, decoding and
scoring are the benchmark's (`electra.tasks.squad`), with either head (`qa_head`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from electra.errors import ElectraError
from electra.finetuning.config import FinetuneConfig
from electra.tasks.squad import Question, SquadTask, _line_of, read_squad, squad_settings


class QaTask(SquadTask):
    finetune_test = True  # finetune also predicts (and scores, when answered) an optional test file
    writes_submission = False  # no benchmark server: predictions.jsonl is the output

    def __init__(self, cfg: FinetuneConfig | None = None):
        super().__init__(**squad_settings(cfg or FinetuneConfig()))
        self.name = "qa"
        self.version: str | None = None  # "1.1" or "2.0": set by the training file
        self.files = {s: {s: (f"{s}.json", f"{s}.jsonl")} for s in ("train", "dev", "test")}

    def head_config(self):
        return {"qa_head": self.qa_head, "version": self.version}

    def with_head_config(self, head):
        task = super().with_head_config(head)
        task.version = head.get("version")
        return task

    def read(self, path, split):
        path = Path(path)
        _check_suffix(path)
        if path.suffix.lower() == ".jsonl":
            questions, unanswerable = read_qa_jsonl(path, need_answers=split != "test")
        else:
            questions = read_squad(path)
            _check_squad_texts(path, questions)
            # A SQuAD 2.0 file marks every question, answerable ones with "is_impossible": false.
            unanswerable = '"is_impossible"' in path.read_text(encoding="utf-8")
        if split == "train":
            self.version = "2.0" if unanswerable or _any_null(questions) else "1.1"
        elif self.version == "1.1" and (q := next(_nulls(questions), None)):
            raise ElectraError(
                f"{path}: question {q.id} has no answer, but the training file has no "
                "unanswerable question (SQuAD 1.1), so the model never learned to abstain: add "
                "unanswerable questions to the training file, or leave this one out"
            )
        return questions

    def read_inputs(self, path: Path) -> list[Question]:
        """`electra predict`: the questions of a file in either format; answers, if any, are
        ignored."""
        path = Path(path)
        _check_suffix(path)
        if path.suffix.lower() == ".jsonl":
            return read_qa_jsonl(path, need_answers=False)[0]
        questions = read_squad(path)
        _check_squad_texts(path, questions)
        return questions

    def score(self, predictions):
        if self.version is None:  # `electra score` of a predictions file: no training file read
            task = copy.copy(self)
            task.version = "2.0" if any(p["label"] == [] for p in predictions) else "1.1"
            return task.score(predictions)
        return super().score(predictions)


def _check_suffix(path: Path) -> None:
    if path.suffix and path.suffix.lower() not in (".json", ".jsonl"):
        raise ElectraError(
            f"{path}: qa reads .json (SQuAD format) or .jsonl (flat records) files, not "
            f"{path.suffix}"
        )


def _nulls(questions: list[Question]):
    return (q for q in questions if q.is_impossible)


def _any_null(questions: list[Question]) -> bool:
    return next(_nulls(questions), None) is not None


def _check_squad_texts(path: Path, questions: list[Question]) -> None:
    """SQuAD JSON: no empty question, context or answer, no repeated id (answers are keyed by
    id)."""
    seen: set[str] = set()
    for q in questions:
        problem = ""
        if not isinstance(q.question, str) or not q.question.strip():
            problem = "empty question"
        elif not isinstance(q.context, str) or not q.context.strip():
            problem = "empty context"
        elif any(not text.strip() for text, _ in q.answers):
            problem = "empty answer text"
        elif q.id in seen:
            problem = "repeated id"
        if problem:
            raw = path.read_text(encoding="utf-8")
            line = _line_of(raw, q.id)
            if problem == "repeated id":  # the repeat's line, not the first one's
                needle = json.dumps(q.id)
                line = raw.count("\n", 0, raw.find(needle, raw.find(needle) + 1)) + 1
            raise ElectraError(
                f"{path}, line {line} (question {q.id}): {problem}: give every question a text, "
                "a context, its own id and answers as they read in the context"
            )
        seen.add(q.id)


def read_qa_jsonl(path: Path, need_answers: bool = True) -> tuple[list[Question], bool]:
    """Flat records, one a line; and whether any is unanswerable (an empty answers list)."""
    questions: list[Question] = []
    lines: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            q = _record(f"{path}, line {line_no}", line, len(questions), need_answers)
            if q.id in lines:
                raise ElectraError(
                    f"{path}, line {line_no}: id {q.id!r} repeats line {lines[q.id]}: give every "
                    "question its own id"
                )
            lines[q.id] = line_no
            questions.append(q)
    if not questions:
        raise ElectraError(
            f"{path} has no questions: expected JSON lines with id, question, context, answers"
        )
    return questions, _any_null(questions)


def _record(where: str, line: str, index: int, need_answers: bool) -> Question:
    """One flat record: id, question, context, answers ({text: [...], answer_start: [...]} or a
    list of {text, answer_start}; empty: unanswerable; absent: unknown, in a test file only)."""
    try:
        record = json.loads(line)
    except ValueError as e:
        raise ElectraError(f"{where}: not JSON ({e})") from None
    if not isinstance(record, dict):
        raise ElectraError(f"{where}: expected an object with id, question, context, answers")
    qid = str(record.get("id", index))
    where = f"{where} (question {qid})"
    for field in ("question", "context"):
        value = record.get(field)
        if not isinstance(value, str) or not value.strip():
            raise ElectraError(
                f"{where}: {'no' if value is None else 'empty'} {field}: every record needs a "
                f"non-empty {field!r} string"
            )
    if record.get("answers") is None:
        if need_answers:
            raise ElectraError(
                f'{where}: no "answers": training and dev records need them ([] if unanswerable)'
            )
        return Question(qid, record["question"], record["context"], (), False)
    answers = _answers(where, record["answers"], record["context"])
    impossible = bool(record.get("is_impossible", not answers))
    return Question(qid, record["question"], record["context"], answers, impossible)


def _answers(where: str, value, context: str) -> tuple[tuple[str, int], ...]:
    """(text, offset) pairs, each checked to sit at its offset in the context."""
    if isinstance(value, dict):
        texts, starts = value.get("text"), value.get("answer_start")
        if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
            raise ElectraError(
                f'{where}: "answers" needs equal-length "text" and "answer_start" lists'
            )
        pairs = list(zip(texts, starts, strict=True))
    elif isinstance(value, list) and all(isinstance(a, dict) for a in value):
        pairs = [(a.get("text"), a.get("answer_start")) for a in value]
    else:
        raise ElectraError(
            f'{where}: "answers" must be {{"text": [...], "answer_start": [...]}} or a list of '
            '{"text", "answer_start"} objects'
        )
    for text, start in pairs:
        if not isinstance(text, str) or not text.strip():
            raise ElectraError(f"{where}: empty answer text: give the answer as it reads")
        if not isinstance(start, int) or isinstance(start, bool):
            raise ElectraError(f"{where}: answer_start {start!r} is not a character offset")
        found = context[start : start + len(text)]
        if found != text:
            raise ElectraError(
                f"{where}: answer {text!r} is not at offset {start} of its context (found "
                f"{found!r}): correct answer_start (0-based, in characters) or the answer text"
            )
    return tuple(pairs)
