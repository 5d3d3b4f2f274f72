"""The files of extractive question answering: SQuAD's JSON (`{"data": [{"paragraphs": [{"context",
"qas": [...]}]}]}`) and flat JSON Lines records, one question a line, as Hugging Face's `datasets`
write SQuAD (`electra.tasks.qa` describes both). An answer is checked to sit at its offset in its
context, and every error names the file, the line and the question."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from electra.errors import ElectraError


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]  # (text, character offset); empty when unanswerable
    is_impossible: bool


def line_of(raw: str, needle: str) -> int:
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
                            line = line_of(raw, qa["id"])
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


def nulls(questions: list[Question]) -> Iterator[Question]:
    return (q for q in questions if q.is_impossible)


def any_null(questions: list[Question]) -> bool:
    return next(nulls(questions), None) is not None


def check_squad_texts(path: Path, questions: list[Question]) -> None:
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
            line = line_of(raw, q.id)
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
    return questions, any_null(questions)


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
