"""The DeBERTa-v3 family's encoder config (docs/specification.md §The DeBERTa-v3 family), plain
data under the field names of `transformers`' `DebertaV2Config`, so that a model folder's
`config.json` is that class's.

The family computes DeBERTa-v3's architecture only: relative attention on, content-to-position
and position-to-content terms, keys shared with the relative table, no absolute positions in the
input, no token types, no convolution, the embeddings at the hidden width. Those settings are
fixed (`FIXED`, written out in every `config.json`, since `transformers` reads several of them
with defaults that differ); a `config.json` that sets another value is refused in one line
(`electra.model.deberta.hf`), rather than loaded into a model that computes something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from electra.errors import ElectraError
from electra.model.configs import check_arch

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
REL_NORMS = ("layer_norm", "none")  # `norm_rel_ebd`: the relative table layer-normed, or not
# DebertaV2Config keys whose one value is all the family computes.
FIXED = {
    "relative_attention": True,
    "pos_att_type": ["p2c", "c2p"],
    "share_att_key": True,
    "position_biased_input": False,
    "type_vocab_size": 0,
    "conv_kernel_size": 0,
}


@dataclass
class DebertaV3Config:
    """One DeBERTa-v3 encoder (the discriminator, or a generator derived from it). HF
    DebertaV2Config names; the defaults are deberta-v3-base's."""

    ffn_ratio: ClassVar[float] = 4.0  # a narrower generator's FFN width / hidden size
    arch: str = "deberta-v3"  # the architecture family (`electra.model.family`)
    vocab_size: int = 128100
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    # Where the relative positions' log buckets reach: a distance of max_position_embeddings - 1
    # falls in the last bucket (HF's `max_relative_positions` -1 means this).
    max_position_embeddings: int = 512
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-7
    pad_token_id: int = 0
    # Relative positions in 2 * position_buckets rows: exact within +-position_buckets / 2,
    # log-spaced beyond (`electra.model.deberta.attention.relative_buckets`).
    position_buckets: int = 256
    max_relative_positions: int = -1  # -1: max_position_embeddings (HF's meaning)
    norm_rel_ebd: str = "layer_norm"
    pooler_hidden_act: str = "gelu"  # the sequence classifier's pooler (HF's ContextPooler)
    pooler_dropout: float = 0.0
    # The masked LM's enhanced mask decoder (the DeBERTa paper, §3.2): the last layer run twice
    # more with absolute positions added to its queries. `transformers` cannot hold it: a masked LM
    # with it exports without it (docs/huggingface.md).
    enhanced_mask_decoder: bool = False

    def __post_init__(self) -> None:
        check_arch(self, "deberta-v3")
        sizes = (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "position_buckets",
        )
        for name in sizes:
            if getattr(self, name) < 1:
                raise ElectraError(f"model.{name}={getattr(self, name)} must be at least 1")
        if self.hidden_size % self.num_attention_heads:
            raise ElectraError(
                f"model.hidden_size={self.hidden_size} is not divisible by "
                f"model.num_attention_heads={self.num_attention_heads}: pick a head count that "
                "divides it"
            )
        if self.position_buckets < 2:
            raise ElectraError(
                f"model.position_buckets={self.position_buckets} must be at least 2 "
                "(DeBERTa-v3's is 256)"
            )
        for name, allowed in (
            ("hidden_act", ACTIVATIONS),
            ("pooler_hidden_act", ACTIVATIONS),
            ("norm_rel_ebd", REL_NORMS),
        ):
            if getattr(self, name) not in allowed:
                raise ElectraError(
                    f"model.{name}={getattr(self, name)!r} is not supported: use "
                    f"{', '.join(allowed)}"
                )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ElectraError(
                f"model.pad_token_id={self.pad_token_id} is outside the vocabulary "
                f"(size {self.vocab_size})"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "pooler_dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise ElectraError(f"model.{name}={getattr(self, name)} must be in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def relative_reach(self) -> int:
        """The distance the log buckets are spread to (HF's `max_relative_positions`, resolved)."""
        if self.max_relative_positions < 1:
            return self.max_position_embeddings
        return self.max_relative_positions
