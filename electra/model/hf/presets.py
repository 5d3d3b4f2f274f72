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
        # 1e-4, not the paper's 5e-4: RTD from a random xlm-roberta (hf-tiny's shape,
        # 200 steps of 16 on Wikipedia) reached held-out AUC 0.78 at 1e-4, 0.60 at 2e-4, and
        # 0.50 at 5e-4, where the discriminator's AUC rose to 0.71 by step 50, then collapsed
        # (docs/any-encoder.md). The tiny schedule's 10x generator rate was measured for the
        # native families only (benchmarks/RESULTS.md, issue 58): one rate for both here.
        train={"lr": 1e-4, "generator_lr_scale": 1.0},
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
