"""The pieces of an independent ELECTRA reference that both parity benchmarks share.

Written from docs/specification.md (§Optimizer, §Model and §Discriminator initialisation) around
Hugging Face's models, and importing nothing from `electra.*`, so that a bug in our modules cannot
hide by being copied into the reference. `learning_parity.py` (pretraining) and `finetune_parity.py`
(fine-tuning) use them.
"""

from __future__ import annotations

import torch


def official_lr(step: int, peak: float, total: int, warmup: int) -> float:
    """docs/specification.md §Optimizer: a linear decay from the peak to 0 that starts at step 0
    (0-based), times the warmup ramp min(1, step / warmup)."""
    ramp = min(1.0, step / warmup) if warmup else 1.0
    return peak * max(0.0, 1.0 - step / total) * ramp


def decayed(name: str) -> bool:
    """The official rule: variables named LayerNorm, layer_norm or bias are not decayed."""
    return not any(s in name for s in ("LayerNorm", "layer_norm", "bias"))


class ReferenceAdam:
    """docs/specification.md §Optimizer: m and v as Adam's;
    update = m / (sqrt(v) + eps) + wd * p; p -= lr * update. With bias correction m and v are first
    divided by (1 - beta^t), as torch's AdamW does; the official optimizer has none. Each parameter
    carries its own weight decay and LR scale."""

    def __init__(self, params, betas=(0.9, 0.999), eps=1e-6, bias_correction=False):
        """params: (tensor, weight decay, LR scale) triples."""
        self.params = list(params)
        self.m = [torch.zeros_like(p) for p, _, _ in self.params]
        self.v = [torch.zeros_like(p) for p, _, _ in self.params]
        self.betas, self.eps, self.bias_correction, self.t = betas, eps, bias_correction, 0

    @torch.no_grad()
    def step(self, lr: float) -> None:
        b1, b2 = self.betas
        self.t += 1
        c1 = 1 - b1**self.t if self.bias_correction else 1.0
        c2 = 1 - b2**self.t if self.bias_correction else 1.0
        for (p, wd, scale), m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            update = (m / c1) / ((v / c2).sqrt() + self.eps) + wd * p
            p.sub_(lr * scale * update)
            p.grad = None


def bert_init(model: torch.nn.Module, std: float = 0.02) -> None:
    """BERT's init (docs/specification.md §Model): truncated normal (±2 std) for dense layers and
    embedding tables, zero biases, LayerNorm scale 1 and shift 0."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear | torch.nn.Embedding):
            torch.nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)
        if isinstance(module, torch.nn.LayerNorm):
            torch.nn.init.ones_(module.weight)
            torch.nn.init.zeros_(module.bias)
