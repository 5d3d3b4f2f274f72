"""The objectives beyond ELECTRA and BERT (Table 5's ablations, two-stage, adversarial), weight
sharing (none, embeddings, all, GDES), and each objective through the trainer."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from electra.cli.main import main
from electra.config import ObjectiveConfig, RunConfig, apply_overrides, generator_config
from electra.engine.tracking import read_metrics
from electra.errors import ElectraError
from electra.folders.model_folder import load_pretrained
from electra.hf.export import check_exportable, export_hf
from electra.objectives import (
    OBJECTIVES,
    build_objective,
    check_objective,
    fill_objective_settings,
)
from electra.objectives.adversarial import reinforce_loss
from electra.objectives.base import binary_loss
from electra.objectives.masking import selected_positions
from electra.objectives.mlm import copy_mixture_log_prob
from electra.objectives.sharing import plain
from electra.pretraining.train import pretrain

from ..conftest import random_batch, tiny_cfg, tiny_model_config
from ..numerics import assert_same_computation, encoder_depth, rounding_bound

# The tiny discriminator's chain (tiny_model: 2 layers, intermediate size 64): its layers, the
# embeddings' projection and LayerNorm (3) and its head's two products (2).
DISCRIMINATOR = encoder_depth(tiny_model_config().num_hidden_layers, extra=5)
# A loss of it over a batch of 16 rows of 40: the discriminator, the per-token loss and the mean
# over the 640 tokens, the longest reduction; relative, as the tokens' losses are all positive.
LOSS_REL = rounding_bound(torch.float32, 16 * 40, DISCRIMINATOR + 2)


def _build(tiny_model, special, **objective):
    return build_objective(tiny_model, ObjectiveConfig(**objective), special, seq_len=40)


def test_selected_positions_counts_a_twice_drawn_position_once():
    positions = torch.tensor([[2, 2, 5, 0]])
    writes = torch.tensor([[True, False, True, False]])  # slot 3 unused
    got = selected_positions(torch.zeros(1, 8), positions, writes)
    assert got.tolist() == [[False, False, True, False, False, True, False, False]]


@pytest.mark.numeric
def test_electra15_learns_only_at_the_masked_out_positions(tiny_model, special):
    ids, types, attention = random_batch(special, b=16)
    obj = _build(tiny_model, special, name="electra15")
    torch.manual_seed(0)
    out = obj(ids, types, attention)
    torch.manual_seed(0)
    _, d = obj.detect(ids, types, attention)  # the same draws: the verdict the step scored
    where = d.where
    counts = where.sum(1)
    # round(0.15 * real tokens) slots per row, fewer distinct positions when a draw repeats.
    expected = torch.round(attention.sum(1) * 0.15).clamp(1, 6)
    assert (counts <= expected).all() and (counts >= expected - 2).all() and (counts >= 1).all()
    assert not (d.labels & ~where).any()  # every replaced token was masked out
    manual = F.binary_cross_entropy_with_logits(d.logits[where], d.labels[where].float())
    assert out.stats["disc_loss"] == pytest.approx(manual.item(), rel=LOSS_REL)
    _, electra = _build(tiny_model, special, name="electra").detect(ids, types, attention)
    assert torch.equal(electra.where, attention.bool())


@pytest.mark.numeric
def test_replace_mlm_predicts_the_slots_from_generator_samples(tiny_model, special):
    ids, types, attention = random_batch(special, b=16)
    obj = _build(tiny_model, special, name="replace_mlm")
    seen = {}
    for role, net in (("mlm", obj.mlm), ("generator", obj.generator)):
        net.electra.register_forward_pre_hook(
            lambda mod, args, r=role: seen.__setitem__(r, args[0])
        )
    torch.manual_seed(0)
    out = obj(ids, types, attention)
    changed = seen["mlm"] != ids
    assert changed.any() and (changed.sum(1) <= 6).all()  # only slots change
    # The generator reads [MASK] at 85% of the slots; the model reads its samples there instead.
    masks = {role: (x == special.mask).sum().item() for role, x in seen.items()}
    assert masks["generator"] > 20 * max(1, masks["mlm"])
    assert set(obj.models()) == {"mlm", "generator"}
    assert obj.mlm.electra.embeddings is obj.generator.electra.embeddings  # shared, as ELECTRA's
    # The loss is the sum of the generator's MLM loss and the model's own, both logged.
    assert out.loss.item() == pytest.approx(
        (out.stats["mlm_loss"] + out.stats["main_loss"]).item(), rel=LOSS_REL
    )
    assert 0 < out.stats["main_loss"] < 2 * math.log(100)


@pytest.mark.numeric
def test_copy_mixture_by_hand():
    gate = torch.tensor([0.0, 0.0, 60.0, -60.0])  # D = 0.5, 0.5, ~1, ~0
    log_p = torch.log(torch.tensor([0.2, 0.2, 0.2, 0.2]))
    copy = torch.tensor([True, False, True, True])
    got = copy_mixture_log_prob(gate, log_p, copy)
    # 0.5 + 0.5 * 0.2, 0.5 * 0.2, ~1, ~0.2
    want = torch.log(torch.tensor([0.6, 0.1, 1.0, 0.2]))
    # sigmoid, log, exp, a sum of two, log (and the reference's own rounding of its probabilities)
    assert_same_computation(got, want, terms=2, depth=6)
    assert torch.isfinite(copy_mixture_log_prob(torch.tensor([80.0]), log_p[:1], ~copy[:1])).all()


def test_all_tokens_mlm_scores_every_real_non_special_token(tiny_model, special):
    ids, types, attention = random_batch(special, b=8)
    obj = _build(tiny_model, special, name="all_tokens_mlm")
    torch.manual_seed(0)
    out = obj(ids, types, attention)
    # A fresh model: the softmax is near uniform over 100 ids and the gate near 1/2, so a token
    # shown unchanged costs about -log(0.5 + 0.5 / 100), a replaced one -log(0.5 / 100).
    replaced = out.stats["replaced_frac"].item() * attention.sum() / (attention.sum() - 24)
    expected = (1 - replaced) * -math.log(0.505) + replaced * -math.log(0.005)
    assert out.stats["main_loss"].item() == pytest.approx(expected.item(), rel=0.25)
    assert 0.3 < out.stats["copy_gate"] < 0.7
    out.loss.backward()
    assert obj.copy_gate.dense_prediction.weight.grad.abs().sum() > 0
    assert "copy_gate" not in str(list(obj.models()["mlm"].state_dict()))  # not exported


def _two_stage_cfg(**o):
    fields = dict(
        name="two_stage",
        sharing="none",
        generator_hidden_fraction=1.0,
        two_stage_steps=3,
    )
    return ObjectiveConfig(**{**fields, **o})


@pytest.mark.numeric
def test_two_stage_trains_the_generator_then_a_discriminator_initialised_from_it(
    tiny_model, special
):
    ids, types, attention = random_batch(special, b=8)
    obj = build_objective(tiny_model, _two_stage_cfg(), special, seq_len=40)
    obj.begin_step(0)
    out = obj(ids, types, attention)
    out.loss.backward()
    assert set(out.stats) == {"mlm_loss", "mlm_acc"} and out.loss == out.stats["mlm_loss"]
    assert all(p.grad is None for p in obj.discriminator.parameters())
    obj.zero_grad(set_to_none=True)
    with torch.no_grad():
        obj.generator.electra.encoder.layer[0].output.dense.weight.add_(1.0)  # "trained"
    obj.begin_step(3)  # the switch: the discriminator's encoder becomes the generator's
    for (name, g), d in zip(
        obj.generator.electra.state_dict().items(),
        obj.discriminator.electra.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(g, d), name
    out = obj(ids, types, attention)
    out.loss.backward()
    # one product in float32
    assert out.loss.item() == pytest.approx(
        50 * out.stats["disc_loss"].item(), rel=rounding_bound(torch.float32, 1)
    )
    assert all(p.grad is None for p in obj.generator.parameters())  # frozen
    assert obj.discriminator.electra.encoder.layer[0].output.dense.weight.grad is not None
    # A run resumed after the switch keeps the discriminator it trained.
    with torch.no_grad():
        obj.discriminator.electra.encoder.layer[0].output.dense.weight.add_(1.0)
    obj.begin_step(4)
    assert not torch.equal(
        obj.discriminator.electra.encoder.layer[0].output.dense.weight,
        obj.generator.electra.encoder.layer[0].output.dense.weight,
    )


@pytest.mark.numeric
def test_reinforce_gradient_by_hand():
    torch.manual_seed(0)
    logits = torch.randn(1, 3, 5, requires_grad=True)
    sampled = torch.tensor([[1, 4, 2]])
    reward = torch.tensor([[2.0, 0.5, 9.0]])
    baseline = torch.tensor([[1.0, 1.0, 1.0]], requires_grad=True)
    weights = torch.tensor([[1.0, 1.0, 0.0]])  # the last slot's sample is not in the input
    reinforce_loss(logits, sampled, reward, baseline, weights).backward()
    # d/dlogits of -log p(s) * (R - b) / Σw is (softmax - onehot(s)) * (R - b) / Σw.
    p = torch.softmax(logits.detach(), -1)
    advantage = torch.tensor([1.0, -0.5, 0.0]) / 2
    want = (p[0] - F.one_hot(sampled[0], 5)) * advantage[:, None]
    # the softmax over 5, a difference, the advantage's product and the division by the weights
    assert_same_computation(logits.grad[0], want, terms=5, depth=4)
    assert baseline.grad is None or not baseline.grad.any()  # the advantage is a constant


def test_adversarial_generator_learns_from_the_reward_after_the_warm_start(tiny_model, special):
    ids, types, attention = random_batch(special, b=8)
    cfg = ObjectiveConfig(name="adversarial", adversarial_mlm_steps=2)
    obj = build_objective(tiny_model, cfg, special, seq_len=40)
    losses = {}
    for step in (0, 2):
        obj.begin_step(step)
        torch.manual_seed(1)
        out = obj(ids, types, attention)
        losses[step] = out.loss.item() - 50 * out.stats["disc_loss"].item()
        assert {"reward", "value_loss", "gen_entropy", "mlm_loss", "disc_loss"} <= set(out.stats)
        assert out.stats["reward"] > 0 and out.stats["gen_entropy"] > 3.0  # ~log(100)
    # Warm start: MLM loss + value loss; then REINFORCE, whose value at a zero baseline head
    # (b = log 2) is near zero-mean rather than the MLM loss of about log(100).
    assert losses[0] > 4.0 and abs(losses[2]) < 3.0
    obj.begin_step(2)
    out = obj(ids, types, attention)
    out.loss.backward()
    assert obj.value_head.weight.grad.abs().sum() > 0
    assert set(obj.models()) == {"discriminator", "generator"}


@pytest.mark.parametrize("sharing", ["none", "embeddings", "all", "gdes"])
def test_sharing_settings(tiny_model, special, sharing):
    fraction = 1.0 if sharing == "all" else 0.25
    obj = _build(tiny_model, special, sharing=sharing, generator_hidden_fraction=fraction)
    g, d = obj.generator, obj.discriminator
    same_table = g.electra.embeddings is d.electra.embeddings
    assert same_table == (sharing in ("embeddings", "all"))
    assert (g.electra is d.electra) == (sharing == "all")
    assert g.generator_lm_head.weight is g.electra.embeddings.word_embeddings.weight


def test_all_weights_sharing_needs_equal_sizes(tiny_model, special):
    with pytest.raises(ElectraError, match="objective.sharing=all needs a generator"):
        _build(tiny_model, special, sharing="all")


@pytest.mark.numeric
def test_gdes_disentangles_the_gradients_and_export_folds_the_residual(
    tiny_model, special, tmp_path
):
    ids, types, attention = random_batch(special, b=8)
    obj = _build(tiny_model, special, sharing="gdes")
    g, d = obj.generator, obj.discriminator
    # The discriminator's loss alone reaches the residual and not the generator's tables.
    torch.manual_seed(0)
    c = obj.corrupt(g, ids, types, attention)
    disc_loss, _ = binary_loss(obj.discriminate(c, types, attention))
    disc_loss.backward()
    assert g.electra.embeddings.word_embeddings.weight.grad is None
    assert d.electra.embeddings.word_embeddings_delta.grad.abs().sum() > 0
    assert d.electra.embeddings.position_embeddings_delta.grad.abs().sum() > 0
    obj.zero_grad()
    c.gen.loss.backward()  # and the MLM loss reaches the generator's table, not the residual
    assert g.electra.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert d.electra.embeddings.word_embeddings_delta.grad is None
    # Export: the residual folded into a plain table computes what the GDES network computes.
    with torch.no_grad():
        d.electra.embeddings.word_embeddings_delta.normal_()
        d.electra.embeddings.position_embeddings_delta.normal_()
    d.eval()
    folded = plain(d).eval()
    # the table plus the residual added once before the lookup instead of after: the rest is
    # the discriminator's chain (intermediate size 64 its longest reduction)
    assert_same_computation(
        folded(ids, types, attention),
        d(ids, types, attention),
        terms=tiny_model.intermediate_size,
        depth=DISCRIMINATOR + 1,
    )
    table = folded.electra.embeddings.word_embeddings.weight
    want = g.electra.embeddings.word_embeddings.weight + d.electra.embeddings.word_embeddings_delta
    assert_same_computation(table, want, terms=2, depth=1)
    check_exportable(folded, tmp_path)
    with pytest.raises(ElectraError, match="word_embeddings_delta"):
        check_exportable(d, tmp_path)
    assert obj.models()["discriminator"] is not d  # model folders get the folded network


@pytest.mark.parametrize("fraction, hidden", [(0.25, 8), (0.5, 16), (0.75, 24), (1.0, 32)])
def test_generator_size_sweep(tiny_model, special, fraction, hidden):
    obj = _build(tiny_model, special, generator_hidden_fraction=fraction)
    assert obj.generator.config.hidden_size == hidden
    # The official formula below full width (FFN 4H); at full width, the discriminator's shape.
    assert obj.generator.config.intermediate_size == (64 if fraction == 1 else 4 * hidden)
    ids, types, attention = random_batch(special, b=2)
    assert torch.isfinite(obj(ids, types, attention).loss)


def _run(**objective) -> RunConfig:
    return apply_overrides(RunConfig(), {f"objective.{k}": v for k, v in objective.items()})


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(name="two_stage", sharing="none", two_stage_steps=5), "need one size"),
        (dict(name="two_stage", generator_hidden_fraction=1.0, two_stage_steps=5), "sharing"),
        (
            dict(name="two_stage", sharing="none", generator_hidden_fraction=1.0),
            "objective.two_stage_steps is unset: the commands and electra.pretrain fill it",
        ),
        (dict(name="adversarial", adversarial_mlm_steps=10**9), "adversarial_mlm_steps"),
        (dict(name="replace_mlm", sharing="gdes"), "not available with objective.name"),
        (dict(name="mlm", sharing="all"), "not available with objective.name"),
    ],
)
def test_bad_objective_settings_are_refused(settings, message):
    with pytest.raises(ElectraError, match=message):
        check_objective(_run(**settings))


def test_unknown_names_are_refused_when_the_config_is_read():
    with pytest.raises(ElectraError, match="objective.name='electric2' is unknown"):
        _run(name="electric2")
    with pytest.raises(ElectraError, match="objective.sharing='some' is unknown"):
        _run(sharing="some")


def test_a_bad_setting_is_one_error_line_and_nothing_written(wikitext_data, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        ["pretrain", "--preset", "tiny", "--data", str(wikitext_data), "--out", str(out)]
        + [
            "--objective.name",
            "two_stage",
            "--objective.two_stage_steps",
            "5",
            "--objective.sharing",  # kept as given, though two_stage would set none
            "embeddings",
            "--train.steps",
            "9",
            "--train.warmup_steps",  # (else a line says the preset's 100 is cut to 1)
            "1",
            "--data.seq_len",
            "64",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 2, err
    assert err[0] == (
        "objective two_stage: set objective.generator_hidden_fraction=1.0; "
        "set it yourself to change this"
    )
    assert err[1] == (
        "electra: error: objective.sharing=embeddings is not available with "
        "objective.name=two_stage: choose one of none"
    )
    assert not out.exists()


def test_an_objective_fills_in_only_the_settings_the_user_left_unset():
    run = apply_overrides(RunConfig(), {"objective.name": "two_stage", "train.steps": 40})
    filled, note = fill_objective_settings(run, given={"objective.name", "train.steps"})
    assert note == (
        "objective two_stage: set objective.sharing=none, "
        "objective.generator_hidden_fraction=1.0, objective.two_stage_steps=20 "
        "(half of train.steps); set them yourself to change this"
    )
    check_objective(filled)
    mine = replace(run, objective=replace(run.objective, two_stage_steps=30))
    kept, note = fill_objective_settings(mine, given={"objective.two_stage_steps"})
    assert kept.objective.two_stage_steps == 30 and "two_stage_steps" not in note
    run = apply_overrides(RunConfig(), {"objective.name": "adversarial", "train.steps": 40})
    assert fill_objective_settings(run, given=set())[1] == (
        "objective adversarial: set objective.adversarial_mlm_steps=4 (a tenth of train.steps); "
        "set it yourself to change this"
    )
    assert fill_objective_settings(RunConfig(), set()) == (RunConfig(), "")  # electra needs none


# Each objective through the trainer: the losses it learns from fall, its statistics reach
# metrics.jsonl, and its model folders load (and export to Hugging Face names).
RUNS = {
    "electra": ({}, ["mlm_loss", "disc_loss"]),
    "electra15": ({}, ["mlm_loss", "disc_loss"]),
    "mlm": ({}, ["mlm_loss"]),
    "replace_mlm": ({}, ["mlm_loss", "main_loss"]),
    "all_tokens_mlm": ({}, ["mlm_loss", "main_loss"]),
    "two_stage": (
        {"sharing": "none", "generator_hidden_fraction": 1.0, "two_stage_steps": 20},
        ["mlm_loss"],
    ),
    "adversarial": ({"adversarial_mlm_steps": 20}, ["mlm_loss", "disc_loss"]),
    "electra+gdes": ({"sharing": "gdes"}, ["mlm_loss", "disc_loss"]),
    "electric": ({}, ["mlm_loss", "disc_loss"]),
}


EXTRA_METRICS = {  # besides loss, mlm_loss and mlm_acc
    "electra": {"disc_loss", "disc_acc", "disc_auc", "replaced_frac"},
    "electra15": {"disc_loss", "disc_auc"},
    "replace_mlm": {"main_loss", "main_acc", "replaced_frac"},
    "all_tokens_mlm": {"main_loss", "main_acc", "copy_gate"},
    "two_stage": {"disc_loss", "disc_auc"},
    "adversarial": {"disc_loss", "disc_auc", "reward", "value_loss", "gen_entropy"},
    "electric": {"disc_loss", "disc_auc", "replaced_frac"},
}


def test_every_objective_is_covered():
    assert {name.split("+")[0] for name in RUNS} == set(OBJECTIVES)


@pytest.mark.parametrize("arm", list(RUNS))
def test_objective_learns_through_the_trainer(wikitext_data, tmp_path, arm):
    settings, falling = RUNS[arm]
    name = arm.split("+")[0]
    overrides = {f"objective.{k}": v for k, v in {"name": name, **settings}.items()}
    cfg = tiny_cfg(
        wikitext_data,
        **overrides,
        **{"train.steps": 40, "train.log_every": 10, "train.save_every": 40, "train.lr": 3e-3},
    )
    run = pretrain(cfg, tmp_path / "run")
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [10, 20, 30, 40]
    window = rows[:2] if name == "two_stage" else rows  # its MLM stage is the first 20 steps
    for key in falling:
        assert window[-1][key] < window[0][key], (key, [r.get(key) for r in rows])
    logged = set(rows[-1])
    assert logged >= {"loss", "mlm_loss", "mlm_acc", "train_flops", "tokens_per_s"}
    assert logged >= EXTRA_METRICS.get(name, set()), logged
    if name == "two_stage":
        assert "disc_loss" not in rows[1] and rows[-1]["disc_loss"] < rows[2]["disc_loss"] + 0.05
    mlm_family = name in ("mlm", "replace_mlm", "all_tokens_mlm")
    roles = {"mlm" if mlm_family else "discriminator"}
    if name not in ("mlm", "electric"):  # Electric's two towers have no HF counterpart
        roles.add("generator")
    assert {p.name for p in run.iterdir() if (p / "model.safetensors").is_file()} == roles
    model, _ = load_pretrained(run)  # the network a user fine-tunes
    assert type(model).__name__ == ("ElectraForMaskedLM" if mlm_family else "ElectraForPreTraining")
    assert {p.name for p in export_hf(run, tmp_path / "hf")} == roles


# The objectives whose step judges tokens replaced or original, and so log the window's AUC.
DETECTORS = {"electra", "electra15", "two_stage", "adversarial", "electric"}


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_each_objective_makes_its_own_metrics(tiny_model, special, name):
    from electra.engine.step import Window
    from electra.objectives.metrics import AUC_HISTOGRAMS

    sizes = {"sharing": "none", "generator_hidden_fraction": 1.0} if name == "two_stage" else {}
    obj = _build(
        tiny_model, special, name=name, **sizes, two_stage_steps=1, adversarial_mlm_steps=0
    )
    ids, types, attention = random_batch(special, b=8)
    window = Window(obj.metrics)
    for step in range(2):  # two_stage: the generator alone, then the discriminator
        obj.begin_step(step)
        out = obj(ids, types, attention)
        window.add(out)
        window.end_step(torch.tensor(1.0), torch.tensor(False))
    record = window.summary()
    scalars = {k for k, v in out.stats.items() if v.dim() == 0}
    derived = {"disc_auc"} if name in DETECTORS else set()
    assert set(record) == scalars | derived | {"loss", "grad_norm", "skipped_steps"}
    assert (AUC_HISTOGRAMS in out.stats) == (name in DETECTORS)
    if derived:  # NaN where every judged token was replaced (electra15's few, at init)
        assert math.isnan(record["disc_auc"]) or 0 <= record["disc_auc"] <= 1


def test_the_trainer_logs_what_the_objective_makes(wikitext_data, tmp_path, monkeypatch):
    from electra.objectives.mlm import MaskedLanguageModeling

    class Counting(MaskedLanguageModeling):
        def metrics(self, sums, counts):
            return {**super().metrics(sums, counts), "reports": counts["mlm_loss"]}

    monkeypatch.setitem(OBJECTIVES, "mlm", Counting)
    run = pretrain(tiny_cfg(wikitext_data, **{"objective.name": "mlm"}), tmp_path / "run")
    rows = read_metrics(run)
    assert [r["reports"] for r in rows] == [2, 2, 2]  # 2 steps a window, 1 micro-batch each
    assert all("disc_auc" not in r for r in rows)


def test_flops_count_each_objectives_networks():
    from electra.objectives.flops import official_train_flops

    base = apply_overrides(RunConfig(), {"train.steps": 100})
    electra = official_train_flops(base)
    mlm = official_train_flops(replace(base, objective=replace(base.objective, name="mlm")))
    replace_mlm = official_train_flops(
        replace(base, objective=replace(base.objective, name="replace_mlm"))
    )
    all_tokens = official_train_flops(
        replace(base, objective=replace(base.objective, name="all_tokens_mlm"))
    )
    assert mlm < electra < replace_mlm < all_tokens  # the vocabulary head at every position
    equal = replace(
        base.objective, name="two_stage", generator_hidden_fraction=1.0, two_stage_steps=40
    )
    two = replace(base, objective=equal)
    gen_only = official_train_flops(replace(two, objective=replace(equal, name="mlm")), 40)
    # Stage 2 adds a forward-only generator (1x) to a trained discriminator (2x).
    assert official_train_flops(two, 40) == pytest.approx(gen_only)
    assert generator_config(two.model, equal) == two.model
    assert official_train_flops(two) > official_train_flops(two, 40)


@pytest.mark.numeric
def test_two_tower_cloze_never_sees_the_token_it_predicts(tiny_model, special):
    from electra.model.electra.pretraining import TwoTowerClozeGenerator

    cfg = generator_config(tiny_model, ObjectiveConfig())
    gen = TwoTowerClozeGenerator(cfg).eval()
    ids, types, attention = random_batch(special, b=4)
    logits = gen(ids, types, attention)
    assert torch.isfinite(logits).all()  # padded queries included
    changed = ids.clone()
    changed[:, 5] = 7
    other = gen(changed, types, attention)
    # the towers' layers, the embeddings (3), the towers' join and the MLM head (5); the longest
    # reduction the 40 keys (above the generator's intermediate and hidden sizes)
    terms = max(cfg.intermediate_size, cfg.hidden_size, ids.shape[1])
    bound = rounding_bound(
        torch.float32,
        terms,
        encoder_depth(cfg.num_hidden_layers, extra=8),
        logits.abs().max().item(),
    )
    gap = (other - logits).abs().amax((0, 2))
    assert gap[5] <= bound  # its own token is hidden
    assert gap[4] > bound and gap[6] > bound  # the neighbours see it


@pytest.mark.numeric
def test_electric_nce_logit_and_labels_by_hand(tiny_model, special):
    ids, types, attention = random_batch(special, b=8)
    obj = _build(tiny_model, special, name="electric")
    seen = {}
    obj.discriminator.register_forward_hook(
        lambda mod, args, out: seen.update(noised=args[0], energy=out.detach())
    )
    obj.generator.register_forward_hook(lambda mod, args, out: seen.update(cloze=out.detach()))
    torch.manual_seed(0)
    out = obj(ids, types, attention)
    torch.manual_seed(0)
    _, _, d = obj.detect(ids, types, attention)  # the same draws: the verdict the step scored
    log_q = torch.log_softmax(seen["cloze"].float(), -1)
    log_q = log_q.gather(-1, seen["noised"][..., None]).squeeze(-1)
    want = seen["energy"] + log_q + math.log(0.15 / 0.85)
    # of the same forward: the log-softmax over the 100 ids and two sums
    assert_same_computation(d.logits, want, terms=100, depth=3)
    # Noise labels: every written position, a sample equal to the original included.
    noise = d.labels
    assert (noise | ~(seen["noised"] != ids)).all()  # each changed token is labelled noise
    assert (noise.sum(1) >= 1).all() and (noise.sum(1) <= 6).all()
    assert torch.equal(d.where.bool(), attention.bool())  # the loss covers every real token
    real = attention.bool()
    manual = F.binary_cross_entropy_with_logits(d.logits[real], noise[real].float())
    assert out.stats["disc_loss"] == pytest.approx(manual.item(), rel=LOSS_REL)
    assert out.stats["mlm_loss"] == pytest.approx(math.log(100), rel=0.1)  # cloze over V at init
    assert set(obj.models()) == {"discriminator"}


@pytest.mark.numeric
def test_score_text_pseudo_log_likelihood(wikitext_data, tmp_path, capsys):
    cfg = tiny_cfg(wikitext_data, **{"objective.name": "electric"})
    run = pretrain(cfg, tmp_path / "electric")
    texts = ["the cat sat on the mat", "mat the on sat cat the"]
    code = main(["score-text", "--model", str(run), "--json", *texts])
    results = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["text"] for r in results] == texts
    model, tok = load_pretrained(run)
    model.eval()
    enc = tok.encode(texts[0])
    with torch.no_grad():
        energy = model(torch.tensor([enc.ids]))[0]
    inner = energy[1:-1]  # [CLS] and [SEP] left out
    assert results[0]["tokens"] == len(inner) == 6
    # the discriminator's chain (intermediate size 64, the longest reduction) and the sum of 6
    # energies, whose size is that of the terms
    bound = rounding_bound(torch.float32, 64, DISCRIMINATOR + 1, inner.abs().sum().item())
    assert results[0]["pll"] == pytest.approx(-inner.sum().item(), abs=bound)
    assert main(["score-text", "--model", str(run), "the cat", " "]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "electra: error: text 2 is empty: pass non-empty texts" in err
    assert main(["detect", "--model", str(run), "the cat"]) == 2  # energies are no probabilities
    assert "are energies, not probabilities" in capsys.readouterr().err
    electra = pretrain(tiny_cfg(wikitext_data), tmp_path / "electra")
    assert main(["score-text", "--model", str(electra / "discriminator"), "x"]) == 2
    assert "objective.name=electra: its logits are not energies" in capsys.readouterr().err


@pytest.mark.parametrize("arm", list(RUNS))
def test_each_objective_traces_into_one_graph(tiny_model, special, arm):
    """No host syncs or data-dependent shapes: `torch.compile` captures a step whole."""
    import torch._dynamo as dynamo

    settings, _ = RUNS[arm]
    obj = _build(tiny_model, special, name=arm.split("+")[0], **settings)
    obj.begin_step(25)  # two_stage and adversarial in their second stage
    ids, types, attention = random_batch(special, b=4)
    dynamo.reset()
    explained = dynamo.explain(obj)(ids, types, attention)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


def test_config_names_match_the_registry_and_config_stays_plain_data():
    import subprocess
    import sys

    from electra.config import OBJECTIVE_NAMES, SHARINGS
    from electra.objectives import OBJECTIVES

    assert set(OBJECTIVE_NAMES) == set(OBJECTIVES)
    assert set(SHARINGS) == set().union(*(cls.sharings for cls in OBJECTIVES.values()))
    # Building a config loads neither torch nor the objectives (no import circle through them).
    code = (
        "import sys; from electra.config import preset; preset('small'); "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('electra.objectives')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
