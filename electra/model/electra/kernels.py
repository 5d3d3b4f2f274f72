"""The ELECTRA family's CPU kernels: its self-attention with dropout run one head at a time
(`electra.model.kernels.dropped_attention`), which `use_kernels` swaps in."""

from __future__ import annotations

import torch

from electra.model.electra.modeling import ElectraSelfAttention
from electra.model.kernels import dropped_attention, linear, stock_ops


class PerHeadSelfAttention(ElectraSelfAttention):
    """`ElectraSelfAttention` (the same parameters) whose q/k/v products run through `linear` and
    whose attention with dropout, in training on CPU, is `dropped_attention`."""

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, queries: torch.Tensor | None = None
    ) -> torch.Tensor:
        p = self.p()
        # At a few queries ([CLS] alone) the attention is small and SDPA's own dropout cheap.
        if queries is not None or p == 0.0 or stock_ops(x.device):
            return super().forward(x, mask, queries)
        layers = (self.query, self.key, self.value)
        weights, biases = tuple(m.weight for m in layers), tuple(m.bias for m in layers)
        return dropped_attention(x, weights, biases, self.num_heads, mask, p)

    # The model's fused q/k/v product (`project`), through oneDNN where that is faster.
    linear = staticmethod(linear)


# What `use_kernels` swaps: {stock class: its kernel subclass}.
KERNELS = {ElectraSelfAttention: PerHeadSelfAttention}
