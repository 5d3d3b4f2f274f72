"""`electra tokenizer train` as a library function: a tokenizer trained on a corpus and written as
a tokenizer folder (`load_tokenizer` and HF's `AutoTokenizer` read it), with a note where the
corpus gave fewer tokens than asked for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from electra.atomic import atomic_dir
from electra.data.corpus import resolve_paths
from electra.data.tokenizer import (
    DEFAULT_MIN_FREQUENCY,
    lowercases,
    model_specials,
    save_tokenizer,
    train_tokenizer,
)
from electra.locks import claim_output

DEFAULT_VOCAB_SIZE = 30522  # BERT's and ELECTRA's


def train_tokenizer_folder(
    corpus: str | Path | Sequence[str | Path],
    out: str | Path,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    model: str = "wordpiece",
    lowercase: bool | None = None,
    min_frequency: int | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Trains a tokenizer of kind `model` (wordpiece, bpe or unigram) on `corpus` (files, globs
    or folders) and writes it to the folder `out`, which appears only when complete; an existing
    one is replaced only with `overwrite`. Returns {"out", "tokens", "note"}: the folder, the
    tokenizer's size, and why it is smaller than `vocab_size` (None where it is not)."""
    corpus = [str(corpus)] if isinstance(corpus, str | Path) else [str(c) for c in corpus]
    model_specials(model)  # a wrong kind is refused before the corpus is read
    out = Path(out)
    claim = claim_output(  # before the corpus is read: one writer, nothing lost
        out, overwrite, reads=corpus, replaces=("tokenizer.json", "vocab.txt")
    )
    with claim:
        paths = resolve_paths(corpus)
        tok = train_tokenizer(
            paths, vocab_size, lowercase=lowercase, min_frequency=min_frequency, model=model
        )
        with atomic_dir(out) as tmp:
            save_tokenizer(tok, tmp, lowercase=lowercases(tok))
    size = tok.get_vocab_size()
    return {
        "out": out,
        "tokens": size,
        "note": _short_vocab_note(size, vocab_size, model, min_frequency),
    }


def _short_vocab_note(
    size: int, vocab_size: int, model: str, min_frequency: int | None
) -> str | None:
    # --vocab-size is a ceiling, not a target: a small corpus runs out of pairs to merge first.
    if size >= vocab_size:
        return None
    if model == "unigram":
        why = "Unigram keeps no more pieces than the corpus's frequent substrings give"
    else:
        least = DEFAULT_MIN_FREQUENCY if min_frequency is None else min_frequency
        times = "time" if least == 1 else "times"
        kind = "WordPiece" if model == "wordpiece" else "BPE"
        why = f"{kind} stops when no pair of pieces occurs --min-frequency {least} {times}"
    return f"the corpus gave {size} tokens, fewer than --vocab-size {vocab_size} ({why})"
