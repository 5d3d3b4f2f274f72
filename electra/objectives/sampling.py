"""Drawing tokens from a generator's softmax: exact categorical samples, in fp32, with no gradient."""

from __future__ import annotations

import torch


def sample_tokens(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """An exact categorical sample from softmax(logits / T), in fp32, with no gradient."""
    with torch.no_grad():
        return sample_categorical(torch.softmax(logits.float() / temperature, dim=-1))


def sample_categorical(probs: torch.Tensor, block: int = 256) -> torch.Tensor:
    """One draw per row of `probs` [..., V] (rows summing to 1, or to any positive total).

    Departure from the official code, for speed only: it inverts the CDF with one uniform per row
    where `PH.sample_from_softmax` takes Gumbel-max (a uniform and two logs per vocabulary entry).
    Both draw from the same distribution. The CDF is taken in two levels, over sums of `block`
    entries and then within the chosen block, because a full cumsum over the vocabulary is a
    sequential pass that costs more than the softmax. A token of probability zero is never drawn."""
    with torch.no_grad():
        shape, v = probs.shape[:-1], probs.shape[-1]
        p = probs.reshape(-1, v)
        full = v // block * block
        sums = p[:, :full].view(p.shape[0], v // block, block).sum(-1)
        if full < v:
            sums = torch.cat([sums, p[:, full:].sum(-1, keepdim=True)], 1)
        cdf = sums.cumsum(-1)
        u = torch.rand(p.shape[0], 1, device=p.device, dtype=cdf.dtype) * cdf[:, -1:]
        j = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[1] - 1)
        start = j * block  # [rows, 1]
        idx = start + torch.arange(block, device=p.device)
        inside = p.gather(1, idx.clamp(max=v - 1)).masked_fill_(idx >= v, 0.0).cumsum_(-1)
        # What is left of u inside block j, kept within [0, the block's mass) against rounding so
        # that the draw lands on a token of non-zero probability.
        rest = (u - (cdf.gather(1, j) - sums.gather(1, j))).clamp_(min=0.0)
        rest = torch.minimum(rest, inside[:, -1:] * (1.0 - 1e-6))
        k = torch.searchsorted(inside, rest, right=True)
        return (start + k).clamp_(max=v - 1).view(shape)
