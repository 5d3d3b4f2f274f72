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

Each word's tag is predicted at its first sub-token (the official tagging recipe); the loss is
summed over words. Words beyond the model's length are predicted `O` so that every sentence is
scored whole, with entity-level F1 (seqeval). CoNLL-2003 (`electra.tasks.ner`) is a named
configuration of this task: its reader and its nine tags.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import electra.tasks.metrics as metrics
from electra.errors import ElectraError
from electra.model.heads import build_head
from electra.tasks.base import Encoded, Task, row_format
from electra.tasks.settings import TaggingSettings

IGNORE = -100

TAG = re.compile(r"^(O|[BI]-\S+)$")
COLUMN_SUFFIXES = (".conll", ".txt", ".tsv")
SUFFIXES = (*COLUMN_SUFFIXES, ".jsonl")


@dataclass(frozen=True)
class Sentence:
    id: str
    words: tuple[str, ...]
    tags: tuple[str, ...] | None


def tag_set(tags: set[str]) -> tuple[str, ...]:
    """The documented order: 'O', then B- and I- of each entity type, types alphabetically."""
    types = sorted({t[2:] for t in tags if t != "O"})
    return ("O", *(f"{prefix}-{kind}" for kind in types for prefix in "BI"))


class TaggingTask(Task):
    """A tag per word, from the user's tag set, fitted to the training file (or fixed: a
    fine-tuned model's, CoNLL-2003's): entity-level F1."""

    name = "tagging"
    family = "tagging"
    main_metric = "f1"
    token_outputs = ("tags",)
    finetune_test = True  # finetune also predicts (and scores, when tagged) an optional test file
    writes_submission = False  # no benchmark server: predictions.jsonl is the output
    files = {s: {s: tuple(f"{s}{suffix}" for suffix in SUFFIXES)} for s in ("train", "dev", "test")}

    def __init__(self, settings: TaggingSettings | None = None, tags: tuple[str, ...] = ()):
        """`tags`: a fixed tag set (a fine-tuned model's); empty: fitted to the training file."""
        for tag in tags:
            _check_iob(tag, "the tag set")
        self.settings = settings or TaggingSettings()
        self.tag_column = self.settings.tag_column
        self.labels = tuple(tags)

    def fit(self, train: list[Sentence], path: Path) -> TaggingTask:
        """The training file's tags define what the model can predict (`tag_set`), unless the
        set is fixed."""
        if self.labels:
            return self
        return TaggingTask(self.settings, tag_set({t for s in train for t in s.tags or ()}))

    def head_config(self):
        return {"labels": list(self.labels)}

    def with_head_config(self, head):
        return TaggingTask(self.settings, tuple(head["labels"]))

    def read(self, path, split):
        """A file's sentences; its tags must be IOB, and once the tag set is known (fitted, or
        the model's), among it."""
        path = Path(path)
        _check_suffix(path)
        if path.suffix.lower() == ".jsonl":
            sentences = self._read_jsonl(path, split)
        else:
            sentences = self._read_columns(path, split)
        if not sentences:
            raise ElectraError(
                f"{path} has no sentences: expected tagged tokens (CoNLL columns or JSONL)"
            )
        return sentences

    def row_texts(self, example: Sentence) -> tuple[str | None, ...]:
        return (" ".join(example.words),)

    def is_labelled(self, example: Sentence) -> bool:
        return example.tags is not None

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

    def encode(self, examples, tokenizer, max_len, training) -> Encoded:
        special, frame = row_format(tokenizer)
        room, first = max_len - frame.single_extra, len(frame.single[0])
        n = len(examples)
        ids = torch.full((n, max_len), special.pad, dtype=torch.long)
        mask = torch.zeros((n, max_len), dtype=torch.long)
        labels = torch.full((n, max_len), IGNORE, dtype=torch.long)
        first_tokens = []  # per sentence: the position of each kept word's first sub-token
        first_words = []  # and that word's index (a word with no sub-token has no position)
        encodings = tokenizer.encode_batch(
            [list(s.words) for s in examples], is_pretokenized=True, add_special_tokens=False
        )
        for i, (sentence, enc) in enumerate(zip(examples, encodings, strict=True)):
            row, _ = frame.row(enc.ids[:room])
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
            firsts, words, previous = [], [], None
            for pos, word in enumerate(enc.word_ids[:room], start=first):
                if word is not None and word != previous:
                    firsts.append(pos)
                    words.append(word)
                    if sentence.tags is not None:
                        labels[i, pos] = self.labels.index(sentence.tags[word])
                previous = word
            first_tokens.append(firsts)
            first_words.append(words)
        tensors = {
            "input_ids": ids,
            "token_type_ids": torch.zeros_like(ids),
            "attention_mask": mask,
        }
        if examples[0].tags is not None:
            tensors["labels"] = labels
        return Encoded(tensors, {"first_tokens": first_tokens, "first_words": first_words})

    def build_model(self, cfg) -> nn.Module:
        """The token head of the encoder's family (`electra.model.heads.build_head`)."""
        return build_head("token", cfg, len(self.labels))

    def losses(self, model, batch) -> torch.Tensor:
        logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        per_token = F.cross_entropy(
            logits.float().transpose(1, 2), batch["labels"], ignore_index=IGNORE, reduction="none"
        )
        return per_token.sum(-1)  # summed over words

    def infer(self, model, batch):
        logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        return {"tags": logits.argmax(-1)}

    def decode(self, examples, encoded, outputs) -> list[dict]:
        tags = outputs["tags"]
        out = []
        for i, sentence in enumerate(examples):
            firsts = encoded.meta["first_tokens"][i]
            # 'O' for words cut off by max_seq_len, or that the tokenizer drops (zero-width
            # characters): every sentence is scored whole, each tag at its own word.
            pred = ["O"] * len(sentence.words)
            for word, t in zip(
                encoded.meta["first_words"][i], tags[i, firsts].tolist(), strict=True
            ):
                pred[word] = self.labels[t]
            gold = list(sentence.tags) if sentence.tags is not None else None
            out.append({"id": sentence.id, "prediction": pred, "label": gold})
        return out

    def baseline(self, train) -> dict | None:
        # No entity anywhere ('O' is also the majority tag of any CoNLL file): entity F1 0, so a
        # seed that tags nothing does not beat it.
        if "O" not in self.labels:
            return None
        return {"rule": "'O' (no entity) for every word", "prediction": "O"}

    def constant_predictions(self, prediction, examples) -> list[dict]:
        return [
            {
                "id": s.id,
                "prediction": [prediction] * len(s.words),
                "label": list(s.tags) if s.tags is not None else None,
            }
            for s in examples
        ]

    def score(self, predictions) -> dict[str, float]:
        return metrics.entity_scores(
            [p["label"] for p in predictions], [p["prediction"] for p in predictions]
        )

    # --- `electra predict` --------------------------------------------------------------------

    def from_line(self, line: str, number: int, source: str) -> TextSentence:
        """A sentence, its words split at whitespace (each word's character offset in the line
        kept for the entities' offsets)."""
        found = list(re.finditer(r"\S+", line))
        words = tuple(m.group() for m in found)
        starts = tuple(m.start() for m in found)
        return TextSentence(str(number - 1), words, None, line, starts)

    def records(self, examples, encoded, outputs, all_scores=False) -> list[dict]:
        """{"id", "words", "tags", "entities": [{"entity", "start", "end", "text"}]}: the
        character offsets are into the input line, or for a file into its words joined by
        single spaces."""
        rows = []
        for sentence, pred in zip(examples, self.decode(examples, encoded, outputs), strict=True):
            text, starts = sentence_text(sentence)
            entities = []
            for kind, first, last in entity_spans(pred["prediction"]):
                start, end = starts[first], starts[last] + len(sentence.words[last])
                entities.append(
                    {"entity": kind, "start": start, "end": end, "text": text[start:end]}
                )
            rows.append(
                {
                    "id": sentence.id,
                    "words": list(sentence.words),
                    "tags": pred["prediction"],
                    "entities": entities,
                }
            )
        return rows

    def truncation_note(self, max_len: int) -> str:
        return (
            f"were longer than the model's {max_len} tokens and were cut to fit, as in training: "
            "the words past the cut are tagged O"
        )

    def truncated(self, examples, encoded, tokenizer, max_len) -> int:
        """Sentences whose last words did not fit (they are tagged O)."""
        full = (encoded.tensors["attention_mask"].sum(1) == max_len).tolist()
        kept = encoded.meta.get("first_words") or [
            range(len(f)) for f in encoded.meta["first_tokens"]
        ]
        return sum(
            cut and max(words, default=-1) < len(s.words) - 1
            for cut, words, s in zip(full, kept, examples, strict=True)
        )


def read_words(path: Path, fields_of: Callable[[str], list[str]] = str.split) -> list[Sentence]:
    """The untagged sentences of a CoNLL-style file: each line's first field (`fields_of` splits
    a line), a blank line or `-DOCSTART-` between sentences."""
    sentences: list[Sentence] = []
    words: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in [*f, ""]:  # the final "" ends the last sentence
            fields = fields_of(line)
            if fields and fields[0] and fields[0] != "-DOCSTART-":
                words.append(fields[0])
            elif words:
                sentences.append(Sentence(str(len(sentences)), tuple(words), None))
                words = []
    return sentences


@dataclass(frozen=True)
class TextSentence(Sentence):
    """A sentence from a line of text: the line itself and each word's character offset in it."""

    text: str = ""
    starts: tuple[int, ...] = ()


def sentence_text(sentence: Sentence) -> tuple[str, tuple[int, ...]]:
    """The text a sentence's character offsets refer to, and each word's start in it: the line
    it was read from, or its words joined by single spaces."""
    if isinstance(sentence, TextSentence):
        return sentence.text, sentence.starts
    starts, at = [], 0
    for word in sentence.words:
        starts.append(at)
        at += len(word) + 1
    return " ".join(sentence.words), tuple(starts)


def entity_spans(tags: list[str]) -> list[tuple[str, int, int]]:
    """(type, first word, last word) of each entity in a tag sequence: B-X starts one, I-X
    continues an X (and starts one after anything else, as IOB1 and Hugging Face's grouping do),
    a tag without a prefix is an I- tag of its own name, O is outside."""
    spans: list[list] = []
    previous = "O"
    for i, tag in enumerate(tags):
        if tag == "O":
            previous = "O"
            continue
        prefix, _, kind = tag.partition("-") if tag[:2] in ("B-", "I-") else ("I", "", tag)
        if prefix == "B" or previous == "O" or previous != kind:
            spans.append([kind, i, i])
        else:
            spans[-1][2] = i
        previous = kind
    return [tuple(s) for s in spans]


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
