"""FLOP conventions and the networks a pretraining step runs; each family counts one network's
forward pass over one sequence in two conventions (say which one a figure uses; the family's
record's `forward_flops`, the ELECTRA family's in `electra/model/electra/flops.py`). What a pretraining step runs, and so its total, is the
objective's (`electra.objectives.flops`).

- "official": the official counter's convention (flops_computation.py, docs/specification.md
  §Published numbers), so our figures compare with the paper's Table 1: training counts as 2x the
  forward pass; it includes elementwise work (LayerNorm 5, activation 8, softmax 5, dropout 4
  FLOPs per element), counts the embedding lookup as a one-hot matrix product, and charges the
  generator's output head for the fraction `max_predictions / seq_len` of positions.
  ELECTRA-Small, 1M steps: 1.29e18.
- "model": what MFU divides by the hardware's matmul peak: matrix products only (2 FLOPs per
  multiply-add, attention scores and weighted values included), training as 3x the forward pass,
  and the generator's vocabulary head only at the masked positions it is run on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from electra.model.family import family_of


@dataclass(frozen=True)
class Network:
    """One network a pretraining step runs: its size, its heads and whether it is trained (the
    objective says which, `Objective.step_networks`)."""

    config: Any  # the encoder's config, of any family
    mlm_frac: float = 0.0  # fraction of positions that get the vocabulary head (0: none)
    rtd_head: bool = False  # the per-token dense + one-logit head (discriminator, copy gate)
    trained: bool = True  # False: forward only (a frozen generator)


# How many forward passes a trained network costs in each convention (a frozen one costs 1).
TRAINED_PASSES = {"official": 2, "model": 3}


def forward_flops(n: Network, s: int, convention: str) -> float:
    """Network `n`'s forward FLOPs over one sequence of s tokens in `convention`, as its family
    counts them."""
    return family_of(n.config).forward_flops(n, s, convention)
