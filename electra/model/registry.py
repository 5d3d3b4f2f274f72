"""Architecture families by name: each is one module in `electra/model/` (`electra`, and
`modernbert`), registered here with its config class, its encoder classes and its FLOP count, so
that a new family is one new module and one entry; a run's `model.arch` names its family. What the
export and loading code needs of a family (Hugging Face names) is kept by `electra.hf`, not here.

Every family's classes are called alike: `(input_ids, token_type_ids, attention_mask)` (a family
without segments ignores the second), an `embeddings` argument to share another network's, the
encoder under the attribute `base_model_prefix` names (`encoder_of`), and a masked LM's `logits`
and `tie_weights`.
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


FAMILIES: dict[str, Family] = {
    "electra": Family(
        name="electra",
        config=ModelConfig,
        encoder=electra.ElectraModel,
        masked_lm=electra.ElectraForMaskedLM,
        pretraining=electra.ElectraForPreTraining,
        forward_flops=flops.forward_flops,
    ),
    # The ModernBERT architecture (docs/specification.md §The modern family).
    "modernbert": Family(
        name="modernbert",
        config=ModernConfig,
        encoder=modernbert.ModernBertModel,
        masked_lm=modernbert.ModernBertForMaskedLM,
        pretraining=modernbert.ModernBertForPreTraining,
        forward_flops=modern_flops.forward_flops,
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
