"""Small pieces every family's networks use: activations by their Hugging Face names, and the
states at given positions (what a head run at a few positions reads)."""

from __future__ import annotations

import torch
from torch import nn

_ACTIVATIONS = {
    "gelu": nn.GELU,
    "gelu_new": lambda: nn.GELU(approximate="tanh"),
    "gelu_pytorch_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": nn.ReLU,
}


def activation(name: str) -> nn.Module:
    return _ACTIVATIONS[name]()


def gather_positions(hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """States [B, N, H] at `positions` [B, N] of `hidden` [B, T, H]."""
    return hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
