"""The training step never reads a value back to the host, checked without a GPU.

On a GPU a host read (`.item()`, `.cpu()`, a boolean mask index, `nonzero`, `if tensor:`) stalls
Python until the device catches up, and it breaks CUDA-graph capture. `HostReads` counts every op
that would do so while a step runs on CPU: the aten ops through a dispatch mode, the Tensor methods
that bypass dispatch on CPU by wrapping them. The CPU-only kernels of `electra.ops` (cheap dropout
bits drawn on the host) are switched off, so the step takes the path it takes on a GPU.
"""

from __future__ import annotations

import collections
import traceback

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from electra import ops
from electra.config import ObjectiveConfig, TrainConfig
from electra.objectives import OBJECTIVES, build_objective
from electra.optim import build_optimizer, param_groups
from electra.step import Window, train_step

from .test_objective import _batch

aten = torch.ops.aten
# Ops whose result the host must wait for: a scalar read, or an output shaped by the data.
READS = {aten._local_scalar_dense, aten.nonzero, aten.masked_select, aten.is_nonzero}
READS |= {aten._unique2, aten.unique_consecutive, aten.unique_dim}
BOOL_INDEXED = {aten.index, aten.index_put, aten.index_put_}  # a boolean index hides a nonzero


class HostReads(TorchDispatchMode):
    """Counts host reads by where they happen (the innermost frame in this repository)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        super().__init__()
        self.reads: collections.Counter[str] = collections.Counter()
        for name in ("item", "tolist", "numpy", "cpu"):
            monkeypatch.setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))

    def _wrap(self, name, method):
        def counted(tensor, *args, **kwargs):
            self._count(name)
            return method(tensor, *args, **kwargs)

        return counted

    def _count(self, what: str) -> None:
        frames = [f for f in traceback.extract_stack() if "/electra/" in f.filename]
        where = (
            f"{frames[-1].filename.split('/electra/')[-1]}:{frames[-1].lineno}" if frames else "?"
        )
        self.reads[f"{what} at {where}"] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in READS:
            self._count(str(packet))
        elif packet in BOOL_INDEXED and any(
            i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1]
        ):
            self._count(f"{packet} with a boolean index")
        return func(*args, **(kwargs or {}))


@pytest.fixture
def gpu_path(monkeypatch):
    monkeypatch.setattr(ops, "stock_ops", lambda device: True)


def test_host_reads_are_counted(monkeypatch, gpu_path):
    x = torch.arange(6.0)
    with HostReads(monkeypatch) as probe:
        x.sum().item()
        x[x > 2].sum()
        bool(x.any())
        x.cpu()
        torch.nonzero(x)
        x.tolist()
    assert sum(probe.reads.values()) >= 6, probe.reads
    with HostReads(monkeypatch) as probe:
        x[torch.tensor([1, 2])].sum() * 2
    assert not probe.reads


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_training_step_reads_nothing_back(name, tiny_model, special, monkeypatch, gpu_path):
    sizes = {"sharing": "none", "generator_hidden_fraction": 1.0} if name == "two_stage" else {}
    cfg = ObjectiveConfig(
        name=name,
        **{"generator_hidden_fraction": 0.25, **sizes},
        two_stage_steps=1,
        adversarial_mlm_steps=1,
    )
    torch.manual_seed(0)
    objective = build_objective(tiny_model, cfg, special, seq_len=40)
    train = TrainConfig(grad_accum=2)
    optimizer = build_optimizer(
        param_groups(objective, 0.01, by_network=objective.staged), train, torch.device("cpu")
    )
    params = [p for p in objective.parameters() if p.requires_grad]
    ids, types, attention = _batch(special, b=8)
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": attention}
    window = Window()
    for step in range(3):  # through the switches of two_stage and adversarial at step 1
        objective.begin_step(step)
        with HostReads(monkeypatch) as probe:
            train_step(objective, optimizer, params, [batch, batch], train, window)
        assert not probe.reads, f"step {step}: {dict(probe.reads)}"
    assert window.steps == 3 and torch.isfinite(window.sums["loss"])
