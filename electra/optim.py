"""The official optimizer and learning-rate schedule (ELECTRA.md §2.2).

AdamW with decoupled weight decay, no decay on LayerNorm parameters or biases (embedding tables are
decayed, as in the official code), and the official schedule: a linear decay from the peak to zero
that starts at step 0, multiplied by a linear warmup ramp.
"""

from __future__ import annotations

import torch
from torch import nn

from electra.config import FinetuneConfig, TrainConfig


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Splits parameters into decayed and not decayed, by the official rule on names."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # shared parameters appear once
        if not p.requires_grad:
            continue
        skip = "LayerNorm" in name or "layer_norm" in name or name.endswith("bias")
        (no_decay if skip else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


class AdamWNoBiasCorrection(torch.optim.Optimizer):
    """BERT's `AdamWeightDecayOptimizer`: Adam without bias correction, decay added to the update.

    update = m / (sqrt(v) + eps) + wd * p;  p -= lr * update
    """

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            for p in params:
                if not self.state[p]:
                    self.state[p]["exp_avg"] = torch.zeros_like(p)
                    self.state[p]["exp_avg_sq"] = torch.zeros_like(p)
            m = [self.state[p]["exp_avg"] for p in params]
            v = [self.state[p]["exp_avg_sq"] for p in params]
            beta1, beta2 = group["betas"]
            torch._foreach_lerp_(m, grads, 1 - beta1)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
            denom = torch._foreach_add(torch._foreach_sqrt(v), group["eps"])
            update = torch._foreach_div(m, denom)
            if group["weight_decay"]:
                torch._foreach_add_(update, params, alpha=group["weight_decay"])
            torch._foreach_add_(params, update, alpha=-group["lr"])


def build_optimizer(
    groups: list[dict], cfg: TrainConfig | FinetuneConfig, device: torch.device
) -> torch.optim.Optimizer:
    """Adam(W) over parameter groups; a group's `lr_scale` (layer-wise decay) multiplies its LR."""
    betas = (cfg.adam_beta1, cfg.adam_beta2)
    if not cfg.bias_correction:
        return AdamWNoBiasCorrection(groups, lr=cfg.lr, betas=betas, eps=cfg.adam_eps)
    # torch's AdamW decays decoupled (p *= 1 - lr * wd), which equals the official rule. The fused
    # kernel (one pass over each tensor) exists for CUDA and CPU.
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(
        groups, lr=cfg.lr, betas=betas, eps=cfg.adam_eps, fused=fused, foreach=not fused
    )


def learning_rate(step: int, peak: float, total: int, warmup: int) -> float:
    """LR for the update taken at `step` (0-based): peak * (1 - step/total) * min(1, step/warmup)."""
    decay = max(0.0, 1.0 - step / total)
    ramp = min(1.0, step / warmup) if warmup > 0 else 1.0
    return peak * decay * ramp


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
