"""Named-entity recognition on CoNLL-2003 files: one `word POS chunk TAG` line per token, a blank
line between sentences, `-DOCSTART-` lines between documents.

Each word's tag is predicted at its first sub-token (the official tagging recipe); the loss is
summed over words. Words beyond the model's length are predicted `O` so that every sentence is
scored whole, with entity-level F1 (seqeval).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from electra import metrics
from electra.errors import ElectraError
from electra.heads import ElectraForTokenClassification
from electra.tasks.base import Encoded, Task
from electra.tokenizer import special_ids

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
        encodings = tokenizer.encode_batch(
            [list(s.words) for s in examples], is_pretokenized=True, add_special_tokens=False
        )
        for i, (sentence, enc) in enumerate(zip(examples, encodings, strict=True)):
            row = [special.cls, *enc.ids[: max_len - 2], special.sep]
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
            firsts, previous = [], None
            for pos, word in enumerate(enc.word_ids[: max_len - 2], start=1):
                if word is not None and word != previous:
                    firsts.append(pos)
                    if sentence.tags is not None:
                        labels[i, pos] = self.labels.index(sentence.tags[word])
                previous = word
            first_tokens.append(firsts)
        tensors = {
            "input_ids": ids,
            "token_type_ids": torch.zeros_like(ids),
            "attention_mask": mask,
        }
        if examples[0].tags is not None:
            tensors["labels"] = labels
        return Encoded(tensors, {"first_tokens": first_tokens})

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
            pred = [self.labels[t] for t in tags[i, firsts].tolist()]
            pred += ["O"] * (len(sentence.words) - len(pred))  # words cut off by max_seq_len
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
