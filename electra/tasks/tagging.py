"""Tagging with the user's own tag set: `electra finetune --task tagging`.

Files are `train.*`, `dev.*` and optionally `test.*`, each either

- CoNLL-style columns (`.conll`, `.txt`, `.tsv`): one token per line, the word in the first column
  and its tag in `tag_column` (0-based; -1, the default, is the last), columns separated by tabs
  where a line has one, else by spaces; a blank line between sentences; `-DOCSTART-` lines
  skipped. Every token line of a file has the same number of columns. A test file may have the
  words alone (one column): nothing to score, only predictions.
- JSON Lines (`.jsonl`): one sentence per line, `{"tokens": [...], "tags": [...]}` with an
  optional `"id"`; `tags` may be left out of a test file.

Tags are IOB: `O`, `B-TYPE` and `I-TYPE`, for any types. BIO (every entity opens with `B-`) and
IOB1 (CoNLL-2003's original scheme: `I-` opens an entity unless it follows one of the same type)
are both read, and scored as conlleval reads them (seqeval's default mode); the model learns
whichever scheme its training file uses. The tag set is read from the training file, in a fixed
order that does not depend on the file's order: `O`, then for each entity type in alphabetical
order `B-TYPE`, `I-TYPE` (both, even if the file uses one). It is saved with the fine-tuned model;
a dev or test tag outside it is an error, since the model could never predict it.

Everything else (the head, the first-sub-token rule, entity-level F1) is CoNLL-2003's
(`electra.tasks.ner`), of which this is the general case.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from electra.errors import ElectraError
from electra.tasks.ner import NerTask, Sentence, read_words

TAG = re.compile(r"^(O|[BI]-\S+)$")
COLUMN_SUFFIXES = (".conll", ".txt", ".tsv")
SUFFIXES = (*COLUMN_SUFFIXES, ".jsonl")


def tag_set(tags: set[str]) -> tuple[str, ...]:
    """The documented order: 'O', then B- and I- of each entity type, types alphabetically."""
    types = sorted({t[2:] for t in tags if t != "O"})
    return ("O", *(f"{prefix}-{kind}" for kind in types for prefix in "BI"))


class TaggingTask(NerTask):
    name = "tagging"
    finetune_test = True  # finetune also predicts (and scores, when tagged) an optional test file
    writes_submission = False  # no benchmark server: predictions.jsonl is the output
    files = {s: {s: tuple(f"{s}{suffix}" for suffix in SUFFIXES)} for s in ("train", "dev", "test")}

    def __init__(self, tag_column: int = -1, tags: tuple[str, ...] = ()):
        """`tags`: a fixed tag set (a fine-tuned model's); empty reads it from the training file."""
        if tag_column == 0:
            raise ElectraError("tag_column=0 is the word's column: pick the tag's (-1 is the last)")
        for tag in tags:
            _check_iob(tag, "the tag set")
        super().__init__(tuple(tags))
        self.tag_column = tag_column
        self.fixed = bool(tags)

    def head_config(self):
        return {"labels": list(self.labels)}

    def with_head_config(self, head):
        return TaggingTask(self.tag_column, tuple(head["labels"]))

    def read(self, path, split):
        path = Path(path)
        _check_suffix(path)
        if split == "train" and not self.fixed:
            self.labels = ()  # read afresh from this file: any IOB tag is welcome
        if path.suffix.lower() == ".jsonl":
            sentences = self._read_jsonl(path, split)
        else:
            sentences = self._read_columns(path, split)
        if not sentences:
            raise ElectraError(
                f"{path} has no sentences: expected tagged tokens (CoNLL columns or JSONL)"
            )
        if split == "train" and not self.fixed:
            # The training file defines what the model can predict.
            self.labels = tag_set({t for s in sentences for t in s.tags or ()})
        return sentences

    def read_inputs(self, path: Path) -> list[Sentence]:
        """`electra predict`: the sentences of a file in either format, their tags (if any)
        ignored, so a tag the model does not know is no error here."""
        path = Path(path)
        _check_suffix(path)
        if path.suffix.lower() == ".jsonl":
            sentences = self._read_jsonl(path, "predict")
        else:
            sentences = read_words(path, _columns)
        if not sentences:
            raise ElectraError(
                f"{path} has no sentences: expected a word per line (CoNLL columns) or JSON lines "
                "of tokens"
            )
        return sentences

    def _check_tag(self, tag: str, where: str) -> None:
        """A tag is IOB, and outside training it is one the model knows."""
        _check_iob(tag, where)
        if self.labels and tag not in self.labels:
            raise ElectraError(
                f"{where}: tag {tag!r} is not in the training file's tag set "
                f"({', '.join(self.labels)}): the model cannot predict it; fix the tag or add "
                "examples of it to the training file"
            )

    def _read_columns(self, path: Path, split: str) -> list[Sentence]:
        """CoNLL-style columns; one column (words only) is allowed in a test file."""
        sentences: list[Sentence] = []
        words: list[str] = []
        tags: list[str] = []
        width, first_line = 0, 0

        def flush() -> None:
            if words:
                tagged = tuple(tags) if width > 1 else None
                sentences.append(Sentence(str(len(sentences)), tuple(words), tagged))
                words.clear()
                tags.clear()

        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                fields = _columns(line)
                if not fields or fields[0] == "-DOCSTART-":
                    flush()
                    continue
                if not width:
                    width, first_line = len(fields), line_no
                    self._check_width(path, line_no, width, split)
                if len(fields) != width:
                    raise ElectraError(
                        f"{path}, line {line_no}: {len(fields)} columns where line {first_line} "
                        f"has {width}: every token line needs the same columns (word first, a "
                        "tag column); a blank line separates sentences"
                    )
                column = self.tag_column % width
                if not fields[0] or (width > 1 and not fields[column]):
                    raise ElectraError(
                        f"{path}, line {line_no}, column {1 if not fields[0] else column + 1}: "
                        "empty field: every token line needs a word and a tag"
                    )
                words.append(fields[0])
                if width > 1:
                    tag = fields[column]
                    self._check_tag(tag, f"{path}, line {line_no}, column {column + 1}")
                    tags.append(tag)
        flush()
        return sentences

    def _check_width(self, path: Path, line_no: int, width: int, split: str) -> None:
        if width == 1 and split != "test":
            raise ElectraError(
                f"{path}, line {line_no}: a word without a tag: {split} files need a tag column "
                "(words alone are read only in a test file)"
            )
        if width > 1 and not -width <= self.tag_column < width:
            raise ElectraError(
                f"{path}, line {line_no}: tag column {self.tag_column} is outside the line's "
                f"{width} columns: pass --tag-column between 1 and {width - 1}, or -1 for the last"
            )

    def _read_jsonl(self, path: Path, split: str) -> list[Sentence]:
        sentences = []
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if line.strip():
                    where = f"{path}, line {line_no}"
                    sentences.append(self._sentence(where, line, len(sentences), split))
        return sentences

    def _sentence(self, where: str, line: str, index: int, split: str) -> Sentence:
        """One JSONL record: {"tokens": [...], "tags": [...], "id": optional}."""
        try:
            record = json.loads(line)
        except ValueError as e:
            raise ElectraError(f"{where}: not JSON ({e})") from None
        if not isinstance(record, dict) or not isinstance(record.get("tokens"), list):
            raise ElectraError(f'{where}: expected {{"tokens": [...], "tags": [...]}}')
        tokens, tags = record["tokens"], record.get("tags")
        if split == "predict":
            tags = None  # what the model predicts; the file's tags are not its business
        if not tokens:
            raise ElectraError(f"{where}: empty tokens list: give each sentence its tokens")
        for i, token in enumerate(tokens):
            if not isinstance(token, str) or not token.strip():
                raise ElectraError(f"{where}: token {i} is {token!r}: tokens are non-empty strings")
        if tags is None:
            if split not in ("test", "predict"):
                raise ElectraError(f'{where}: no "tags": {split} files need a tag per token')
        elif not isinstance(tags, list) or len(tags) != len(tokens):
            n = len(tags) if isinstance(tags, list) else "no list of"
            raise ElectraError(
                f"{where}: {len(tokens)} tokens but {n} tags: give exactly one tag per token"
            )
        else:
            for i, tag in enumerate(tags):
                self._check_tag(tag, f"{where}, tag {i}")
        sid = str(record.get("id", index))
        return Sentence(sid, tuple(tokens), None if tags is None else tuple(tags))


def _check_suffix(path: Path) -> None:
    if path.suffix and path.suffix.lower() not in SUFFIXES:
        raise ElectraError(
            f"{path}: tagging reads {', '.join(SUFFIXES)} files, not {path.suffix}: write the "
            "tokens as CoNLL-style columns or JSON lines of tokens and tags"
        )


def _columns(line: str) -> list[str]:
    """Tab-separated where the line has a tab (a word may then hold spaces), else on spaces."""
    line = line.rstrip("\r\n")
    if "\t" in line:
        fields = [f.strip() for f in line.split("\t")]
        return fields if any(fields) else []
    return line.split()


def _check_iob(tag: object, where: str) -> None:
    if not isinstance(tag, str) or not TAG.match(tag):
        raise ElectraError(
            f"{where}: tag {tag!r} is not IOB: tags are O, B-TYPE or I-TYPE (e.g. B-PER, I-PER); "
            "rename the tags of other schemes"
        )
