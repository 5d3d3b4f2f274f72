"""Cutting a text to what a model can use before it is tokenised whole: a tokenizer holds a few
hundred bytes per character of the text it encodes (an 11 MB line took 2.97 GB), so a long text is
tokenised in growing prefixes until one holds more tokens than the budget, and only that prefix is
kept.

The prefix ends at a whitespace where there is one, so the words it keeps are tokenised as they
are in the whole text, and it holds more than `budget` tokens, so that a caller that truncates to
the budget still sees that the text was cut. Imports nothing from electra but `errors`.
"""

from __future__ import annotations

import re

from tokenizers import Tokenizer

# The first prefix tried: this many characters per token of the budget (English averages about
# 4.5 characters per word piece), doubled until the prefix holds more tokens than the budget.
FIRST_CHARS_PER_TOKEN = 8
# A text of at most this many characters per token of the budget is kept without a look: no
# tokenizer makes more than 4 tokens of a character (a byte-level one: one per UTF-8 byte), so it
# cannot hold more tokens than the budget.
SHORT_CHARS_PER_TOKEN = 0.25
# The whitespace a prefix may end at is looked for in its last eighth, so that a text without any
# near the cut (a long word, a URL) is cut where it must be rather than much shorter.
_LOOK_BACK = 8
# The longest prefix tokenised: this many characters per token of the budget. A text whose prefix
# this long still holds no more tokens than the budget is mostly what tokenizers drop (runs of
# whitespace, control characters), and is cut here rather than tokenised whole.
MAX_CHARS_PER_TOKEN = 64
_SPACE = re.compile(r"\s")


def cut_to_tokens(tok: Tokenizer, text: str, budget: int) -> tuple[str, int]:
    """`text`, or a prefix of it that holds more than `budget` tokens (special tokens left out)
    or, where none of `MAX_CHARS_PER_TOKEN` characters per token does, that long a prefix; and
    how many characters were cut from its end (0: the text is whole)."""
    if len(text) <= budget * SHORT_CHARS_PER_TOKEN or budget <= 0:
        return text, 0
    size, most = max(budget * FIRST_CHARS_PER_TOKEN, 64), budget * MAX_CHARS_PER_TOKEN
    while size < len(text):
        prefix = text[: word_end(text, min(size, most))]
        if size >= most or len(tok.encode(prefix, add_special_tokens=False).ids) > budget:
            return prefix, len(text) - len(prefix)
        size *= 2
    return text, 0


def word_end(text: str, size: int) -> int:
    """Where a prefix of about `size` characters of `text` ends: before the last whitespace in
    its last eighth, or at `size` when there is none."""
    if size >= len(text):
        return len(text)
    low = size - size // _LOOK_BACK
    # The whitespace at `size` itself (the next character) is as good an end as any before it.
    for i in range(size, low - 1, -1):
        if _SPACE.match(text, i):
            return i
    return size


def cut_texts(tok: Tokenizer, texts: list[str], budget: int) -> tuple[list[str], int]:
    """Each text cut as `cut_to_tokens` cuts it, and how many characters were cut in all."""
    kept, cut = [], 0
    for text in texts:
        text, lost = cut_to_tokens(tok, text, budget)
        kept.append(text)
        cut += lost
    return kept, cut
