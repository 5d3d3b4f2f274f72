"""Shared fixtures: tiny configs, special ids, and the path of the real data beside the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from electra.config import ModelConfig, ObjectiveConfig
from electra.tokenizer import SpecialIds

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data, or a skip saying why when it is absent (CI always has it)."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"../shared/data not present ({path} missing): real-data test skipped")
    return path


@pytest.fixture
def special() -> SpecialIds:
    return SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)


def tiny_model_config(**overrides) -> ModelConfig:
    """A two-layer encoder small enough for tests to build and run in milliseconds."""
    fields = dict(
        vocab_size=100,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return ModelConfig(**{**fields, **overrides})


@pytest.fixture
def tiny_model() -> ModelConfig:
    return tiny_model_config()


@pytest.fixture
def objective_cfg() -> ObjectiveConfig:
    return ObjectiveConfig(generator_hidden_fraction=0.25)  # generator width 8, E 16, D 32
