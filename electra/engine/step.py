"""One optimizer step of pretraining, the unit the loop repeats and `electra.engine.graphs` captures:
the forward and backward over the step's micro-batches, clipping, the optimizer (skipping a
non-finite update on the device), and the statistics of a logging window, summed on the device.

A step function returns a loss and a dict of detached statistics (`StepOutput`); what they mean,
and what a log shows of them, is the step function's business (`Window`'s `metrics`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from electra.engine.distributed import all_reduce_, gradient_sync
from electra.objectives.base import StepOutput
from electra.objectives.metrics import mean_stats

# A window's statistics summed over its micro-batches and ranks, and how many reported each, to
# the numbers a log shows (`electra.objectives.base.Objective.metrics`).
Metrics = Callable[[dict[str, torch.Tensor], dict[str, int]], dict[str, float]]


def autocast(
    device: torch.device, precision: str, cache_casts: bool = True
) -> contextlib.AbstractContextManager:
    """bf16 autocast on GPU by default; fp32 on CPU unless bf16 is asked for (fast on AMX CPUs)."""
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache_casts)
    return contextlib.nullcontext()


class Window:
    """Step statistics between two logging steps, summed on the device and read back once, then
    turned into logged numbers by `metrics` (by default each scalar's mean)."""

    def __init__(self, metrics: Metrics = mean_stats) -> None:
        self.metrics = metrics
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}  # micro-batches that reported each statistic
        self.steps = 0
        self.grad_norm: torch.Tensor | float = 0.0
        self.skipped: torch.Tensor | int = 0  # steps skipped for a non-finite loss or gradient
        self.start = time.perf_counter()

    def add(self, out: StepOutput) -> None:
        """One micro-batch's statistics."""
        for k, v in {**out.stats, "loss": out.loss.detach()}.items():
            self.sums[k] = self.sums[k] + v if k in self.sums else v.clone()
            self.counts[k] = self.counts.get(k, 0) + 1

    def end_step(self, grad_norm: torch.Tensor, skipped: torch.Tensor) -> None:
        self.steps += 1
        # A skipped step's norm is not finite: it would poison the window's mean.
        self.grad_norm = self.grad_norm + torch.where(skipped, 0.0, grad_norm)
        self.skipped = self.skipped + skipped

    def summary(self, world_size: int = 1) -> dict[str, Any]:
        """The window's metrics over all ranks (one all-reduce, at logging steps only)."""
        names = sorted(self.sums)
        flat = [self.sums[k].float().reshape(-1) for k in names]
        flat.append(torch.as_tensor(self.grad_norm, dtype=torch.float32).reshape(1))
        packed = all_reduce_(torch.cat([t.to(flat[0].device) for t in flat])).cpu()
        sums, offset = {}, 0
        for k in names:
            size = self.sums[k].numel()
            sums[k] = packed[offset : offset + size].reshape(self.sums[k].shape)
            offset += size
        logged = self.metrics(sums, {k: self.counts[k] * world_size for k in names})
        # The statistics' own means first, then the step's, then what the metrics derive: the
        # columns of metrics.jsonl in the order they have always had.
        record: dict[str, Any] = {k: logged.pop(k) for k in names if k in logged}
        skipped = int(self.skipped)
        taken = self.steps - skipped
        record["grad_norm"] = packed[offset].item() / world_size / taken if taken else math.nan
        record["skipped_steps"] = skipped
        return {**record, **logged}


def forward_backward(
    step_fn: Callable[..., StepOutput],
    micro_batches: list[dict[str, torch.Tensor]],
    precision: str,
    seeds: list[int] | None = None,
    cache_casts: bool = True,
) -> tuple[list[StepOutput], torch.Tensor]:
    """Forward and backward over micro-batches already on the device, gradients accumulated (and
    all-reduced once, after the last, under DDP or FSDP). With `seeds`, the RNG is seeded with
    `seeds[i]` before micro-batch i. Returns their outputs and a bool tensor: a loss was not
    finite. `cache_casts=False` keeps autocast from caching bf16 copies of the weights across
    the step, which a CUDA graph capture needs."""
    device = micro_batches[0]["input_ids"].device
    bad = torch.zeros((), dtype=torch.bool, device=device)
    outs = []
    for i, batch in enumerate(micro_batches):
        if seeds is not None:
            torch.manual_seed(seeds[i])
        with gradient_sync(step_fn, enabled=i == len(micro_batches) - 1):
            with autocast(device, precision, cache_casts):
                out = step_fn(**batch)
            (out.loss / len(micro_batches)).backward()
        bad |= ~torch.isfinite(out.loss.detach())
        outs.append(out)
    return outs, bad


def apply_update(
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    clip_norm: float,
    bad: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clips the gradients and takes the optimizer step unless `bad` (on any rank) or the
    gradient norm is not finite. The fused optimizer reads that flag on the device (as under a
    GradScaler), so weights and moments stay as they were without a host sync. Returns the
    gradient norm and the skipped flag (a bool tensor)."""
    grad_norm = torch.nn.utils.clip_grad_norm_(params, clip_norm)
    if isinstance(grad_norm, DTensor):  # FSDP: the norm over all shards
        grad_norm = grad_norm.full_tensor()
    # A non-finite loss on one rank makes every rank's all-reduced gradient non-finite; the flag
    # is reduced too, for the rare loss that overflows without its gradient doing so.
    skipped = all_reduce_(bad.float(), "max").bool() | ~torch.isfinite(grad_norm)
    if getattr(optimizer, "defaults", {}).get("fused"):
        optimizer.found_inf = skipped.float()
        optimizer.step()
    elif not skipped.item():  # unfused optimizers cannot skip on the device: read the flag
        optimizer.step()
    return grad_norm, skipped


def train_step(
    step_fn: Callable[..., StepOutput],
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    micro_batches: list[dict[str, torch.Tensor]],
    window: Window,
    *,
    precision: str,
    clip_norm: float,
    seeds: list[int] | None = None,
    cache_casts: bool = True,
) -> torch.Tensor:
    """One optimizer step over micro-batches already on the device (`forward_backward`, then
    `apply_update`), its statistics added to `window`. Nothing here reads a value back to the
    host (tests/engine/test_host_syncs.py counts), so a GPU runs it ahead of Python, and it can be
    captured (`electra.engine.graphs`). Returns the skipped flag (a bool tensor)."""
    outs, bad = forward_backward(step_fn, micro_batches, precision, seeds, cache_casts)
    grad_norm, skipped = apply_update(optimizer, params, clip_norm, bad)
    optimizer.zero_grad(set_to_none=True)
    for out in outs:
        window.add(out)
    window.end_step(grad_norm, skipped)
    return skipped
