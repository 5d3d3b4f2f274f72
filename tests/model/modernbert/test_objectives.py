"""Every objective and sharing mode on the modern (ModernBERT-architecture) family: a few training
steps each on a tiny config, GDES's fold, the combinations refused before anything is written, the
FLOP convention a modern run logs, a CLI run of the `modern-tiny` preset, and its learning on
Wikipedia text it never saw."""

from __future__ import annotations

import json

import pytest
import torch

from electra.config import ObjectiveConfig, RunConfig, apply_overrides, preset
from electra.data.prepare import prepare
from electra.data.tokenizer import save_tokenizer, train_tokenizer
from electra.engine.optim import param_groups
from electra.engine.tracking import read_metrics
from electra.errors import ElectraError
from electra.model.family import encoder_of
from electra.model.kernels import use_kernels
from electra.model.modernbert.config import ModernConfig
from electra.model.modernbert.kernels import RotaryAttention
from electra.model.modernbert.modeling import ModernBertForMaskedLM, ModernBertForPreTraining
from electra.objectives import OBJECTIVES, build_objective, check_objective
from electra.objectives.base import binary_loss
from electra.objectives.flops import (
    logged_convention,
    model_flops_per_step,
    official_train_flops,
    train_flops,
)
from electra.objectives.sharing import plain
from electra.pretraining.train import pretrain

from ...conftest import (
    assert_one_line_error,
    random_batch,
    run_cli,
    shared_data,
    tiny_modern_config,
)
from ...numerics import assert_same_computation, encoder_depth, rounding_bound


def tiny_modern(**overrides) -> ModernConfig:
    """Three layers (global, local, local) with a window narrower than the batch's rows, so that
    both attention kinds take part."""
    fields = dict(max_position_embeddings=64, global_attn_every_n_layers=3, local_attention=16)
    return tiny_modern_config(**{**fields, **overrides})


# Every objective with each sharing mode it offers (`Objective.sharings`), at the shapes the
# modern family allows with it: a shared table keeps the discriminator's width.
COMBINATIONS = [
    (name, sharing) for name, cls in sorted(OBJECTIVES.items()) for sharing in cls.sharings
]


def objective_settings(name: str, sharing: str) -> ObjectiveConfig:
    full = sharing == "all" or name == "two_stage"
    return ObjectiveConfig(
        name=name,
        sharing=sharing,
        generator_hidden_fraction=1.0,
        generator_layers_fraction=1.0 if full else 1 / 3,
        two_stage_steps=1,
        adversarial_mlm_steps=1,
    )


def build(name: str, sharing: str, cfg: ModernConfig | None = None, special=None):
    return build_objective(cfg or tiny_modern(), objective_settings(name, sharing), special, 40)


def test_every_objective_and_sharing_is_covered():
    assert {name for name, _ in COMBINATIONS} == set(OBJECTIVES)
    assert ("electra", "gdes") in COMBINATIONS and ("electric", "embeddings") in COMBINATIONS


@pytest.mark.parametrize("name, sharing", COMBINATIONS)
def test_every_objective_trains_on_the_modern_family(special, name, sharing):
    torch.manual_seed(0)
    obj = build(name, sharing, special=special)
    ids, types, attention = random_batch(special, b=8)
    before = {k: v.detach().clone() for k, v in obj.named_parameters()}
    optimizer = torch.optim.Adam(obj.parameters(), lr=1e-3)
    for step in range(3):  # two_stage and adversarial change stage after step 0
        obj.begin_step(step)
        out = obj(ids, types, attention)
        assert torch.isfinite(out.loss), (step, out.loss)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    changed = {k for k, v in obj.named_parameters() if not torch.equal(v, before[k])}
    for role in ("generator", "discriminator", "mlm"):
        if hasattr(obj, role):
            assert any(k.startswith(f"{role}.") for k in changed), (role, sorted(changed)[:5])
    # Model folders get ordinary modern models.
    models = obj.models()
    for role, model in models.items():
        want = ModernBertForMaskedLM if role in ("generator", "mlm") else ModernBertForPreTraining
        assert type(model) is want, (role, type(model))
    # What the sharing mode shares is one tensor; what it does not, is not.
    if hasattr(obj, "generator") and name != "electric":
        g, d = obj.generator, obj.discriminator if hasattr(obj, "discriminator") else obj.mlm
        table = encoder_of(g).embeddings.tok_embeddings.weight
        assert g.decoder.weight is table  # the tied decoder
        shared = encoder_of(d).embeddings is encoder_of(g).embeddings
        assert shared == (sharing in ("embeddings", "all"))
        assert (encoder_of(g) is encoder_of(d)) == (sharing == "all")
    if name == "electric":
        towers = obj.generator
        assert towers.ltr.embeddings is towers.rtl.embeddings
        assert towers.decoder.weight is towers.ltr.embeddings.tok_embeddings.weight
        owner = encoder_of(obj.discriminator).embeddings
        assert (towers.ltr.embeddings is owner) == (sharing == "embeddings")
    if name == "two_stage":  # the discriminator's encoder started as a copy of the generator's
        assert obj.second_stage


# The modern family's norms (no LayerNorm in their names) as the optimizer sees them.
MODERN_NORMS = ("embeddings.norm.", "attn_norm.", "mlp_norm.", "final_norm.", "head.norm.")


@pytest.mark.parametrize("name, sharing", COMBINATIONS)
def test_no_modern_norm_is_decayed_in_pretraining(special, name, sharing):
    """Pretraining decays no norm and no bias of any network, whatever its name: the rule is the
    module's type (`electra.engine.optim.no_decay`), not the electra family's LayerNorm names."""
    obj = build(name, sharing, special=special)
    for by_network in (False, True):
        decay = {
            id(p): g["weight_decay"]
            for g in param_groups(obj, 0.01, by_network=by_network)
            for p in g["params"]
        }
        named = dict(obj.named_parameters())
        norms = [
            k for k in named if any(n in k for n in MODERN_NORMS) or k.endswith(".norm.weight")
        ]
        assert norms, sorted(named)[:5]
        for k, p in named.items():
            is_norm = k in norms or k.endswith("bias")
            assert decay[id(p)] == (0.0 if is_norm else 0.01), k


def test_two_stage_copies_the_generators_encoder(special):
    obj = build("two_stage", "none", special=special)
    g, d = encoder_of(obj.generator), encoder_of(obj.discriminator)
    assert not torch.equal(g.layers[0].attn.Wqkv.weight, d.layers[0].attn.Wqkv.weight)
    obj.begin_step(1)
    for (k, a), (_, b) in zip(g.state_dict().items(), d.state_dict().items(), strict=True):
        assert torch.equal(a, b), k


@pytest.mark.numeric
def test_gdes_disentangles_the_gradients_and_plain_folds_the_residual(special):
    ids, types, attention = random_batch(special, b=8)
    torch.manual_seed(0)
    obj = build("electra", "gdes", special=special)
    g, d = obj.generator, obj.discriminator
    gen_table = g.model.embeddings.tok_embeddings.weight
    delta = d.model.embeddings.tok_embeddings_delta
    c = obj.corrupt(g, ids, types, attention)
    disc_loss, _ = binary_loss(obj.discriminate(c, types, attention))
    disc_loss.backward()  # the discriminator's loss reaches the residual, not the table
    assert gen_table.grad is None and delta.grad.abs().sum() > 0
    assert delta.grad[0].abs().sum() == 0  # the padding row, as nn.Embedding(padding_idx=) keeps it
    obj.zero_grad()
    c.gen.loss.backward()  # and the MLM loss the table, not the residual
    assert gen_table.grad.abs().sum() > 0 and delta.grad is None
    with torch.no_grad():
        delta.normal_()
        d.model.embeddings.norm.weight.uniform_(0.5, 1.5)
    d.eval()
    folded = plain(d).eval()
    assert type(folded) is ModernBertForPreTraining
    assert not any("_delta" in k for k in folded.state_dict())
    assert torch.equal(folded.model.embeddings.tok_embeddings.weight, gen_table + delta)
    assert torch.equal(folded.model.embeddings.norm.weight, d.model.embeddings.norm.weight)
    # the residual added to the table once before the lookup instead of after, then the
    # discriminator's chain: 3 layers, the embeddings' and final LayerNorms and its head (8)
    assert_same_computation(
        folded(ids, types, attention),
        d(ids, types, attention),
        terms=tiny_modern().intermediate_size,
        depth=encoder_depth(3, extra=8) + 1,
    )
    assert type(obj.models()["discriminator"]) is ModernBertForPreTraining


def modern_run(**objective) -> RunConfig:
    settings = {"model.arch": "modernbert", "model.hidden_size": 64, "model.num_attention_heads": 2}
    settings["objective.adversarial_mlm_steps"] = 0  # what `fill_objective_settings` would set
    settings.update({f"objective.{k}": v for k, v in objective.items()})
    return apply_overrides(RunConfig(), settings)


@pytest.mark.parametrize(
    "name, sharing",
    [
        ("electra", "embeddings"),
        ("electra", "gdes"),
        ("electra", "all"),
        ("electra15", "embeddings"),
        ("adversarial", "embeddings"),
        ("replace_mlm", "embeddings"),
        ("all_tokens_mlm", "embeddings"),
        ("electric", "embeddings"),
    ],
)
def test_a_narrow_generator_that_shares_the_table_is_refused(name, sharing):
    run = modern_run(name=name, sharing=sharing, generator_hidden_fraction=0.25)
    with pytest.raises(ElectraError) as error:
        check_objective(run)
    message = str(error.value)
    for needle in (
        f"objective.sharing={sharing}",
        "model.arch=modernbert",
        "model.hidden_size=64",
        "objective.generator_hidden_fraction=1",
        "objective.sharing=none",
    ):
        assert needle in message, message
    assert "\n" not in message
    # The same narrow generator with two separate tables is allowed, and builds.
    check_objective(modern_run(name=name, sharing="none", generator_hidden_fraction=0.25))


def test_switching_an_electra_preset_to_modern_takes_a_full_width_generator(wikitext_data, capsys):
    """`--preset small --model.arch modernbert`: small's narrow generator cannot share the table,
    so the unset generator shape becomes the modern presets' (said on stderr); one the user set
    is kept, and then refused by the check."""
    from electra.pretraining.resolve import resolve_run, run_config

    def resolved(cfg, given):
        return resolve_run(cfg, given=given).cfg

    data = {"data.path": str(wikitext_data)}
    cfg, given = run_config("small", None, {"model.arch": "modernbert", **data})
    run = resolved(cfg, given)
    assert (run.objective.generator_hidden_fraction, run.objective.generator_layers_fraction) == (
        1.0,
        1 / 3,
    )
    check_objective(run)
    note = capsys.readouterr().err
    assert "objective.generator_hidden_fraction=1.0 (the ModernBERT family" in note
    assert "objective.generator_layers_fraction=0.3333" in note
    mlm, given = run_config(
        "small", None, {"model.arch": "modernbert", "objective.name": "mlm", **data}
    )
    assert resolved(mlm, given).objective.generator_hidden_fraction == 0.25
    mine = {"model.arch": "modernbert", "objective.generator_hidden_fraction": "0.5", **data}
    cfg, given = run_config("small", None, mine)
    run = resolved(cfg, given)
    assert run.objective.generator_layers_fraction == 1.0
    with pytest.raises(ElectraError, match="objective.sharing=embeddings with model.arch"):
        check_objective(run)


def test_a_narrow_generator_trains_with_sharing_none(special):
    cfg = ObjectiveConfig(sharing="none", generator_hidden_fraction=0.5)
    obj = build_objective(tiny_modern(), cfg, special, 40)
    assert obj.generator.config.hidden_size == 16 and obj.generator.config.intermediate_size == 24
    ids, types, attention = random_batch(special, b=4)
    assert torch.isfinite(obj(ids, types, attention).loss)


def test_a_modern_run_logs_model_flops_where_the_official_convention_has_no_count():
    modern = modern_run()
    assert logged_convention(modern) == "model"
    assert logged_convention(RunConfig()) == "official"
    with pytest.raises(ElectraError, match="official FLOP convention"):
        official_train_flops(modern)
    assert train_flops(modern, logged_convention(modern), steps=10) == pytest.approx(
        10 * model_flops_per_step(modern)
    )
    two = modern_run(name="two_stage", sharing="none", generator_layers_fraction=1.0)
    two = apply_overrides(two, {"objective.two_stage_steps": 5, "train.steps": 10})
    # The second stage runs a frozen generator (1x) and a discriminator (3x).
    assert train_flops(two, logged_convention(two)) == pytest.approx(
        5 * model_flops_per_step(two, 0) + 5 * model_flops_per_step(two, 5)
    )
    assert model_flops_per_step(two, 5) > model_flops_per_step(two, 0)


@pytest.mark.numeric
def test_cpu_kernels_leave_a_modern_objective_computing_the_same(special, monkeypatch):
    """`kernels=auto` on CPU swaps linear layers (bias-free ones included), dropouts and the
    modern family's attention and MLP (electra.model.modernbert.kernels), and the step computes what
    the stock layers do."""
    import electra.model.kernels as kernels

    monkeypatch.setattr(kernels, "onednn_linear_enabled", lambda: True)
    ids, types, attention = random_batch(special, b=4)
    results = []
    for choice in ("stock", "auto"):
        torch.manual_seed(0)
        obj = use_kernels(
            build("electra", "embeddings", special=special), choice, torch.device("cpu")
        )
        torch.manual_seed(1)
        out = obj(ids, types, attention)
        out.loss.backward()
        results.append((out.loss.detach(), obj.discriminator.model.layers[1].attn.Wqkv.weight.grad))
    assert type(obj.discriminator.model.layers[1].attn.Wqkv) is kernels.OneDnnLinear
    assert type(obj.discriminator.model.layers[1].attn) is RotaryAttention
    # The discriminator's chain (3 layers, 4 LayerNorm reductions, its head's 4) and the losses'
    # softmax and means (2); the longest reduction the 4 rows of 40 tokens the losses and the
    # weights' gradients sum over. The loss relative to its size (a mean of positive terms).
    depth, tokens = encoder_depth(3, extra=10), 4 * 40
    rel = rounding_bound(torch.float32, tokens, depth)
    assert results[1][0].item() == pytest.approx(results[0][0].item(), rel=rel)
    backward = encoder_depth(3, extra=10, backward=True)
    assert_same_computation(results[1][1], results[0][1], terms=tokens, depth=backward)


def test_presets_lists_the_modern_presets_with_both_counts(capsys):
    code, out, _ = run_cli(capsys, "presets")
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert {"modern-tiny", "modern-small", "modern-base", "modern-large"} <= set(rows)
    # ModernBERT-base's encoder (149M with its 50k vocabulary); a generator of a third its depth.
    assert rows["modern-base"][1] == "149.01M" and rows["modern-base"][5] == "-"
    assert rows["modern-small"][3:5] == ["256", "7"]
    assert all(row[2].endswith(("M", "K")) for row in rows.values())


def test_cli_pretrains_modern_tiny_and_writes_both_model_folders(wikitext_data, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys,
        *("pretrain", "--preset", "modern-tiny", "--data", wikitext_data, "--out", run),
        *("--steps", 2, "--batch-size", 4, "--seq-len", 64, "--train.log_every", 1),
        *("--train.progress", "false", "--train.tensorboard=false", "--device", "cpu"),
    )
    assert code == 0, err
    assert "discriminator:" in err and "generator:" in err
    assert "the model convention" in err  # the official one has no modern count
    for role in ("discriminator", "generator"):
        assert (run / role / "model.safetensors").is_file() and (
            run / role / "config.json"
        ).is_file()
    cfg = RunConfig.load(run / "config.json")
    assert cfg.model.arch == "modernbert" and cfg.model.vocab_size == 4000
    rows = read_metrics(run)
    assert [r["train_flops"] for r in rows] == [
        pytest.approx(k * model_flops_per_step(cfg)) for k in (1, 2)
    ]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)


def test_a_refused_combination_is_one_error_line_and_nothing_written(
    wikitext_data, tmp_path, capsys
):
    run = tmp_path / "run"
    code, out, err = run_cli(
        capsys,
        *("pretrain", "--preset", "modern-tiny", "--data", wikitext_data, "--out", run),
        *("--objective.generator_hidden_fraction", "0.25", "--seq-len", 64),
    )
    assert_one_line_error(code, err, "objective.sharing=embeddings", "model.arch=modernbert")
    assert not run.exists()


def test_a_generator_of_no_valid_shape_is_refused_naming_its_settings(
    wikitext_data, tmp_path, capsys
):
    """`objective.generator_hidden_size=65` with sharing none: the generator's head size is odd,
    which rotary positions cannot turn. The check refuses it (shared or not, before anything is
    written), naming the objective's generator settings, not the discriminator's `model.*`."""
    for sharing in ("none", "embeddings"):
        run = modern_run(sharing=sharing, generator_hidden_size=65)
        with pytest.raises(ElectraError) as error:
            check_objective(run)
        message = str(error.value)
        assert "objective.generator_" in message and "hidden_size=65" in message, message
        assert "odd" in message and "model." not in message and "\n" not in message
    # A head count that does not divide the width, in the electra family too.
    run = apply_overrides(RunConfig(), {"objective.generator_num_attention_heads": "3"})
    with pytest.raises(ElectraError, match="objective.generator_.*not divisible"):
        check_objective(run)
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys,
        *("pretrain", "--preset", "modern-tiny", "--data", wikitext_data, "--out", run),
        *("--objective.sharing", "none", "--objective.generator_hidden_size", "65"),
        *("--seq-len", 64),
    )
    assert_one_line_error(code, err, "objective.generator_", "hidden_size=65", "odd")
    assert "model.hidden_size" not in err
    assert not run.exists()


def test_modern_tiny_learns_on_wikipedia_text_it_never_saw(tmp_path):
    """200 steps at batch 16 on a Wikipedia file (its tokenizer trained on another) take the
    discriminator's AUC to 0.65 or more and the generator's MLM loss down; on another file, held
    out, the discriminator ranks replacements and its states have not collapsed (at 5e-4 they
    do: docs/pretraining.md §Held-out health)."""
    wiki = shared_data("wikipedia-en", "AA")
    save_tokenizer(
        train_tokenizer([wiki / "wiki_01"], vocab_size=8000), tmp_path / "tok", lowercase=True
    )
    for file, folder in (("wiki_02", "data"), ("wiki_03", "held")):
        prepare(
            [str(wiki / file)], tmp_path / "tok", seq_len=128, out_dir=tmp_path / folder, workers=1
        )
    overrides = {
        "data.path": str(tmp_path / "data"),
        "train.eval_data": str(tmp_path / "held"),
        "train.steps": 200,
        "train.warmup_proportion": 0.5,  # the preset's 100-step warm-up, kept (not cut to 20)
        "train.batch_size": 16,
        "train.log_every": 25,
        "train.progress": False,
        "train.tensorboard": False,
        "train.save_every": 1000,
        "train.device": "cpu",  # the curve is asserted for the CPU's random stream
    }
    run = pretrain(apply_overrides(preset("modern-tiny"), overrides), tmp_path / "run")
    rows = read_metrics(run)
    aucs, mlm = [r["disc_auc"] for r in rows], [r["mlm_loss"] for r in rows]
    summary = json.dumps({"auc": aucs, "mlm": mlm})
    assert max(aucs) >= 0.65, summary
    assert mlm[-1] < mlm[0] - 0.1, summary
    last = read_metrics(run, "heldout")[-1]
    # Not collapsed; at 200 steps it tells replacements by their tokens, not yet in context (the
    # fixed corruption's AUC near 0.5), so the verdict may say "not yet".
    assert last["verdict"] in ("learned", "not yet") and last["mean_cosine"] < 0.3, last
    assert last["disc_auc"] > 0.75 and last["disc_prior_gain"] > 0.05, last


@pytest.mark.parametrize(
    "name, sharing", [("electra", "gdes"), ("electric", "embeddings"), ("all_tokens_mlm", "none")]
)
def test_a_modern_step_traces_into_one_graph(special, name, sharing):
    """No host syncs or data-dependent shapes in the modern networks either (GDES's table, the
    towers' 4-D masks, the copy gate): `torch.compile` and CUDA graphs capture a step whole."""
    import torch._dynamo as dynamo

    obj = build(name, sharing, special=special)
    ids, types, attention = random_batch(special, b=4)
    dynamo.reset()
    explained = dynamo.explain(obj)(ids, types, attention)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


def test_a_setting_of_the_other_family_names_that_family():
    with pytest.raises(ElectraError, match=r"model.norm_eps in flags is a setting of model.arch="):
        apply_overrides(preset("tiny"), {"model.norm_eps": "1e-6"}, source="flags")
    with pytest.raises(ElectraError, match=r"drop it, or set model.arch=electra$"):
        apply_overrides(preset("modern-tiny"), {"model.embedding_size": "16"}, source="flags")
    switched = apply_overrides(preset("tiny"), {"model.arch": "modernbert", "model.norm_eps": 1e-6})
    assert isinstance(switched.model, ModernConfig) and switched.model.norm_eps == 1e-6
