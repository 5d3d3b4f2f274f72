"""The DeBERTa-v3 family's presets (docs/pretraining.md §The DeBERTa-v3 family): microsoft's
shapes (xsmall 12 x 384, small 6 x 768, base 12 x 768, large 24 x 1024) and `deberta-v3-tiny` for
tests and quick runs, each with DeBERTa-v3's recipe: a generator of the discriminator's width and
half its depth (the DeBERTa-v3 paper, §5), gradient-disentangled embedding sharing (GDES) and the
generator's enhanced mask decoder, on the schedule of the ELECTRA preset of about its size."""

from __future__ import annotations

from typing import Any

from electra.model.deberta.config import DebertaV3Config
from electra.model.family import Preset

# DeBERTa-v3's RTD recipe (microsoft/DeBERTa's rtd_task.py; docs/specification.md §The DeBERTa-v3
# family): every selected position becomes [MASK] (no 10% kept, no random tokens), replacements
# sampled at temperature 1, and the discriminator's loss weighted 10 (its `rtd_lambda`), not 50.
RECIPE = {
    "generator_hidden_fraction": 1.0,
    "generator_layers_fraction": 0.5,
    "sharing": "gdes",
    "mask_frac": 1.0,
    "keep_frac": 0.0,
    "random_frac": 0.0,
    "disc_weight": 10.0,
}


def _deberta(schedule_of: str, train: dict | None = None, **sizes: Any) -> Preset:
    return Preset(
        lambda: DebertaV3Config(enhanced_mask_decoder=True, **sizes),
        schedule_of=schedule_of,
        objective=RECIPE,
        train=train or {},
    )


PRESETS = {
    # For tests and quick runs: ELECTRA's `tiny` schedule, dropout off as there, at lr 7e-5, not
    # the paper's 5e-4: 200 steps of 16 on Wikipedia (tests/model/deberta/test_deberta_pretraining.py)
    # reached held-out AUC 0.74 at 7e-5, 0.65 at 1e-4 and 0.57 at 5e-4, where both networks
    # collapse once the generator reaches the unigram loss (as the hf family's post-LN encoders).
    # One rate for both networks: the tiny schedule's 10x generator rate was measured for the
    # ELECTRA and modern families only (benchmarks/RESULTS.md, issue 58).
    "deberta-v3-tiny": _deberta(
        "tiny",
        train={"lr": 7e-5, "generator_lr_scale": 1.0},
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=512,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    ),
    # The official rtd.sh's learning rates: 3e-4 for xsmall, 1e-4 for base and large (and small).
    "deberta-v3-xsmall": _deberta(
        "small",
        {"lr": 3e-4},
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        intermediate_size=1536,
    ),
    "deberta-v3-small": _deberta("small", {"lr": 1e-4}, num_hidden_layers=6),
    "deberta-v3-base": _deberta("base", {"lr": 1e-4}),
    "deberta-v3-large": _deberta(
        "large",
        {"lr": 1e-4},
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
    ),
}
