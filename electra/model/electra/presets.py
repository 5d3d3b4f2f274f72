"""The ELECTRA family's presets: the paper's Small, Small++, Base and Large, and `tiny` for tests
and the demo (docs/specification.md §Model sizes)."""

from __future__ import annotations

from typing import Any

from electra.model.electra.config import ElectraModelConfig
from electra.model.family import Preset


def sized(hidden: int, layers: int, embedding: int, **model: Any) -> ElectraModelConfig:
    """An encoder sized as the official `get_bert_config`: heads = hidden / 64, FFN = 4 * hidden."""
    return ElectraModelConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        intermediate_size=4 * hidden,
        embedding_size=embedding,
        **model,
    )


def _tiny() -> ElectraModelConfig:
    model = sized(128, 2, 64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model.num_attention_heads = 2
    return model


PRESETS = {
    # For tests and the demo: about 3 CPU minutes. The paper's 1/4-width generator; dropout off,
    # as short runs learn faster without it (Cramming, docs/specification.md §Efficiency
    # practice). Not the paper's Small LR (5e-4): at this size and schedule the discriminator
    # collapses to answering the replaced share everywhere within 150 steps; at 5e-5 it stays
    # healthy (docs/pretraining.md §Held-out health, measured over both families and seeds).
    # At 5e-5 the generator barely learns (held-out MLM loss down 11% in 1,000 steps) and makes
    # easy replacements; its own layers at 10x the rate (DeBERTa-v3's official code decouples
    # the two optimizers) take it down 20-22% with the discriminator uncollapsed and fine-tuning
    # as well, in both families and two seeds (benchmarks/RESULTS.md, issue 58). A longer
    # warm-up or a larger generator did not make it learn faster.
    "tiny": Preset(
        _tiny,
        objective={"generator_hidden_fraction": 0.25},
        data={"seq_len": 128},
        train={
            "steps": 1500,
            "batch_size": 32,
            "lr": 5e-5,
            "generator_lr_scale": 10.0,
            "warmup_steps": 100,
            "log_every": 50,
            "save_every": 500,
            "keep_last": 2,
        },
    ),
    "small": Preset(lambda: sized(256, 12, 128), data={"seq_len": 128}),
    # The released "Small++": a full-width generator and 4M steps
    # (docs/specification.md §Model sizes).
    "small++": Preset(
        lambda: sized(256, 12, 128),
        schedule_of="small",
        objective={"generator_hidden_fraction": 1.0},
        train={"steps": 4_000_000},
    ),
    "base": Preset(
        lambda: sized(768, 12, 768),
        objective={"generator_hidden_fraction": 1 / 3},
        data={"seq_len": 512},
        train={"steps": 766_000, "batch_size": 256, "lr": 2e-4},
    ),
    "large": Preset(
        lambda: sized(1024, 24, 1024),
        objective={"generator_hidden_fraction": 0.25, "mask_prob": 0.25},
        data={"seq_len": 512},
        train={"steps": 400_000, "batch_size": 2048, "lr": 2e-4},
    ),
}
