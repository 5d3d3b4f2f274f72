"""The encoder settings of each architecture family, plain data (no torch): `ModelConfig`, the
`electra` family's (BERT's architecture, HF `ElectraConfig` names), and `ModernConfig`, the
`modernbert` family's (HF `ModernBertConfig` names; docs/specification.md §The modern family).
A run's `model.arch` picks the class; `with_arch` turns one into the other when a run switches.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from electra.errors import ElectraError

ARCHS = ("electra", "modernbert")


@dataclass
class ModelConfig:
    """One ELECTRA-family encoder, BERT's architecture (the discriminator, or a generator derived
    from it). HF ElectraConfig names."""

    ffn_ratio: ClassVar[int] = 4  # a derived generator's FFN width / hidden size (BERT's)
    # The architecture family: electra (BERT's, ELECTRA's own) or modernbert (ModernBERT's;
    # docs/pretraining.md §The modern family).
    arch: str = "electra"
    vocab_size: int = 30522
    embedding_size: int = 128
    hidden_size: int = 256
    num_hidden_layers: int = 12
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        if self.arch != "electra":
            raise ElectraError(f"model.arch={self.arch!r}: use {' or '.join(ARCHS)}")
        if self.hidden_size % self.num_attention_heads:
            raise ElectraError(
                f"model.hidden_size={self.hidden_size} is not divisible by "
                f"model.num_attention_heads={self.num_attention_heads}: pick a head count that divides it"
            )
        if self.hidden_act not in ("gelu", "relu", "gelu_new", "gelu_pytorch_tanh"):
            raise ElectraError(
                f"model.hidden_act={self.hidden_act!r} is not supported: use gelu, gelu_new or relu"
            )


ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
GLOBAL, LOCAL = "full_attention", "sliding_attention"  # HF's layer_types names


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

    ffn_ratio: ClassVar[float] = 1.5  # ModelConfig's; ModernBERT-base's 1152 / 768
    arch: str = "modernbert"  # the family (ModelConfig's comment)
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
        if self.arch != "modernbert":
            raise ElectraError(f"model.arch={self.arch!r}: use {' or '.join(ARCHS)}")
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


AnyModelConfig = ModelConfig | ModernConfig
MODEL_CONFIGS: dict[str, type[AnyModelConfig]] = {
    "electra": ModelConfig,
    "modernbert": ModernConfig,
}

# Sizes that mean the same in both families and go along when a run switches its architecture.
CARRIED = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "initializer_range",
    "pad_token_id",
)


def model_config_class(arch: str) -> type[AnyModelConfig]:
    if arch not in MODEL_CONFIGS:
        raise ElectraError(f"model.arch={arch!r} is unknown: choose one of {', '.join(ARCHS)}")
    return MODEL_CONFIGS[arch]


def with_arch(cfg: AnyModelConfig, arch: str) -> AnyModelConfig:
    """`cfg` as the family `arch` names: its sizes carried over, the rest that family's defaults."""
    target = model_config_class(arch)
    if isinstance(cfg, target):
        return cfg
    names = {f.name for f in fields(target)}
    return target(**{k: v for k, v in asdict(cfg).items() if k in CARRIED and k in names})


def model_config_from_dict(values: dict[str, Any]) -> AnyModelConfig:
    """A config of the family `values["arch"]` names (electra when absent: files written before
    there were families)."""
    return model_config_class(values.get("arch", "electra"))(**values)


def other_family(key: str, cfg: AnyModelConfig, source: str) -> ElectraError | None:
    """The error for a `model.` setting that only another family has (`model.norm_eps` on an
    ELECTRA run), naming that family; None for a key no family has."""
    section, _, name = key.partition(".")
    if section != "model":
        return None
    for arch, cls in MODEL_CONFIGS.items():
        if arch != cfg.arch and name in {f.name for f in fields(cls)}:
            return ElectraError(
                f"{key} in {source} is a setting of model.arch={arch}, and this run's model.arch "
                f"is {cfg.arch}: drop it, or set model.arch={arch}"
            )
    return None
