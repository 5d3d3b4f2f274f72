"""The official optimizer and learning-rate schedule (ELECTRA.md §2.2).

BERT's AdamW: no bias correction (the default; `bias_correction` switches to torch's AdamW),
decoupled weight decay, none on LayerNorm parameters or biases (embedding tables are decayed, as in
the official code); and the official schedule: a linear decay from the peak to zero that starts at
step 0, multiplied by a linear warmup ramp.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from electra.config import FinetuneConfig, TrainConfig


def param_groups(model: nn.Module, weight_decay: float, by_network: bool = False) -> list[dict]:
    """Splits parameters into decayed and not decayed, by the official rule on names. With
    `by_network`, each top-level submodule (an objective's network) gets its own pair of groups,
    so that the official Adam counts the steps of a network that trains only part of the schedule
    (two_stage) from its own first update."""
    groups: dict[tuple[str, bool], list[nn.Parameter]] = {}
    for name, p in model.named_parameters():  # shared parameters appear once
        if not p.requires_grad:
            continue
        skip = "LayerNorm" in name or "layer_norm" in name or name.endswith("bias")
        network = name.split(".")[0] if by_network else ""
        groups.setdefault((network, skip), []).append(p)
    return [
        {"params": params, "weight_decay": 0.0 if skip else weight_decay}
        for (_, skip), params in groups.items()
    ]


class AdamWNoBiasCorrection(torch.optim.AdamW):
    """BERT's `AdamWeightDecayOptimizer` (ELECTRA.md §2.2): Adam without bias correction, the
    decay added to the update: p -= lr * (m / (sqrt(v) + eps) + wd * p).

    It runs torch's AdamW kernels (fused where they exist: one pass over each tensor). Before each
    step a group's lr, eps and weight decay are scaled so that torch's bias corrections cancel:
    with c1 = 1 - beta1^t and c2 = sqrt(1 - beta2^t), torch's update
    lr' / c1 * m / (sqrt(v) / c2 + eps') with lr' = lr * c1 / c2 and eps' = eps / c2 is exactly
    lr * m / (sqrt(v) + eps), and its decay lr' * wd' * p with wd' = wd * c2 / c1 is lr * wd * p.
    The step count t is kept in the group (so it is saved with the optimizer's state) and counts
    the steps at which the group had gradients: the parameters of a group are expected to have
    gradients at the same steps, as `param_groups` arranges.
    """

    @torch.no_grad()
    def step(self, closure=None):
        given = []
        for group in self.param_groups:
            given.append((group["lr"], group["eps"], group["weight_decay"]))
            if not any(p.grad is not None for p in group["params"]):
                continue  # torch skips it too
            t = group.get("official_steps", 0) + 1
            beta1, beta2 = group["betas"]
            c1, c2 = 1.0 - beta1**t, math.sqrt(1.0 - beta2**t)
            group["lr"] *= c1 / c2
            group["eps"] /= c2
            group["weight_decay"] *= c2 / c1
            group["official_steps"] = t
        try:
            return super().step(closure)
        finally:
            for group, (lr, eps, wd) in zip(self.param_groups, given, strict=True):
                group["lr"], group["eps"], group["weight_decay"] = lr, eps, wd


def forget_skipped_steps(optimizer: torch.optim.Optimizer, skipped: int) -> None:
    """Takes steps the trainer skipped (non-finite gradients) out of the official step counts.

    The fused kernel leaves a skipped step out of torch's own count on the device; the official
    count lives on the host and learns of skips at the next logging step, when the trainer reads
    them. Until then the bias-correction cancellation uses a count a few steps high, which changes
    the update by far less than one part in a thousand after the first few hundred steps."""
    if not skipped or not isinstance(optimizer, AdamWNoBiasCorrection):
        return
    for group in optimizer.param_groups:
        if "official_steps" in group:
            group["official_steps"] = max(0, group["official_steps"] - skipped)


def build_optimizer(
    groups: list[dict], cfg: TrainConfig | FinetuneConfig, device: torch.device
) -> torch.optim.Optimizer:
    """Adam(W) over parameter groups; a group's `lr_scale` (layer-wise decay) multiplies its LR."""
    # torch's AdamW decays decoupled (p *= 1 - lr * wd), which equals the official rule. The fused
    # kernel (one pass over each tensor) exists for CUDA and CPU.
    fused = device.type in ("cuda", "cpu")
    adam = torch.optim.AdamW if cfg.bias_correction else AdamWNoBiasCorrection
    return adam(
        groups,
        lr=cfg.lr,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_eps,
        fused=fused,
        foreach=not fused,
    )


def learning_rate(step: int, peak: float, total: int, warmup: int) -> float:
    """LR for the update taken at `step` (0-based): peak * (1 - step/total) * min(1, step/warmup)."""
    decay = max(0.0, 1.0 - step / total)
    ramp = min(1.0, step / warmup) if warmup > 0 else 1.0
    return peak * decay * ramp


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
