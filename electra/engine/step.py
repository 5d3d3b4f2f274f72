"""One optimizer step of pretraining, the unit the loop repeats and `electra.engine.graphs` captures:
the forward and backward over the step's micro-batches, clipping, the optimizer (skipping a
non-finite update on the device), and the statistics of a logging window, summed on the device.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable

import torch
from torch.distributed.tensor import DTensor

from electra.engine.distributed import all_reduce_, gradient_sync
from electra.engine.tracking import auc_from_histograms, auc_histograms
from electra.objectives import StepOutput


def autocast(
    device: torch.device, precision: str, cache_casts: bool = True
) -> contextlib.AbstractContextManager:
    """bf16 autocast on GPU by default; fp32 on CPU unless bf16 is asked for (fast on AMX CPUs)."""
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache_casts)
    return contextlib.nullcontext()


class Window:
    """Step statistics between two logging steps, summed on the device and read back once."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}  # micro-batches that reported each statistic
        self.auc_hist: tuple[torch.Tensor, torch.Tensor] | None = None
        self.steps = 0
        self.grad_norm: torch.Tensor | float = 0.0
        self.skipped: torch.Tensor | int = 0  # steps skipped for a non-finite loss or gradient
        self.start = time.perf_counter()

    def add(self, out: StepOutput) -> None:
        """One micro-batch's statistics."""
        for k, v in {**out.stats, "loss": out.loss.detach()}.items():
            self.sums[k] = self.sums[k] + v if k in self.sums else v.clone()
            self.counts[k] = self.counts.get(k, 0) + 1
        if out.disc_logits is not None:
            pos, neg = auc_histograms(out.disc_logits, out.disc_labels, out.real_mask)
            if self.auc_hist is not None:
                pos, neg = pos + self.auc_hist[0], neg + self.auc_hist[1]
            self.auc_hist = (pos, neg)

    def end_step(self, grad_norm: torch.Tensor, skipped: torch.Tensor) -> None:
        self.steps += 1
        # A skipped step's norm is not finite: it would poison the window's mean.
        self.grad_norm = self.grad_norm + torch.where(skipped, 0.0, grad_norm)
        self.skipped = self.skipped + skipped

    def summary(self, world_size: int = 1) -> dict[str, float]:
        """Means over the window and over all ranks (one all-reduce, at logging steps only)."""
        names = sorted(self.sums)
        flat = [self.sums[k].float().reshape(1) for k in names]
        flat.append(torch.as_tensor(self.grad_norm, dtype=torch.float32).reshape(1))
        if self.auc_hist is not None:
            flat += [self.auc_hist[0], self.auc_hist[1]]
        packed = all_reduce_(torch.cat([t.to(flat[0].device) for t in flat])).cpu()
        means = {k: packed[i].item() / (self.counts[k] * world_size) for i, k in enumerate(names)}
        skipped = int(self.skipped)
        taken = self.steps - skipped
        means["grad_norm"] = packed[len(names)].item() / world_size / taken if taken else math.nan
        means["skipped_steps"] = skipped
        if self.auc_hist is not None:
            bins = self.auc_hist[0].numel()
            start = len(names) + 1
            means["disc_auc"] = auc_from_histograms(
                packed[start : start + bins], packed[start + bins :]
            )
        return means


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
    host (tests/test_host_syncs.py counts), so a GPU runs it ahead of Python, and it can be
    captured (`electra.engine.graphs`). Returns the skipped flag (a bool tensor)."""
    outs, bad = forward_backward(step_fn, micro_batches, precision, seeds, cache_casts)
    grad_norm, skipped = apply_update(optimizer, params, clip_norm, bad)
    optimizer.zero_grad(set_to_none=True)
    for out in outs:
        window.add(out)
    window.end_step(grad_norm, skipped)
    return skipped
