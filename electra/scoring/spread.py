"""Whether two sets of scores over seeds differ beyond their seed spread: the one rule behind every
"beats" that `electra probe`, `electra experiment` and their tables say (docs/objectives.md
§Differences beyond the seed spread).

A difference is shown when the two ranges do not overlap (every score of one side above every score
of the other) and each side has at least MIN_SEEDS scores. With three a side, ranges apart is the
exact one-sided Mann-Whitney test at p = 1/20 = 0.05: of the 20 equally likely orderings of six
scores from one distribution, one puts a given three above the other three. A median that is higher
on overlapping ranges, or on fewer seeds, is "no difference shown", whatever its size.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_SEEDS = 3
BETTER, WORSE, NONE_SHOWN = "better", "worse", "no difference shown"
# A table cell's mark for a difference beyond the spread, by direction.
MARKS = {BETTER: "▲", WORSE: "▼", NONE_SHOWN: ""}


@dataclass(frozen=True)
class Difference:
    """`a`'s median less `b`'s, and whether the seeds show it: BETTER, WORSE or NONE_SHOWN."""

    gain: float
    shown: str
    seeds: tuple[int, int]  # scores on each side

    @property
    def mark(self) -> str:
        return MARKS[self.shown]

    def in_words(self) -> str:
        """'+2.10, ranges apart' or '+0.46, within the seed spread' (or too few seeds)."""
        if self.shown != NONE_SHOWN:
            return f"{self.gain:+.2f}, ranges apart"
        if self.seeds == (0, 0):
            return f"{self.gain:+.2f}, its seeds' scores not recorded"
        if min(self.seeds) < MIN_SEEDS:
            return f"{self.gain:+.2f}, too few seeds to tell (fewer than {MIN_SEEDS} a side)"
        return f"{self.gain:+.2f}, within the seed spread"


def difference(a: Sequence[float], b: Sequence[float]) -> Difference:
    """How scores `a` (one per seed) stand against scores `b`."""
    if not a or not b:
        raise ValueError("difference() needs at least one score on each side")
    gain = statistics.median(a) - statistics.median(b)
    shown = NONE_SHOWN
    if min(len(a), len(b)) >= MIN_SEEDS:
        if min(a) > max(b):
            shown = BETTER
        elif max(a) < min(b):
            shown = WORSE
    return Difference(gain, shown, (len(a), len(b)))


def compared(a: dict, b: dict) -> Difference:
    """How summary `a` ({median, min, max, per_seed}) stands against summary `b`: the medians'
    difference, shown or not by their per-seed scores. A summary written without them (an
    earlier version's) shows no difference."""
    if a.get("per_seed") and b.get("per_seed"):
        return difference(a["per_seed"], b["per_seed"])
    return Difference(a["median"] - b["median"], NONE_SHOWN, (0, 0))
