"""Named-entity recognition on CoNLL-2003 files: one `word POS chunk TAG` line per token, a blank
line between sentences, `-DOCSTART-` lines between documents.

Each word's tag is predicted at its first sub-token (the official tagging recipe); the loss is
summed over words. Words beyond the model's length are predicted `O` so that every sentence is
scored whole, with entity-level F1 (seqeval). `electra.tasks.tagging` is the general case: the
user's files in CoNLL columns or JSONL, with the tag set read from the training file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import electra.tasks.metrics as metrics
from electra.data.tokenizer import special_ids
from electra.errors import ElectraError
from electra.model.heads import ElectraForTokenClassification
from electra.tasks.base import Encoded, Task, require_suffix

IGNORE = -100
CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")


@dataclass(frozen=True)
class Sentence:
    id: str
    words: tuple[str, ...]
    tags: tuple[str, ...] | None


def read_conll(path: Path, labels: tuple[str, ...]) -> list[Sentence]:
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []

    def flush() -> None:
        if words:
            sentences.append(Sentence(str(len(sentences)), tuple(words), tuple(tags)))
            words.clear()
            tags.clear()

    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                flush()
                continue
            if len(fields) < 2:
                raise ElectraError(
                    f"{path}, line {line_no}: expected a word and its tag separated by spaces, "
                    f"found {line.strip()!r}: is this a CoNLL-2003 file?"
                )
            if fields[-1] not in labels:
                raise ElectraError(
                    f"{path}, line {line_no}: unknown tag {fields[-1]!r} (expected one of "
                    f"{', '.join(labels)})"
                )
            words.append(fields[0])
            tags.append(fields[-1])
    flush()
    if not sentences:
        raise ElectraError(f"{path} has no sentences: expected a CoNLL-2003 file")
    return sentences


class NerTask(Task):
    name = "conll2003"
    family = "tagging"
    main_metric = "f1"
    writes_submission = False  # CoNLL-2003's test file is tagged: scored as dev is, no server
    token_outputs = ("tags",)
    files = {
        "train": {"train": ("train.txt", "eng.train")},
        "dev": {"dev": ("valid.txt", "dev.txt", "eng.testa")},
        "test": {"test": ("test.txt", "eng.testb")},
    }

    def __init__(self, labels: tuple[str, ...] = CONLL_TAGS):
        self.labels = tuple(labels)

    def head_config(self):
        return {"labels": list(self.labels)}

    def with_head_config(self, head):
        return NerTask(tuple(head["labels"]))

    def read(self, path, split):
        return read_conll(path, self.labels)

    def encode(self, examples, tokenizer, max_len, training) -> Encoded:
        special = special_ids(tokenizer)
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
            row = [special.cls, *enc.ids[: max_len - 2], special.sep]
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
            firsts, words, previous = [], [], None
            for pos, word in enumerate(enc.word_ids[: max_len - 2], start=1):
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

    def build_model(self, cfg) -> ElectraForTokenClassification:
        return ElectraForTokenClassification(cfg, len(self.labels))

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

    def read_inputs(self, path: Path) -> list[Sentence]:
        """Sentences of a CoNLL-style file: a word per line (its first field; tags and other
        columns, if any, are ignored), a blank line between sentences."""
        require_suffix(path, CONLL_SUFFIXES, self.name)
        return read_words(path)

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


CONLL_SUFFIXES = (".txt", ".conll", ".iob", ".bio", ".testa", ".testb", ".train")


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
