"""A pretraining run's held-out health: how its discriminator does on text it never trained on,
corrupted by its own generator, and whether its representations still vary from token to token.

Training logs AUC on the batches it learns from; these figures are on a held-out data folder
(`pretrain --eval-data`, or `electra health` on a finished run or a checkpoint), on word pieces only
(specials are never replaced, so they would flatter it):

- `disc_auc`, `disc_ap`: ranking replaced above original tokens (chance: 0.5 and the replaced
  share r), corrupted by the run's own generator: a harder task as that generator improves, so
  not comparable between runs or checkpoints;
- `disc_auc_fixed`: the same ranking on a corruption fixed by the held-out rows alone (`fixed_
  corruption`: 15% of word pieces replaced by draws from the rows' own word pieces, from a
  constant seed), the one figure two runs, or two checkpoints of one run, are compared on;
- `disc_prior_gain`: nats per token the discriminator's cross-entropy saves over always predicting
  r, the best a model that ignores its input can do (0: it has learned nothing it can say);
- `mlm_loss`, `mlm_acc`: the generator's (or the MLM model's) masked-LM loss at the masked slots;
- `hidden_rms`: the RMS of the final hidden states after each dimension's mean over the tokens is
  taken away (0 when every token maps to one vector); `mean_cosine`: the mean cosine between two
  tokens' states (near 0 for random weights, 1 when all point one way); `effective_rank`: exp of
  the entropy of the states' normalised singular values (Roy & Vetterli, 2007), how many
  directions they use, of `hidden_size`.

What the figures say of a run, against its starting point and its history, is
`electra.scoring.verdict`'s; a finished run or a checkpoint is scored by `electra.scoring.run_health`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import asdict, astuple, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import nn

from electra.data.store import PretrainingData
from electra.data.tokenizer import SpecialIds
from electra.errors import ElectraError
from electra.model.family import encoder_of
from electra.objectives.base import Objective

# Held-out rows scored by default: 256 rows of 128 tokens, about 30k word pieces, a few seconds
# of a tiny model on a CPU, and an AUC whose sampling spread is under 0.01.
MAX_ROWS = 256
# Token states the representation figures are taken over (an SVD of [n, hidden]): enough that the
# effective rank of a 1,024-wide model is not capped by the count.
MAX_STATES = 8192
# The fixed corruption: the share of word pieces replaced, and its seed (a constant, so that it
# depends on the held-out rows alone, not on the run, its seed or its objective).
FIXED_RATE = 0.15
FIXED_SEED = 20200301


@dataclass
class Health:
    """One held-out measurement; the discriminator's figures are None for a run without one (the
    MLM objective), the generator's for one without a masked-LM network."""

    tokens: int  # word pieces scored
    disc_auc: float | None = None
    disc_ap: float | None = None
    disc_prior_gain: float | None = None
    replaced_fraction: float | None = None
    disc_auc_fixed: float | None = None
    mlm_loss: float | None = None
    mlm_acc: float | None = None
    hidden_rms: float = 0.0
    mean_cosine: float = 0.0
    effective_rank: float = 0.0
    hidden_size: int = 0
    verdict: str = ""  # learned, not yet, collapsed, drifting: `electra.scoring.verdict.judge`
    verdict_reason: str = ""  # the history it rests on, where there is one

    def record(self) -> dict[str, Any]:
        """The figures as a metrics.jsonl record's fields (None ones left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Health:
        """The measurement a metrics.jsonl record holds (`record`'s other fields ignored)."""
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})


def heldout_rows(data: PretrainingData, max_rows: int = MAX_ROWS, documents: bool = False):
    """The first `max_rows` rows of a held-out data folder as a batch; an empty folder is refused."""
    if len(data) == 0:
        raise ElectraError(
            f"the held-out data folder {data.path} holds no examples: prepare held-out text into "
            "it with `electra prepare`"
        )
    return data.batch(np.arange(min(len(data), max_rows)), documents)


def open_heldout(
    path: str | Path,
    fingerprint: str,
    seq_len: int | None,
    flag: str,
    max_rows: int = MAX_ROWS,
    documents: bool = False,
) -> tuple[PretrainingData, dict[str, torch.Tensor]]:
    """The held-out folder at `path` and its first `max_rows` rows (with `documents`, as the run's
    `data.document_mask`: each token's document number in attention_mask, where rows pack
    several). Refused in one line naming `flag`: a folder prepared with another tokenizer than
    the run's (`fingerprint`: its ids would mean other words), of another sequence length than
    `seq_len` (where given: the run masks as many slots per row as its own rows have), or
    empty."""
    try:
        data = PretrainingData(path)
    except ElectraError as e:  # said as the held-out folder it is
        raise ElectraError(f"{flag} (held-out text): {e}") from None
    if data.meta.get("tokenizer_fingerprint") != fingerprint:
        raise ElectraError(
            f"{flag} {data.path} was prepared with another tokenizer than the run's: prepare the "
            "held-out text with the run's tokenizer (`electra prepare FILES --tokenizer "
            "RUN/tokenizer ...`)"
        )
    if seq_len is not None and data.seq_len != seq_len:
        raise ElectraError(
            f"{flag} {data.path} was prepared with seq len {data.seq_len}, the run's data with "
            f"{seq_len}: prepare the held-out text with --seq-len {seq_len}"
        )
    return data, heldout_rows(data, max_rows, documents)


@torch.no_grad()
def measure(
    networks: Mapping[str, nn.Module],
    corruption: Objective,
    batch: dict[str, torch.Tensor],
    special: SpecialIds,
    chunk: int = 32,
    seed: int = 0,
) -> Health:
    """The held-out figures of a run's `networks` (by role, as `Objective.models` gives them) on
    `batch`, masked and sampled as `corruption` (the run's objective) does, in chunks of `chunk`
    rows, with the RNG seeded by `seed` and the caller's RNG state left as it was; a judged
    discriminator also on `fixed_corruption` of the batch. The networks are put in eval mode for
    it and back in the mode they were in."""
    discriminator, mlm = networks.get("discriminator"), networks.get("mlm")
    main = discriminator or mlm
    # A discriminator's figures are on its own generator's samples; an MLM model (Replace MLM's
    # too, whose generator only corrupts its input) is scored by its own masked-LM loss.
    masked_lm = networks.get("generator") if discriminator is not None else mlm
    modes = {n: n.training for n in networks.values()}
    for n in networks.values():
        n.eval()
    device = next(main.parameters()).device
    if discriminator is not None and masked_lm is not None:  # judged on replacements
        batch = {**batch, "fixed_ids": fixed_corruption(batch, special)}
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            parts = [
                _score_chunk(main, masked_lm, corruption, rows, special, device)
                for rows in _chunks(batch, chunk)
            ]
    finally:
        for n, mode in modes.items():
            n.train(mode)
    return _health({k: torch.cat([p[k] for p in parts]) for k in parts[0]})


def rows_digest(batch: Mapping[str, torch.Tensor]) -> str:
    """A short digest of the held-out rows' ids and masks: records of two measurements are
    comparable (one history) only where it is the same."""
    h = hashlib.sha256()
    for k in ("input_ids", "attention_mask"):
        h.update(batch[k].to(torch.int64).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def word_pieces(ids: torch.Tensor, mask: torch.Tensor, special: SpecialIds) -> torch.Tensor:
    """Where `ids` holds a word piece: attended to, and no special token (never replaced, so they
    would flatter a detector)."""
    return mask.bool() & ~torch.isin(ids, torch.tensor(astuple(special), device=ids.device))


def fixed_corruption(batch: Mapping[str, torch.Tensor], special: SpecialIds) -> torch.Tensor:
    """`batch`'s input ids with FIXED_RATE of their word pieces replaced by word pieces drawn
    from the batch's own (their unigram distribution), from FIXED_SEED: the same rows always get
    the same corruption, whatever run or checkpoint scores them. A draw of the word it replaces
    leaves it original, as a generator's correct sample does."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    words = word_pieces(ids, mask, special)
    pool = ids[words]
    rng = torch.Generator(device="cpu").manual_seed(FIXED_SEED)
    chosen = (torch.rand(ids.shape, generator=rng) < FIXED_RATE).to(ids.device) & words
    draws = pool[torch.randint(len(pool), ids.shape, generator=rng).to(ids.device)]
    return torch.where(chosen, draws, ids)


def _chunks(batch: dict[str, torch.Tensor], size: int):
    n = len(batch["input_ids"])
    for start in range(0, n, size):
        yield {k: v[start : start + size] for k, v in batch.items()}


def _score_chunk(main, masked_lm, corruption, rows, special, device) -> dict[str, torch.Tensor]:
    """One chunk's final states of `main` on the clean rows, and, where there is a masked LM, its
    loss at the slots and (`main` a discriminator) `main`'s logits on the corrupted word pieces."""
    ids, types, mask = (
        rows[k].to(device) for k in ("input_ids", "token_type_ids", "attention_mask")
    )
    words = word_pieces(ids, mask, special)
    states = encoder_of(main)(ids, types, mask)[mask.bool()].float()
    out = {"states": states.cpu()}
    if "fixed_ids" in rows:  # a discriminator, on the corruption fixed by the rows
        fixed = rows["fixed_ids"].to(device)
        logits = main(fixed, types, mask).float()
        out |= {"fixed_logits": logits[words].cpu(), "fixed_replaced": (fixed != ids)[words].cpu()}
    if masked_lm is None:  # Electric's energy model alone: no generator to corrupt with
        return out
    if main is not masked_lm:  # a discriminator, judging its generator's samples
        c = corruption.corrupt(masked_lm, ids, types, mask)
        g = c.gen
        logits = main(c.corrupted, types, mask).float()
        out |= {"logits": logits[words].cpu(), "replaced": c.replaced[words].cpu()}
    else:  # the MLM objective's one network
        g = corruption.masked_lm_step(masked_lm, ids, types, mask)
    used = g.masked.weights.bool()
    ce = F.cross_entropy(g.logits.float()[used], g.masked.targets[used], reduction="none")
    right = (g.logits.argmax(-1)[used] == g.masked.targets[used]).float()
    return out | {"mlm_ce": ce.cpu(), "mlm_right": right.cpu()}


def _health(parts: dict[str, torch.Tensor]) -> Health:
    states = parts["states"]
    h = Health(tokens=len(states), hidden_size=states.shape[-1])
    h.hidden_rms, h.mean_cosine, h.effective_rank = representation(states)
    if "mlm_ce" in parts:
        h.mlm_loss = float(parts["mlm_ce"].mean())
        h.mlm_acc = float(parts["mlm_right"].mean())
    if "logits" in parts:
        logits, truth = parts["logits"], parts["replaced"]
        h.tokens = len(truth)
        h.replaced_fraction, h.disc_auc, h.disc_ap, h.disc_prior_gain = detection(logits, truth)
    if "fixed_logits" in parts:
        h.disc_auc_fixed = detection(parts["fixed_logits"], parts["fixed_replaced"])[1]
    return h


def representation(states: torch.Tensor) -> tuple[float, float, float]:
    """(token-centred RMS, mean pairwise cosine, effective rank) of token states [N, H], over an
    even subsample of at most MAX_STATES of them (in order, so the figure is the same each time).
    The rank is of the states as they are, not centred: a direction every token shares counts, so
    states gathered around one vector use few directions, as a probe on them sees."""
    x = states[:: max(1, math.ceil(len(states) / MAX_STATES))].double()
    rms = float((x - x.mean(0)).pow(2).mean().sqrt())
    unit = F.normalize(x, dim=-1)
    n = len(unit)
    total = unit.sum(0).pow(2).sum()  # the sum of every pair's cosine, each token with itself too
    cosine = float((total - n) / (n * (n - 1))) if n > 1 else 1.0
    s = torch.linalg.svdvals(x)
    if float(s.sum()) == 0.0:
        return rms, cosine, 0.0
    p = s / s.sum()
    p = p[p > 0]
    return rms, cosine, float(torch.exp(-(p * p.log()).sum()))


def detection(logits: torch.Tensor, replaced: torch.Tensor) -> tuple[float, float, float, float]:
    """(replaced share r, AUC, average precision, BCE gain over always predicting r in nats per
    token) of the discriminator's logits at word pieces."""
    truth = replaced.numpy().astype(bool)
    r = float(truth.mean())
    if r in (0.0, 1.0):
        raise ElectraError(
            "the held-out text has no replaced or no original word piece to score: give more "
            "held-out text"
        )
    scores = logits.double()
    bce = float(F.binary_cross_entropy_with_logits(scores, replaced.double()))
    prior = -(r * math.log(r) + (1 - r) * math.log(1 - r))
    p = scores.numpy()
    return r, float(roc_auc_score(truth, p)), float(average_precision_score(truth, p)), prior - bce
