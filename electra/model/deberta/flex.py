"""The DeBERTa-v3 family's flex attention path (`attention=flex`, CUDA): FlexAttention with the
disentangled position terms added in a `score_mod`, so that no [B, heads, T, T] bias is ever
materialised: the kernel reads each pair's c2p and p2c entry from the [B, heads, N or T, W]
products against the relative rows (`electra.model.deberta.modeling`), under a `BlockMask` of the
padding (`electra.model.attention.flex_masks`). FlexAttention has no dropout on the attention
probabilities, so `electra.model.attention.check_model` refuses the path for a model with it.
"""

from __future__ import annotations

from typing import Any

import torch

from electra.model.attention import compiled_flex, flex_attention, flex_masks
from electra.model.configs import GLOBAL


def block_mask(attention_mask: torch.Tensor | None, seq_len: int, device: torch.device) -> Any:
    """The `BlockMask` of a [B, T] padding mask (or a boolean [B, 1, T, T]); None: every key."""
    return flex_masks(attention_mask, seq_len, 0, device, {GLOBAL})[GLOBAL].block_mask


def flex_disentangled(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    c2p: torch.Tensor,
    p2c: torch.Tensor,
    rows: torch.Tensor,
    mask: Any,
    scale: float,
) -> torch.Tensor:
    """Attention of q [B, heads, N, d] over k, v [B, heads, T, d], the score of query n and key j
    (q.k + c2p[n, r] + p2c[j, r]) * scale with r = rows[n, j] (rows [B or 1, N, T]; c2p
    [B, heads, N, W], p2c [B, heads, T, W], unscaled): [B, heads, N, d]."""
    per_batch = rows.shape[0] > 1

    def score_mod(score, b, h, n, j):
        r = rows[b if per_batch else 0, n, j]
        return score + (c2p[b, h, n, r] + p2c[b, h, j, r]) * scale

    eager = q.device.type != "cuda" or torch.compiler.is_compiling()
    flex = flex_attention if eager else compiled_flex()
    return flex(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale)
