"""The ELECTRA family's encoder config: BERT's architecture, HF `ElectraConfig`'s field names, so
that a model folder's `config.json` is that class's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from electra.errors import ElectraError
from electra.model.configs import check_arch


@dataclass
class ElectraModelConfig:
    """One ELECTRA-family encoder, BERT's architecture (the discriminator, or a generator derived
    from it). HF ElectraConfig names."""

    ffn_ratio: ClassVar[int] = 4  # a derived generator's FFN width / hidden size (BERT's)
    # The architecture family (`electra.model.family`; the CLI lists every registered one).
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
        check_arch(self, "electra")
        if self.hidden_size % self.num_attention_heads:
            raise ElectraError(
                f"model.hidden_size={self.hidden_size} is not divisible by "
                f"model.num_attention_heads={self.num_attention_heads}: pick a head count that divides it"
            )
        if self.hidden_act not in ("gelu", "relu", "gelu_new", "gelu_pytorch_tanh"):
            raise ElectraError(
                f"model.hidden_act={self.hidden_act!r} is not supported: use gelu, gelu_new or relu"
            )
