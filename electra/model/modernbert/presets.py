"""The modern family's presets (docs/pretraining.md §The modern family): the encoder's shape, a
generator of its width and a third of its depth sharing its embeddings (ModernBERT has no
embedding projection to narrow a generator behind), and the schedule of the ELECTRA preset of
about its size. Dropout is off, as ModernBERT's is."""

from __future__ import annotations

from typing import Any

from electra.model.family import Preset
from electra.model.modernbert.config import ModernConfig


def _modern(schedule_of: str, **sizes: Any) -> Preset:
    return Preset(
        lambda: ModernConfig(**sizes),
        schedule_of=schedule_of,
        objective={"generator_hidden_fraction": 1.0, "generator_layers_fraction": 1 / 3},
    )


PRESETS = {
    # Ettin's 17M encoder shape; ModernBERT-base's and -large's.
    "modern-tiny": _modern(
        "tiny", hidden_size=128, num_hidden_layers=3, num_attention_heads=2, intermediate_size=256
    ),
    "modern-small": _modern(
        "small", hidden_size=256, num_hidden_layers=7, num_attention_heads=4, intermediate_size=384
    ),
    "modern-base": _modern("base"),
    "modern-large": _modern(
        "large",
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        intermediate_size=2624,
    ),
}
