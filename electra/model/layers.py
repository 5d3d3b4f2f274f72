"""Small pieces every family's networks use: activations by their Hugging Face names, the states
at given positions (what a head run at a few positions reads), and parameter counts."""

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


def count_parameters(*modules: nn.Module) -> int:
    """Distinct parameters over the modules: a tensor shared between them is counted once."""
    seen = {id(p): p.numel() for m in modules for p in m.parameters()}
    return sum(seen.values())


def format_count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.1f}K"
