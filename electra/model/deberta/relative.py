"""DeBERTa's relative positions (docs/specification.md §The DeBERTa-v3 family): the log-bucketed
distance between a query and a key, and which rows of the relative table a row of T tokens reads.

A distance d = i - j (query i, key j) within +-position_buckets / 2 is its own bucket; beyond, the
buckets are log-spaced so that the distance `reach` - 1 falls in the last one (`transformers`'
`make_log_bucket_position`, whose arithmetic `log_buckets` repeats op for op, so that a boundary
falls where it falls there). The table has 2 * position_buckets rows; distance bucket b reads row
clamp(b + position_buckets, 0, 2 * position_buckets - 1).

`transformers` builds the per-pair [T, T] index and then gathers from products against the whole
table. Here the index is built from the 2T - 1 distances a row has, and only the rows of the table
those distances reach are projected and multiplied (`RelativeRows`): at 128 tokens with 256 buckets,
255 of the 512 rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def log_buckets(distance: torch.Tensor, buckets: int, reach: int) -> torch.Tensor:
    """The bucket of each relative distance (long), as `transformers`' DebertaV2 computes it."""
    sign = torch.sign(distance)
    mid = buckets // 2
    near = (distance < mid) & (distance > -mid)
    abs_pos = torch.where(near, torch.tensor(mid - 1).type_as(distance), torch.abs(distance))
    scale = torch.log(torch.tensor((reach - 1) / mid))
    log_pos = torch.ceil(torch.log(abs_pos / mid) / scale * (mid - 1)) + mid
    bucket = torch.where(abs_pos <= mid, distance.type_as(log_pos), log_pos * sign)
    return bucket.long()


def widest_bucket(seq_len: int, buckets: int, reach: int) -> int:
    """An upper bound on |bucket| over the distances of a row of `seq_len` tokens, in plain
    Python (no device work, no host sync): the float32 rounding of `log_buckets` may differ by
    one, so one is added; where the log spacing is degenerate, the whole table."""
    d, mid = seq_len - 1, buckets // 2
    if d <= mid:
        return d
    try:
        bound = math.ceil(math.log(d / mid) / math.log((reach - 1) / mid) * (mid - 1)) + mid
    except (ValueError, ZeroDivisionError):
        return buckets
    return bound + 1 if bound > 0 else buckets


@dataclass
class RelativeRows:
    """What every layer of one forward pass reads of the relative positions: `lo`, the first row
    of the table a distance in the row reaches, `rows` rows from there, and `index` [T, T], the
    row (counted from `lo`) that query i reads for key j."""

    lo: int
    rows: int
    index: torch.Tensor

    @classmethod
    def of(cls, seq_len: int, buckets: int, reach: int, device: torch.device) -> RelativeRows:
        span = buckets  # the table has 2 * span rows; distance bucket b reads row b + span
        widest = widest_bucket(seq_len, buckets, reach)
        lo, hi = max(0, span - widest), min(2 * span - 1, span + widest)
        # The 2T - 1 distances T - 1 ... -(T - 1), then query i, key j reads distance i - j.
        distance = torch.arange(seq_len - 1, -seq_len, -1, device=device)
        row = (log_buckets(distance, buckets, reach) + span).clamp(0, 2 * span - 1) - lo
        pos = torch.arange(seq_len, device=device)
        index = row[(seq_len - 1) - pos[:, None] + pos[None, :]]
        return cls(lo, hi - lo + 1, index)
