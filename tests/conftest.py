"""Shared fixtures: tiny configs, special ids, and the path of the real data beside the repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from electra.config import ModelConfig, ObjectiveConfig, apply_overrides, preset
from electra.data.prepare import prepare
from electra.data.tokenizer import SpecialIds, save_tokenizer, train_tokenizer

# Tests read local folders only; should one name a hub model by mistake, it fails here at once
# rather than reaching for the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

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
    root = tmp_path_factory.mktemp("task_tok")
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) for i in range(400)]
    (root / "c.txt").write_text("\n".join(lines) + "\nParis France John Mary\n")
    return train_tokenizer([root / "c.txt"], vocab_size=200, min_frequency=1)


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory, task_tokenizer):
    """A tiny randomly initialized discriminator folder, as `electra pretrain` writes one."""
    from electra.hf.pretrained import save_pretrained
    from electra.model.electra import ElectraForPreTraining

    out = tmp_path_factory.mktemp("pretrained") / "discriminator"
    torch.manual_seed(0)
    cfg = tiny_model_config(vocab_size=task_tokenizer.get_vocab_size(), max_position_embeddings=128)
    save_pretrained(ElectraForPreTraining(cfg), out, task_tokenizer)
    return out


@pytest.fixture(scope="session")
def wikitext_data(tmp_path_factory):
    """WikiText-2 validation text, a 4k WordPiece vocabulary, packed at seq len 64."""
    corpus = shared_data("wikitext-2-raw", "wiki.valid.raw")
    root = tmp_path_factory.mktemp("wikitext")
    save_tokenizer(train_tokenizer([corpus], vocab_size=4000), root / "tok", lowercase=True)
    prepare([str(corpus)], root / "tok", seq_len=64, out_dir=root / "data", workers=1)
    return root / "data"


def tiny_cfg(data, **overrides):
    """A very small model for mechanics tests: seconds per run, on the CPU also where a GPU is
    visible (gloo, and results compared bit for bit with CI's)."""
    o = {
        "train.device": "cpu",
        "data.path": str(data),
        "data.seq_len": 64,
        "model.hidden_size": 32,
        "model.embedding_size": 16,
        "model.num_hidden_layers": 2,
        "model.num_attention_heads": 2,
        "model.intermediate_size": 64,
        "model.hidden_dropout_prob": 0.1,
        "model.attention_probs_dropout_prob": 0.1,
        "train.batch_size": 8,
        "train.steps": 6,
        "train.warmup_steps": 2,
        "train.log_every": 2,
        "train.save_every": 2,
        "train.keep_last": 2,
        "train.progress": False,
        "train.tensorboard": False,
    }
    o.update(overrides)
    return apply_overrides(preset("tiny"), o)
