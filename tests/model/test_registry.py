"""The family registry: built-in families load first and in their folders' order, a family
registered later comes after them (or replaces one of its name), and a record that would make two
families indistinguishable is refused in one line. The CLI's `--model.arch` help and `--model.*`
flags come from the registry."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from electra.cli.main import arch_help, build_parser
from electra.errors import ElectraError
from electra.model import Family, Preset, families, register_family
from electra.model.family import _FAMILIES, family


@dataclass
class LeanConfig:
    """An ELECTRA encoder under another family's name: what a registration needs of a config."""

    arch: str = "lean"
    vocab_size: int = 100
    hidden_size: int = 32
    num_hidden_layers: int = 1
    num_attention_heads: int = 2
    intermediate_size: int = 64
    pad_token_id: int = 0
    initializer_range: float = 0.02
    lean_only: float = 0.5  # a setting no other family has


def lean(**changes) -> Family:
    record = Family(
        name="lean",
        title="Lean",
        config=LeanConfig,
        presets={"lean-tiny": Preset(LeanConfig)},
        encoder=None,
        masked_lm=None,
        pretraining=None,
        layer=None,
        heads={},
        forward_flops=None,
        layerwise_depth=None,
        summary="a test's",
    )
    return replace(record, **changes)


@pytest.fixture
def registered():
    register_family(lean())
    yield
    _FAMILIES.pop("lean", None)


def test_a_later_family_comes_after_the_built_in_ones(registered):
    assert list(families()) == ["electra", "deberta-v3", "hf", "modernbert", "lean"]
    assert arch_help() == (
        "The architecture family: electra (BERT's, ELECTRA's own), deberta-v3 (DeBERTa-v3's; "
        "docs/pretraining.md §The DeBERTa-v3 family), hf (any transformers encoder "
        "by model_type; docs/any-encoder.md), modernbert (ModernBERT's; docs/pretraining.md §The "
        "modern family) or lean (a test's)."
    )
    pretrain = next(
        a
        for a in build_parser()._subparsers._group_actions[0].choices["pretrain"]._actions
        if "--model.lean_only" in a.option_strings
    )
    assert "a setting no other family has" in pretrain.help


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"presets": {"tiny": Preset(LeanConfig)}},
            "family 'lean': the preset name 'tiny' is taken by family 'electra'; give the preset",
        ),
        (
            {"name": "other"},
            "family 'other': its config LeanConfig must have a field `arch` whose default is",
        ),
        (
            {"name": "lean", "hf": family("modernbert").hf},
            "family 'lean': the model_type 'modernbert' is taken by family 'modernbert'",
        ),
    ],
)
def test_a_record_that_two_families_would_share_is_refused(changes, message):
    with pytest.raises(ElectraError, match="^" + message.replace("(", r"\(")):
        register_family(lean(**changes))
    assert "lean" not in families() and "other" not in families()


def test_only_a_family_registers():
    with pytest.raises(ElectraError, match="^register_family takes a Family"):
        register_family({"name": "x"})


def test_a_family_replaces_the_one_of_its_name():
    mine = replace(family("modernbert"), title="Mine")
    before = family("modernbert")
    try:
        register_family(mine)
        assert family("modernbert").title == "Mine" and list(families())[0] == "electra"
    finally:
        register_family(before)
    assert family("modernbert") is before
