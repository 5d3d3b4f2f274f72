"""The two row builders of `prepare`: the official ELECTRA packing (`ExampleBuilder`, `prepare
--packing official`) and the default that discards nothing (`CarryingBuilder`, `--packing carry`).
Each packs the token ids of a document's lines into (segment A, segment B) examples."""

from __future__ import annotations

import itertools
import random

Example = tuple[list[int], list[int]]  # (segment A, segment B) token ids, no specials


class ExampleBuilder:
    """Packs the token ids of a document's lines into examples by the official ELECTRA rules.

    This is `prepare --packing official`: bit-for-bit the official builder, which cuts an example
    at the target length and discards what overflows (a third of paragraph-per-line text).
    `single_extra` and `pair_extra` are the ids the tokenizer frames one and two segments with
    (BERT's 2 and 3; RoBERTa's pair has 4).
    """

    def __init__(
        self, max_len: int, rng: random.Random, single_extra: int = 2, pair_extra: int = 3
    ):
        self.max_len = max_len
        self.single_extra = single_extra
        self.pair_extra = pair_extra
        self.rng = rng
        self.target = max_len
        self.lines: list[list[int]] = []
        self.length = 0
        self.single_segment = 0  # examples whose 10% coin made them one segment
        self.random_target = 0  # examples built with a randint(5, max_len) target length
        self.tokens_read = 0
        self.tokens_kept = 0

    def add_line(self, ids: list[int]) -> list[Example]:
        """Add one line; returns the example it completes, if any."""
        if not ids:
            return []
        self.tokens_read += len(ids)
        self.lines.append(ids)
        self.length += len(ids)
        if self.length >= self.target:
            return [self._create()]
        return []

    def end_document(self) -> list[Example]:
        """Examples never cross documents: flush whatever has accumulated."""
        return [self._create()] if self.length else []

    def _create(self) -> Example:
        if self.rng.random() < 0.1:
            first_target = 100_000
            self.single_segment += 1
        else:
            first_target = (self.target - self.pair_extra) // 2  # less [CLS] and two [SEP]
        first: list[int] = []
        second: list[int] = []
        for ids in self.lines:
            # Same short-circuit order as the official code, so the 0.5 coin is drawn only
            # when reached and the random stream matches it.
            if (
                not first
                or len(first) + len(ids) < first_target
                or (not second and len(first) < first_target and self.rng.random() < 0.5)
            ):
                first += ids
            else:
                second += ids
        first = first[: self.max_len - self.single_extra]
        second = second[: max(0, self.max_len - len(first) - self.pair_extra)]
        self.tokens_kept += len(first) + len(second)
        self._next_example()
        return first, second

    def _next_example(self) -> None:
        """Counts the example just built and draws the next one's target length."""
        self.random_target += self.target != self.max_len
        self.lines, self.length = [], 0
        if self.rng.random() < 0.05:
            self.target = self.rng.randint(5, self.max_len)
        else:
            self.target = self.max_len


class CarryingBuilder(ExampleBuilder):
    """The default packing (`prepare --packing carry`): the official builder's target lengths,
    10% single-segment and 5% random-length examples, and document boundaries, but nothing is
    discarded. A line that does not fit the current example is cut at a word start and its rest
    opens the next example of the same document; segment B starts at the line boundary nearest
    the official A length, or at a word start when no line boundary is near (a long line).

    A departure from the official code (docs: faithfulness notes): on paragraph-per-line text
    the official rule drops about a third of the tokens, this one none.
    """

    def __init__(
        self,
        max_len: int,
        rng: random.Random,
        continuation: frozenset[int],
        single_extra: int = 2,
        pair_extra: int = 3,
    ):
        super().__init__(max_len, rng, single_extra, pair_extra)
        self.continuation = continuation  # ids of word pieces that continue a word ("##ing")
        # Drawn as an example opens, not as it closes, so a single segment fills its extra slot.
        self.single = self.rng.random() < 0.1

    def add_line(self, ids: list[int]) -> list[Example]:
        examples = []
        self.tokens_read += len(ids)
        while ids:
            room = self._capacity() - self.length
            cut = len(ids) if len(ids) <= room else self._word_start(ids, room)
            if cut == 0 and self.length:  # the word at hand does not fit: it opens the next one
                examples.append(self._create())
                continue
            cut = cut or room  # a word longer than a whole example is cut where it must be
            self.lines.append(ids[:cut])
            self.length += cut
            ids = ids[cut:]
            if self.length >= self._capacity() or ids:
                examples.append(self._create())
        return examples

    def _capacity(self) -> int:
        """Word pieces the open example holds: the target less [CLS] and one [SEP] per segment
        (at least one, should a random target be shorter than a long framing)."""
        return max(1, self.target - (self.single_extra if self.single else self.pair_extra))

    def _word_start(self, ids: list[int], at: int) -> int:
        """The last position in 1..at where a word starts, or 0 when there is none."""
        for i in range(at, 0, -1):
            if ids[i] not in self.continuation:
                return i
        return 0

    def _create(self) -> Example:
        tokens = [i for line in self.lines for i in line]
        self.single_segment += self.single
        cut = 0 if self.single or len(tokens) < 2 else self._segment_cut(tokens)
        self.tokens_kept += len(tokens)
        self._next_example()
        self.single = self.rng.random() < 0.1
        return (tokens[:cut], tokens[cut:]) if cut else (tokens, [])

    def _segment_cut(self, tokens: list[int]) -> int:
        """Where B starts: the official A length, moved to the nearest line boundary within half
        of it, else to a word start; both segments keep at least one token."""
        want = max(1, (self.target - self.pair_extra) // 2)
        boundaries = list(itertools.accumulate(len(line) for line in self.lines))[:-1]
        if boundaries:
            nearest = min(boundaries, key=lambda b: abs(b - want))
            if abs(nearest - want) <= want // 2:
                return nearest
        want = min(want, len(tokens) - 1)
        return self._word_start(tokens, want) or want
