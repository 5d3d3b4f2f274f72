"""The model's hot-path ops where the stock kernel is slow on CPU: dropout and attention.

On CPU, drawing the random numbers costs more than the dropout itself: `bernoulli_` spends about
10 ns per element, and a pretraining step of the `small` preset draws some 60M (attention
probabilities alone are [B, heads, T, T] per layer). `Dropout` here takes four 16-bit draws from
each random 64-bit word, which is about 8x cheaper, and keeps an element when its 16 bits clear a
threshold: the drop rate is round(p * 65536) / 65536 (p = 0.1 gives 0.1000061).
The kept/dropped mask is saved for backward in the activations' dtype rather than as booleans.
SDPA with dropout on CPU falls back to an unfused path anyway, so attention with dropout in
training is written out with that dropout, one head at a time to spare the head-layout copies.
On GPU, under torch.compile, in eval and at p = 0 the stock dropout and SDPA run instead.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def random_int16(n: int) -> torch.Tensor:
    """n uniform 16-bit integers on CPU, four from each random 64-bit word. The words come from
    numpy's SFC64, about twice as fast as torch's CPU generator (a Mersenne twister), seeded by a
    draw from torch's generator so that torch.manual_seed and checkpointed RNG state reproduce them."""
    seed = int(torch.randint(2**63 - 1, ()))
    bits = np.random.SFC64(seed).random_raw((n + 3) // 4).view(np.int64)
    return torch.from_numpy(bits).view(torch.int16)[:n]


def keep_mask(x: torch.Tensor, p: float) -> torch.Tensor:
    """A mask like CPU tensor `x` (same shape and dtype): 1 with probability
    1 - round(p * 65536) / 65536, else 0. It is written straight in x's dtype, as multiplying by a
    float mask is several times cheaper on CPU than `where` on a boolean one."""
    chunks = random_int16(x.numel()).view(x.shape)
    return torch.ge(chunks, round(p * 65536) - 32768, out=torch.empty_like(x))


def stock_ops(device: torch.device) -> bool:
    """Whether the stock dropout and SDPA serve best: on GPU their kernels are fused, and under
    torch.compile inductor fuses them (and cannot trace the random draws here)."""
    return device.type != "cpu" or torch.compiler.is_compiling()


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if stock_ops(x.device):
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


def self_attention(
    x: torch.Tensor,
    weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    biases: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    heads: int,
    mask: torch.Tensor | None,
    dropout_p: float,
) -> torch.Tensor:
    """Multi-head self-attention of x [B, T, H] to [B, T, H]: q, k and v projected by `weights` and
    `biases` (HF's query, key and value layers) in one product, then softmax(q k^T / sqrt(d),
    masked), dropped out, times v. `mask` is boolean, True where a key may be attended to, shaped
    [B, 1, 1 or T, T] (the same for every head)."""
    b, t, h = x.shape
    d = h // heads
    # One product for q, k and v: a wider matrix runs nearer the machine's peak than three.
    (wq, wk, wv), (bq, bk, bv) = weights, biases
    if dropout_p == 0.0 or stock_ops(x.device):
        qkv = F.linear(x, torch.cat([wq, wk, wv]), torch.cat([bq, bk, bv]))
        q, k, v = qkv.view(b, t, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)  # [B, heads, T, d]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        return out.transpose(1, 2).reshape(b, t, h)
    # The 1/sqrt(d) and 1/(1 - p) scales go into the q and v projections ([H, H] products), so
    # that no [B, T, T] product or gradient needs a pass of its own for them.
    sq, sv = d**-0.5, 1.0 / (1.0 - dropout_p)
    qkv = F.linear(x, torch.cat([wq * sq, wk, wv * sv]), torch.cat([bq * sq, bk, bv * sv]))
    # One head at a time: a head's q, k and v are strided [B, T, d] views of the projection that bmm
    # reads in place, where a [B, heads, T, d] batch needs a copy of each.
    parts = qkv.view(b, t, 3 * heads, d).unbind(2)
    if mask is None:
        bias = qkv.new_zeros(1, 1, 1)
    else:  # additive, broadcast by baddbmm: cheaper than masked_fill over every [B, T, T] score
        bias = torch.zeros(mask.shape, dtype=qkv.dtype, device=qkv.device)
        bias = bias.masked_fill_(~mask, float("-inf")).squeeze(1)
    outs = []
    for i in range(heads):
        q, k, v = parts[i], parts[heads + i], parts[2 * heads + i]
        probs = torch.baddbmm(bias, q, k.transpose(1, 2)).softmax(-1)
        outs.append(torch.bmm(probs * keep_mask(probs, dropout_p), v))
    return torch.cat(outs, -1)
