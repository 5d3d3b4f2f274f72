"""The encoder: preset sizes, HF-style names, weight sharing, shapes and padding behaviour."""

from __future__ import annotations

import ast

import pytest
import torch

from electra.config import generator_config, preset
from electra.model.electra.modeling import ElectraForMaskedLM, ElectraForPreTraining
from electra.model.layers import count_parameters
from electra.objectives import build_objective

from ...conftest import ROOT
from ...numerics import assert_same_computation, encoder_depth

pytestmark = pytest.mark.numeric

# The tiny encoder's longest reduction is its intermediate size (64, above the hidden size 32 and
# 20 keys); its chain the layers', the embeddings' projection and LayerNorm (3), and a head's:
# the generator's dense layer, LayerNorm and decoder (4), the discriminator's two products (2).

# docs/specification.md §Model sizes: discriminator embeddings + encoder, and generator parameters
# not shared.
EXPECTED = {"small": (13.48e6, 0.65e6), "base": (108.9e6, 9.9e6), "large": (334.1e6, 19.5e6)}


@pytest.mark.parametrize("name", EXPECTED)
def test_preset_parameter_counts_match_the_paper(name):
    cfg = preset(name)
    with torch.device("meta"):
        disc = ElectraForPreTraining(cfg.model)
        gen = ElectraForMaskedLM(
            generator_config(cfg.model, cfg.objective), disc.electra.embeddings
        )
    disc_expected, gen_expected = EXPECTED[name]
    assert count_parameters(disc.electra) == pytest.approx(disc_expected, rel=0.01)
    assert count_parameters(disc, gen) - count_parameters(disc) == pytest.approx(
        gen_expected, rel=0.01
    )


def test_generator_sizes_follow_the_paper():
    assert generator_config(preset("small").model, preset("small").objective).hidden_size == 64
    assert generator_config(preset("base").model, preset("base").objective).hidden_size == 256
    large = generator_config(preset("large").model, preset("large").objective)
    assert (large.hidden_size, large.num_attention_heads, large.intermediate_size) == (256, 4, 1024)
    small_pp = generator_config(preset("small++").model, preset("small++").objective)
    assert small_pp.hidden_size == 256


def test_weight_sharing_uses_the_same_parameter_objects(tiny_model, objective_cfg, special):
    obj = build_objective(tiny_model, objective_cfg, special, seq_len=32)
    g, d = obj.generator, obj.discriminator
    assert g.electra.embeddings is d.electra.embeddings
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm"):
        for pg, pd in zip(
            getattr(g.electra.embeddings, name).parameters(),
            getattr(d.electra.embeddings, name).parameters(),
            strict=True,
        ):
            assert pg is pd
    # The generator's output layer is the word table, with a bias of its own.
    assert g.generator_lm_head.weight is d.electra.embeddings.word_embeddings.weight
    assert g.generator_lm_head.bias.shape == (tiny_model.vocab_size,)
    assert torch.count_nonzero(g.generator_lm_head.bias) == 0
    # Each network keeps its own projection from E to its hidden size.
    assert g.electra.embeddings_project is not d.electra.embeddings_project
    assert (
        g.electra.embeddings_project.out_features == 8
        and d.electra.embeddings_project.out_features == 32
    )


def test_untied_embeddings_setting(tiny_model, objective_cfg, special):
    objective_cfg.sharing = "none"
    obj = build_objective(tiny_model, objective_cfg, special, seq_len=32)
    assert obj.generator.electra.embeddings is not obj.discriminator.electra.embeddings
    assert (
        obj.generator.generator_lm_head.weight
        is obj.generator.electra.embeddings.word_embeddings.weight
    )


def test_state_dict_names_follow_hugging_face(tiny_model):
    disc_keys = set(ElectraForPreTraining(tiny_model).state_dict())
    gen_keys = set(ElectraForMaskedLM(tiny_model).state_dict())
    for key in (
        "electra.embeddings.word_embeddings.weight",
        "electra.embeddings.LayerNorm.weight",
        "electra.embeddings_project.weight",
        "electra.encoder.layer.1.attention.self.query.weight",
        "electra.encoder.layer.0.attention.output.LayerNorm.bias",
        "electra.encoder.layer.0.intermediate.dense.weight",
        "electra.encoder.layer.0.output.dense.weight",
        "discriminator_predictions.dense.weight",
        "discriminator_predictions.dense_prediction.bias",
    ):
        assert key in disc_keys
    assert {
        "generator_predictions.dense.weight",
        "generator_predictions.LayerNorm.weight",
        "generator_lm_head.weight",
        "generator_lm_head.bias",
    } <= gen_keys


def test_shapes_and_masked_positions_only(tiny_model):
    torch.manual_seed(0)
    gen = ElectraForMaskedLM(tiny_model).eval()
    ids = torch.randint(5, 100, (3, 20))
    full = gen(ids)
    positions = torch.tensor([[1, 5], [0, 19], [7, 7]])
    at = gen(ids, positions=positions)
    assert full.shape == (3, 20, 100) and at.shape == (3, 2, 100)
    gathered = full.gather(1, positions[..., None].expand(-1, -1, 100))
    depth = encoder_depth(tiny_model.num_hidden_layers, extra=7)
    assert_same_computation(at, gathered, terms=tiny_model.intermediate_size, depth=depth)
    disc = ElectraForPreTraining(tiny_model).eval()
    assert disc(ids).shape == (3, 20)


def test_padding_does_not_change_real_token_outputs(tiny_model):
    torch.manual_seed(0)
    disc = ElectraForPreTraining(tiny_model).eval()
    ids = torch.randint(5, 100, (1, 10))
    padded = torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 10), torch.zeros(1, 6)], 1).long()
    a = disc(ids, attention_mask=torch.ones_like(ids))
    b = disc(padded, attention_mask=mask)[:, :10]
    depth = encoder_depth(tiny_model.num_hidden_layers, extra=5)
    assert_same_computation(a, b, terms=tiny_model.intermediate_size, depth=depth)


@pytest.mark.parametrize("family", ["electra", "modernbert"])
@pytest.mark.parametrize("module", ["modeling", "heads"])
def test_the_model_is_plain_pytorch(family, module):
    """The CPU kernels are put in from outside (`electra.model.kernels.use_kernels`), never imported."""
    model = ROOT / "electra" / "model"
    source = (model / family / f"{module}.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            imported |= {node.module or ""} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
    assert not {
        name for name in imported if name.startswith(("electra.model.kernels", "electra.ops"))
    }
