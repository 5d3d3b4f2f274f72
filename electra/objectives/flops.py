"""What a pretraining run costs in FLOPs: the networks the objective says each step runs
(`Objective.step_networks`), each priced by its architecture family (`electra.model.family`), in
the two conventions of `electra.model.flops` (say which one a figure uses).

- `official_train_flops`: the official counter's, as in the paper's Table 1 (a trained network
  costs 2x its forward pass, a frozen one 1x); what `train_flops` in metrics.jsonl and
  `electra experiment`'s equal-compute arms count.
- `model_flops_per_step`: matmuls only, a trained network 3x its forward pass; what MFU divides.

An objective that does not name its networks is refused, not counted as ELECTRA. The official
convention is defined for BERT's 2018 layer only: a run of another family (the modern one) has no
count in it, and its logs count in the model convention instead (`logged_convention`). `electra experiment` has every arm's run count in its budget's one
convention (`electra.pretraining.train.pretrain`'s `convention`).
"""

from __future__ import annotations

from electra.config import RunConfig
from electra.errors import ElectraError
from electra.model.family import family_of
from electra.model.flops import TRAINED_PASSES, Network
from electra.objectives.base import objective_class


def sequence_flops(cfg: RunConfig, step: int, convention: str) -> float:
    """FLOPs of training step `step` (0-based) per sequence of the batch, in `convention`."""
    trained, s = TRAINED_PASSES[convention], cfg.data.seq_len
    total = 0.0
    for n in objective_class(cfg.objective.name).step_networks(cfg, step):
        forward = family_of(n.config).forward_flops(n, s, convention)
        total += (trained if n.trained else 1) * forward
    return total


def official_train_flops(cfg: RunConfig, steps: float | None = None) -> float:
    """Training FLOPs for the first `steps` steps (default: the run's) under the official
    counter's convention: a trained network costs 2x its forward pass, a frozen one 1x."""
    batch = cfg.train.batch_size
    steps = cfg.train.steps if steps is None else steps
    total = 0.0
    for start, end in objective_class(cfg.objective.name).network_stages(cfg, int(steps)):
        total += batch * (end - start) * sequence_flops(cfg, start, "official")
    return total


def train_flops(cfg: RunConfig, convention: str, steps: float | None = None) -> float:
    """Training FLOPs for the first `steps` steps (default: the run's) in `convention`, each
    stage's networks at that convention's passes per trained network."""
    if convention == "official":
        return official_train_flops(cfg, steps)
    steps = cfg.train.steps if steps is None else steps
    total = 0.0
    for start, end in objective_class(cfg.objective.name).network_stages(cfg, int(steps)):
        total += cfg.train.batch_size * (end - start) * sequence_flops(cfg, start, convention)
    return total


def logged_convention(cfg: RunConfig) -> str:
    """The convention a run's log counts its `train_flops` in: the official one (the paper's
    Table 1) where the run's family has a count in it, else the model convention."""
    try:  # the family says whether it counts in the official convention by refusing it
        family_of(cfg.model).forward_flops(Network(cfg.model), 1, "official")
    except ElectraError:
        return "model"
    return "official"


def model_flops_per_step(cfg: RunConfig, step: int = 0) -> float:
    """Matmul FLOPs of training step `step` (3x forward for a trained network, 1x for a frozen
    one), heads included, vocabulary projections only at the positions they are run on."""
    return cfg.train.batch_size * sequence_flops(cfg, step, "model")
