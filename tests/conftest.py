"""Shared fixtures: tiny configs, special ids, and the path of the real data beside the repository."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

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


WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "mat",
    "big",
    "small",
    "red",
    "blue",
    "car",
    "house",
    "paris",
    "france",
    "capital",
    "city",
    "of",
    "is",
    "what",
    "where",
    "who",
    "river",
    "bank",
    "money",
    "good",
    "bad",
    "film",
    "movie",
    "great",
    "awful",
    "john",
    "mary",
    "went",
    "to",
    "store",
    "yesterday",
    "today",
    "green",
    "tree",
    "apple",
    "was",
    "in",
    "and",
    "it",
    "not",
    "very",
    "fun",
]


@pytest.fixture(scope="session")
def task_tokenizer(tmp_path_factory):
    """A WordPiece vocabulary over the words the fine-tuning tests use."""
    from electra.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("task_tok")
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) for i in range(400)]
    (root / "c.txt").write_text("\n".join(lines) + "\nParis France John Mary\n")
    return train_tokenizer([root / "c.txt"], vocab_size=200, min_frequency=1)


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory, task_tokenizer):
    """A tiny randomly initialized discriminator folder, as `electra pretrain` writes one."""
    from electra.model import ElectraForPreTraining
    from electra.pretrained import save_pretrained

    out = tmp_path_factory.mktemp("pretrained") / "discriminator"
    torch.manual_seed(0)
    cfg = tiny_model_config(vocab_size=task_tokenizer.get_vocab_size(), max_position_embeddings=128)
    save_pretrained(ElectraForPreTraining(cfg), out, task_tokenizer)
    return out
