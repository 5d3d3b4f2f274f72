"""The hf family's presets: BERT-type encoders run on `transformers`' classes, at the sizes and
schedules of the ELECTRA presets of the same names, with DeBERTa-v3's generator: the
discriminator's width and half its depth, sharing its token table (a BERT-type encoder has no
embedding projection to narrow a generator behind). Any other type or shape comes from a
`config.json` (`model.hf_config`)."""

from __future__ import annotations

from typing import Any

from electra.model.family import Preset
from electra.model.hf.config import HFConfig


def _hf(schedule_of: str, **sizes: Any) -> Preset:
    return Preset(
        lambda: HFConfig(**sizes),
        schedule_of=schedule_of,
        objective={"generator_hidden_fraction": 1.0, "generator_layers_fraction": 0.5},
    )


PRESETS = {
    "hf-tiny": _hf(
        "tiny", hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512
    ),
    "hf-small": _hf(
        "small",
        hidden_size=256,
        num_hidden_layers=12,
        num_attention_heads=4,
        intermediate_size=1024,
    ),
}
