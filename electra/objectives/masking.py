"""Dynamic masking (docs/specification.md §Masking): which positions each row predicts, what the
masked input holds there, and how a generator's samples are written back into the sequence.

Every tensor shape is static: each row gets exactly `num_slots` prediction slots, and rows that need
fewer carry zero-weight slots, so a step compiles once and never syncs with the host.

Positions are drawn as the official `PH.mask` draws them: uniformly *with replacement* among the
real, non-special tokens, so a row's k used slots may hold a position twice (about 7% of slots at
seq len 128). Such a position is masked if any of its slots drew [MASK], written once, and counts
once per slot in an MLM loss, as there. `objective.distinct_positions` draws without replacement.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from electra.config import ObjectiveConfig
from electra.data.tokenizer import SpecialIds


@dataclass
class Masked:
    """The result of masking one batch: which slots were chosen and the generator's input."""

    positions: torch.Tensor  # [B, N] token positions per row
    weights: torch.Tensor  # [B, N] 1.0 for a used slot, 0.0 for a padding slot
    writes: torch.Tensor  # [B, N] bool: a used slot whose position no earlier used slot holds
    targets: torch.Tensor  # [B, N] original ids at `positions`
    input_ids: torch.Tensor  # [B, T] with the used slots set to [MASK], kept, or a random token


def select_positions(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special: SpecialIds,
    mask_prob: float,
    num_slots: int,
    distinct: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chooses round(real_tokens * mask_prob) positions per row (at least 1, at most `num_slots`),
    never a special token or padding: uniform draws with replacement (the official code), or
    `distinct` ones. Returns positions [B, N] and slot weights [B, N]."""
    candidate = predictable(input_ids, attention_mask, special)
    num_real = (attention_mask != 0).sum(1)  # document numbers, not only 0s and 1s
    count = torch.round(num_real * mask_prob).long().clamp(1, num_slots)
    count = torch.where(candidate.any(1), count, 0)  # a row with no candidate uses no slot
    if distinct:
        # Uniform scores on candidates and -1 elsewhere: the top k are k uniformly chosen candidates.
        scores = torch.rand(input_ids.shape, device=input_ids.device).masked_fill(~candidate, -1.0)
        positions = scores.topk(num_slots, dim=1, sorted=True).indices
        count = torch.minimum(count, candidate.sum(1))
    else:
        # A row with no candidate draws from all its positions, so that every row has a
        # distribution; none of its slots is used.
        weights = candidate | ~candidate.any(1, keepdim=True)
        positions = torch.multinomial(weights.float(), num_slots, replacement=True)
    weights = torch.arange(num_slots, device=input_ids.device)[None, :] < count[:, None]
    return positions, weights.float()


def first_writes(positions: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """True at each used slot whose position no earlier used slot of its row holds: the slots that
    write into the sequence, one per distinct position."""
    used = weights.bool()
    n = positions.shape[1]
    earlier = torch.ones(n, n, dtype=torch.bool, device=positions.device).tril(-1)  # [i, j]: j < i
    repeat = (positions[:, :, None] == positions[:, None, :]) & earlier & used[:, None, :]
    return used & ~repeat.any(-1)


def write_slots(
    input_ids: torch.Tensor, positions: torch.Tensor, values: torch.Tensor, writes: torch.Tensor
) -> torch.Tensor:
    """input_ids with values[b, i] at positions[b, i] where writes[b, i]. The writing slots hold
    distinct positions, so adding their changes is exact whatever other slots hold."""
    delta = torch.where(writes, values - input_ids.gather(1, positions), 0)
    return input_ids.scatter_add(1, positions, delta)


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special: SpecialIds,
    cfg: ObjectiveConfig,
    num_slots: int,
    vocab_size: int,
) -> Masked:
    """Dynamic masking, drawn anew at every step: chosen slots become [MASK] (mask_frac), stay as they
    are (keep_frac), or become a uniformly random vocabulary id (random_frac)."""
    positions, weights = select_positions(
        input_ids, attention_mask, special, cfg.mask_prob, num_slots, cfg.distinct_positions
    )
    writes = first_writes(positions, weights)
    targets = input_ids.gather(1, positions)
    u = torch.rand(positions.shape, device=input_ids.device)
    random_ids = torch.randint_like(targets, vocab_size)
    # As in the official code, a position held by several used slots becomes [MASK] if any of them
    # drew [MASK]; otherwise its first slot's draw (keep, or a random token) stands.
    draws_mask = (u < cfg.mask_frac) & weights.bool()
    any_mask = torch.zeros_like(input_ids).scatter_add(1, positions, draws_mask.long())
    replacement = torch.where(
        any_mask.gather(1, positions) > 0,
        torch.full_like(targets, special.mask),
        torch.where(u < cfg.mask_frac + cfg.keep_frac, targets, random_ids),
    )
    masked = write_slots(input_ids, positions, replacement, writes)
    return Masked(positions, weights, writes, targets, masked)


def replace_tokens(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, m: Masked, sampled: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input and labels: samples written into every used slot (the kept ones
    too; a position held by two slots takes the first one's sample; unused slots change nothing),
    and "replaced" only where the token now differs, so a sample equal to the original is labelled
    original."""
    corrupted = write_slots(input_ids, m.positions, sampled, m.writes)
    return corrupted, (corrupted != input_ids) & attention_mask.bool()


def selected_positions(
    like: torch.Tensor, positions: torch.Tensor, writes: torch.Tensor
) -> torch.Tensor:
    """A bool [B, T] map of the positions that writing slots hold."""
    hits = torch.zeros_like(like, dtype=torch.long).scatter_add(1, positions, writes.long())
    return hits > 0


def predictable(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, special: SpecialIds
) -> torch.Tensor:
    """A bool [B, T] map of the real tokens that are not [CLS], [SEP], [MASK] or padding: the
    candidates for masking, and the tokens an all-token objective predicts."""
    keep = attention_mask.bool()
    for token in (special.cls, special.sep, special.mask, special.pad):
        keep = keep & (input_ids != token)
    return keep
