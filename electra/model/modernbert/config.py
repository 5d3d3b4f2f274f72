"""The modern family's encoder config: ModernBERT's architecture (docs/specification.md §The
modern family), HF `ModernBertConfig`'s field names (its 4.x keys for the layer pattern and the
thetas)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from electra.errors import ElectraError
from electra.model.configs import GLOBAL, LOCAL, check_arch

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")


def attention_type(i: int, every_n: int) -> str:
    """ModernBERT's layer pattern, in HF's names: global attention on every n-th layer, starting
    with the first (layer 0), sliding-window attention elsewhere."""
    return GLOBAL if i % every_n == 0 else LOCAL


def layer_types(every_n: int, layers: int) -> list[str]:
    """The pattern of `layers` layers (HF 5.x's `layer_types`)."""
    return [attention_type(i, every_n) for i in range(layers)]


@dataclass
class ModernConfig:
    """One ModernBERT-architecture encoder. HF ModernBertConfig names (its 4.x keys for the layer
    pattern and the thetas); the defaults are ModernBERT-base's."""

    ffn_ratio: ClassVar[float] = 1.5  # ElectraModelConfig's; ModernBERT-base's 1152 / 768
    arch: str = "modernbert"  # the architecture family (`electra.model.family`)
    vocab_size: int = 50368
    hidden_size: int = 768
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    intermediate_size: int = 1152
    hidden_activation: str = "gelu"
    classifier_activation: str = "gelu"  # the heads' dense -> act -> norm
    max_position_embeddings: int = 8192
    norm_eps: float = 1e-5
    pad_token_id: int = 50283
    global_attn_every_n_layers: int = 3
    local_attention: int = 128  # the total window: a token sees half of it on each side
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0
    embedding_dropout: float = 0.0
    attention_dropout: float = 0.0
    mlp_dropout: float = 0.0
    classifier_dropout: float = 0.0  # before a classifier (HF's token/sequence heads)

    def __post_init__(self) -> None:
        check_arch(self, "modernbert")
        sizes = (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "global_attn_every_n_layers",
            "local_attention",
        )
        for name in sizes:
            if getattr(self, name) < 1:
                raise ElectraError(f"model.{name}={getattr(self, name)} must be at least 1")
        if self.hidden_size % self.num_attention_heads:
            raise ElectraError(
                f"model.hidden_size={self.hidden_size} is not divisible by "
                f"model.num_attention_heads={self.num_attention_heads}: pick a head count that divides it"
            )
        if self.head_dim % 2:
            # Rotary positions turn pairs of a head's dimensions.
            raise ElectraError(
                f"model.hidden_size / model.num_attention_heads = {self.head_dim} is odd: "
                "rotary positions need an even head size"
            )
        for name in ("hidden_activation", "classifier_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                raise ElectraError(
                    f"model.{name}={getattr(self, name)!r} is not supported: "
                    f"use {', '.join(ACTIVATIONS)}"
                )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ElectraError(
                f"model.pad_token_id={self.pad_token_id} is outside the vocabulary (size {self.vocab_size})"
            )
        for name in ("global_rope_theta", "local_rope_theta", "norm_eps", "initializer_range"):
            if not getattr(self, name) > 0:
                raise ElectraError(f"model.{name}={getattr(self, name)} must be positive")
        for name in ("embedding_dropout", "attention_dropout", "mlp_dropout", "classifier_dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise ElectraError(f"model.{name}={getattr(self, name)} must be in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def layer_type(self, i: int) -> str:
        """HF's name for layer i's attention (`layer_types`)."""
        return attention_type(i, self.global_attn_every_n_layers)

    def rope_theta(self, layer_type: str) -> float:
        return self.global_rope_theta if layer_type == GLOBAL else self.local_rope_theta
