"""The model's hot-path ops where the stock kernel is slow on CPU: dropout and attention.

On CPU, drawing the random numbers costs more than the dropout itself: `bernoulli_` spends about
10 ns per element, and a pretraining step of the `small` preset draws some 60M (attention
probabilities alone are [B, heads, T, T] per layer). `Dropout` here takes four 16-bit draws from
each 64-bit word of the same generator, which is about 6x cheaper, and keeps an element when its
16 bits clear a threshold: the drop rate is round(p * 65536) / 65536 (p = 0.1 gives 0.1000061).
The kept/dropped mask is saved for backward in the activations' dtype rather than as booleans.
SDPA with dropout on CPU falls back to an unfused path anyway, so attention with dropout in
training is written out with that dropout; everything else (GPU, eval, p = 0) uses the stock ops.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def keep_mask(x: torch.Tensor, p: float) -> torch.Tensor:
    """A mask like `x` (same shape and dtype): 1 with probability 1 - round(p * 65536) / 65536, else 0.
    Drawn from torch's generator, so seeds reproduce it. It is written straight in x's dtype, as
    multiplying by a float mask is several times cheaper on CPU than `where` on a boolean one."""
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device)
    words.random_(-(2**63), 2**63 - 1)  # the full signed range: every 16-bit chunk is uniform
    chunks = words.view(torch.int16)[:n].view(x.shape)
    return torch.ge(chunks, round(p * 65536) - 32768, out=torch.empty_like(x))


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    return x * keep_mask(x, p).mul_(1.0 / (1.0 - p))


class Dropout(nn.Module):
    """`nn.Dropout` with CPU-cheap random bits; the same module name and no parameters."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d), masked) dropped out, times v. `mask` is boolean, True where a key
    may be attended to, broadcastable to [B, heads, Tq, Tk]."""
    if dropout_p == 0.0 or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-1, -2)
    if mask is not None:
        # An additive bias, in place (the product's backward needs only q and k): a broadcast add
        # is cheaper than masked_fill over [B, heads, T, T].
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
        scores.add_(bias.masked_fill_(~mask, float("-inf")))
    probs = scores.softmax(-1)
    # Scaling v by 1 / (1 - p) rather than the probabilities: T / d times fewer multiplications.
    return (probs * keep_mask(probs, dropout_p)) @ (v * (1.0 / (1.0 - dropout_p)))
