"""Which rows of a held-out split a model trained on, found by content rather than by file
(docs/finetuning.md §Held-out rows): a row's key is a hash of its text fields (never its label),
normalised as the model sees them, so that the same rows reordered, copied, or inside another file
are the same rows.

A fine-tuned model keeps the keys of the rows it trained on (`training_rows.npy`,
`electra.folders.finetuned.save_rows`), so that `evaluate` knows them without the training
file. A held-out set that shares rows with training is refused, or with `--drop-overlap` those rows are left out and
counted; a benchmark's published splits, which share a few rows (CoLA's dev 16 of 1,043, STS-B's
6 of 1,500, CoNLL-2003's 193 of 3,250 sentences), are scored as published, with a note.
"""

from __future__ import annotations

import hashlib
import sys
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np
import tokenizers

from electra.errors import ElectraError

_FIELDS = "\x1f"  # between a row's text fields (the unit separator: in no normalised text)
_ABSENT = "\x00"  # a text field the row has not (a single text where the task reads pairs)
# How many rows of a benchmark's published held-out set have the text of one of its training
# rows (the most over cased and uncased keys), counted on the published files: more than this in
# a file given as that set is not the published file, and is refused. CoNLL-2003's are short lines
# (scores, place names and dates); SST-2's, MRPC's, RTE's and WNLI's dev files share none.
PUBLISHED_OVERLAP = {
    ("cola", "dev"): 16,
    ("stsb", "dev"): 6,
    ("conll2003", "dev"): 196,
    ("sst2", "dev"): 0,
    ("mrpc", "dev"): 0,
    ("rte", "dev"): 0,
    ("wnli", "dev"): 0,
}
# The most of any benchmark set that may share text with training and still be scored as
# published (the published files share at most 6%: CoNLL-2003's dev); the only bound for a set not
# counted above (MNLI's, QQP's, QNLI's, SQuAD's, CoNLL-2003's test). A shuffled copy of the
# training file shares all of it.
PUBLISHED_SHARE = 0.1


def normalised(texts: list[str], tokenizer: tokenizers.Tokenizer | None) -> list[str]:
    """Texts as the key sees them: Unicode NFC; lowercased and stripped of accents where the
    model's tokenizer does that (an uncased one: "The Film" and "the film" are one row to a model
    that reads them alike, while a cased one keeps case, as its model sees it); then every run of
    whitespace one space, none at either end."""
    lower, plain = _folds(tokenizer)

    def normalise(text: str) -> str:
        text = unicodedata.normalize("NFC", text)
        if lower:
            text = text.lower()
        if plain and not text.isascii():
            decomposed = unicodedata.normalize("NFD", text)
            text = "".join(c for c in decomposed if unicodedata.category(c) != "Mn")
        return " ".join(text.split())

    return [normalise(t) for t in texts]


def _folds(tokenizer: tokenizers.Tokenizer | None) -> tuple[bool, bool]:
    """Whether the tokenizer's normaliser lowercases, and whether it strips accents: asked of
    it once, since calling it per text would cost ten times the hashing."""
    model = getattr(tokenizer, "normalizer", None)
    if model is None:
        return False, False
    probe = model.normalize_str("A\u00e9")  # Aé: "aé" lowercases, "ae" strips accents too
    return probe[:1] == "a", probe[1:] == "e"


def row_keys(
    task: Any, examples: Sequence[Any], tokenizer: tokenizers.Tokenizer | None
) -> np.ndarray:
    """The key of each example, in order (uint64): 8 bytes of BLAKE2b over its text fields
    (`Task.row_texts`), `normalised`, in order."""
    rows = [task.row_texts(e) for e in examples]
    texts = iter(normalised([t for row in rows for t in row if t is not None], tokenizer))
    digest = hashlib.blake2b
    keys = b"".join(
        digest(
            _FIELDS.join(_ABSENT if t is None else next(texts) for t in row).encode(
                "utf-8",
                "surrogatepass",  # JSON may hold a lone surrogate, which UTF-8 cannot
            ),
            digest_size=8,
        ).digest()
        for row in rows
    )
    return np.frombuffer(keys, dtype="<u8").copy()


def same_rows(keys: np.ndarray) -> list[list[int]]:
    """The positions of the rows, grouped by key (copies of one row together), each group at
    the place of its first row."""
    groups: dict[int, list[int]] = {}
    for position, key in enumerate(keys.tolist()):
        groups.setdefault(key, []).append(position)
    return list(groups.values())


def screen(
    task: Any,
    tokenizer: tokenizers.Tokenizer | None,
    examples: list,
    trained: np.ndarray,
    where: str,
    whose: str,
    drop: bool,
    set_name: str = "",
) -> tuple[list, dict[str, Any] | None]:
    """A held-out set's examples with no training row among them, and what was found: the rows
    of `examples` whose key is among the sorted `trained` keys are refused (one error naming
    `where`, the set, and `whose` rows they are), dropped with `drop`, or kept with a note in a
    benchmark's published splits (`task.fixed_splits`) and in a set without labels, which is
    predicted but not scored."""
    keys = row_keys(task, examples, tokenizer)
    shared = np.isin(keys, trained, assume_unique=False)
    found, total = int(shared.sum()), len(examples)
    if not found:
        return examples, None
    report = {"file": where, "rows": found, "examples": total}
    if note := _kept_because(task, examples, whose, (set_name, found, total), drop):
        print(f"note: {where}: {found} of its {total} rows {note}", file=sys.stderr)
        return examples, {**report, "action": "kept"}
    if drop:
        kept = [e for e, s in zip(examples, shared.tolist(), strict=True) if not s]
        if not kept:
            raise ElectraError(
                f"{where}: all {total} of its rows are {whose}: nothing is left to score; pass "
                "a file of rows it did not train on"
            )
        print(
            f"{where}: {found} of its {total} rows left out of the score (--drop-overlap): they "
            f"are {whose}",
            file=sys.stderr,
        )
        return kept, {**report, "action": "dropped"}
    raise ElectraError(
        f"{where}: {found} of its {total} rows are {whose} (the same text, normalised): a score "
        "on them would be on training examples; remove them, or pass --drop-overlap to leave "
        "them out of the score"
    )


def _kept_because(task: Any, examples: list, whose: str, seen: tuple, drop: bool) -> str:
    """Why a set's training rows are kept, with a note, rather than refused or dropped: a set
    without labels, which nothing scores (its predictions keep every row, as a submission file
    needs), or a benchmark's published set, scored as published so that scores compare with the
    paper's, where it shares no more rows with training than the published files do
    (`PUBLISHED_OVERLAP`) and at most `PUBLISHED_SHARE` of it; "" otherwise. `seen` is (the
    set's name, the rows found, the rows in all)."""
    if not any(map(task.is_labelled, examples)):
        return f"are {whose}; it has no labels, so they are predicted, not scored"
    set_name, found, total = seen
    published = PUBLISHED_OVERLAP.get((task.name, set_name))
    fits = found <= PUBLISHED_SHARE * total and (published is None or found <= published)
    if getattr(task, "fixed_splits", False) and fits and not drop:
        return (
            f"have the text of a training row ({task.name}'s published splits share "
            f"{published if published is not None else 'some'}); scored as published, "
            "--drop-overlap leaves them out"
        )
    return ""
