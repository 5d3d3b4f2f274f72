"""Architecture families by name: each is one module in `electra/model/` (`electra`, and
`modernbert`), registered here with its config class, its encoder classes and its FLOP count, so
that a new family is one new module and one entry; a run's `model.arch` names its family. What the
export and loading code needs of a family (Hugging Face names) is kept by `electra.hf`, not here.

Every family's classes are called alike: `(input_ids, token_type_ids, attention_mask)` (a family
without segments ignores the second), an `embeddings` argument to share another network's, the
encoder under the attribute `base_model_prefix` names (`encoder_of`), and a masked LM's `logits`,
`tie_weights` and `hidden_at` (the final states at given positions: the modern family runs its
last layer there only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from electra.errors import ElectraError
from electra.model import electra, flops, modern_flops, modernbert
from electra.model_config import AnyModelConfig, ModelConfig, ModernConfig


@dataclass(frozen=True)
class Family:
    """One architecture family: its encoder, the encoder with each pretraining head, and
    `forward_flops(network, seq_len, convention)`, the forward FLOPs of one `flops.Network` (the
    encoder and the heads it names) over one sequence, in the "official" or the "model"
    convention (`electra.model.flops`)."""

    name: str
    config: type[AnyModelConfig]
    encoder: type[nn.Module]  # the bare encoder: token ids to hidden states
    masked_lm: type[nn.Module]  # with the vocabulary head (generator, BERT's model)
    pretraining: type[nn.Module]  # with the per-token replaced-or-original head (discriminator)
    forward_flops: Callable[[flops.Network, int, str], float]
    layer: type[nn.Module]  # one encoder layer: what FSDP shards one by one
    # The depth (embeddings 0, layer i at i + 1, a head n + 1) of a parameter, by its name in a
    # model of n layers: fine-tuning's layer-wise LR decay.
    layerwise_depth: Callable[[str, int], int]
    # Config fields a generator and a discriminator that share embeddings must agree on (the
    # modern family has no embedding projection, so a shared table fixes the width too).
    shared_fields: tuple[str, ...]
    packs: bool  # whether fine-tuning may pack short rows (the encoder takes position ids)


FAMILIES: dict[str, Family] = {
    "electra": Family(
        name="electra",
        config=ModelConfig,
        encoder=electra.ElectraModel,
        masked_lm=electra.ElectraForMaskedLM,
        pretraining=electra.ElectraForPreTraining,
        forward_flops=flops.forward_flops,
        layer=electra.ElectraLayer,
        layerwise_depth=electra.layerwise_depth,
        shared_fields=(
            "vocab_size",
            "embedding_size",
            "max_position_embeddings",
            "type_vocab_size",
            "hidden_act",
            "layer_norm_eps",
        ),
        packs=True,
    ),
    # The ModernBERT architecture (docs/specification.md §The modern family).
    "modernbert": Family(
        name="modernbert",
        config=ModernConfig,
        encoder=modernbert.ModernBertModel,
        masked_lm=modernbert.ModernBertForMaskedLM,
        pretraining=modernbert.ModernBertForPreTraining,
        forward_flops=modern_flops.forward_flops,
        layer=modernbert.ModernBertEncoderLayer,
        layerwise_depth=modernbert.layerwise_depth,
        shared_fields=("vocab_size", "hidden_size", "max_position_embeddings", "norm_eps"),
        # Its rotary encoder takes no position ids yet (the next issue's packed rows).
        packs=False,
    ),
}

DEFAULT_FAMILY = "electra"


def family(name: str = DEFAULT_FAMILY) -> Family:
    """The family registered under `name`."""
    if name not in FAMILIES:
        raise ElectraError(
            f"architecture family {name!r} is unknown: choose one of {', '.join(FAMILIES)}"
        )
    return FAMILIES[name]


def family_of(cfg: AnyModelConfig) -> Family:
    """The family a model config belongs to (`model.arch`)."""
    return family(cfg.arch)


def encoder_of(model: nn.Module) -> nn.Module:
    """The bare encoder inside a model with a head (`model.electra`, `model.model`, ...)."""
    return getattr(model, model.base_model_prefix)
