"""Architecture families by name: each is one module in `electra/model/` (`electra`, and
`modernbert`, whose networks no setting selects yet), registered here with its encoder classes and
its FLOP count, so that a new family is one new module and one entry. What the export and loading code needs of a family (Hugging Face names) is
kept by `electra.hf`, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from electra.errors import ElectraError
from electra.model import electra, flops, modern_flops, modernbert


@dataclass(frozen=True)
class Family:
    """One architecture family: its encoder, the encoder with each pretraining head, and
    `forward_flops(network, seq_len, convention)`, the forward FLOPs of one `flops.Network` (the
    encoder and the heads it names) over one sequence, in the "official" or the "model"
    convention (`electra.model.flops`)."""

    name: str
    encoder: type[nn.Module]  # the bare encoder: token ids to hidden states
    masked_lm: type[nn.Module]  # with the vocabulary head (generator, BERT's model)
    pretraining: type[nn.Module]  # with the per-token replaced-or-original head (discriminator)
    forward_flops: Callable[[flops.Network, int, str], float]


FAMILIES: dict[str, Family] = {
    "electra": Family(
        name="electra",
        encoder=electra.ElectraModel,
        masked_lm=electra.ElectraForMaskedLM,
        pretraining=electra.ElectraForPreTraining,
        forward_flops=flops.forward_flops,
    ),
    # The ModernBERT architecture (docs/architecture.md): registered with its classes and matmul
    # FLOPs; a run selects it once a model setting names the family.
    "modernbert": Family(
        name="modernbert",
        encoder=modernbert.ModernBertModel,
        masked_lm=modernbert.ModernBertForMaskedLM,
        pretraining=modernbert.ModernBertForPreTraining,
        forward_flops=modern_flops.forward_flops,
    ),
}

# Every ModelConfig is ELECTRA's until a config names its family (the next encoder's issue).
DEFAULT_FAMILY = "electra"


def family(name: str = DEFAULT_FAMILY) -> Family:
    """The family registered under `name`."""
    if name not in FAMILIES:
        raise ElectraError(
            f"architecture family {name!r} is unknown: choose one of {', '.join(FAMILIES)}"
        )
    return FAMILIES[name]
