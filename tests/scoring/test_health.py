"""Held-out health: the figures (AUC, average precision, prior gain, representation collapse), a
collapsed model detected, the records `pretrain --eval-data` writes, the end-of-run verdict, the
collapse warning, scoring a finished run or a checkpoint, and bad held-out folders."""

from __future__ import annotations

import json
import math

import pytest
import torch

import electra
from electra.config import RunConfig, apply_overrides
from electra.data.prepare import prepare
from electra.data.store import PretrainingData
from electra.data.tokenizer import save_tokenizer, train_tokenizer
from electra.engine.tracking import HELDOUT, read_metrics
from electra.errors import ElectraError
from electra.objectives import OBJECTIVES, build_objective
from electra.objectives.base import fill_objective_settings
from electra.pretraining import train as train_module
from electra.pretraining.train import pretrain
from electra.scoring.health import (
    FIXED_RATE,
    Health,
    detection,
    fixed_corruption,
    measure,
    representation,
    word_pieces,
)
from electra.scoring.run_health import score_run, with_start
from electra.scoring.verdict import in_words, judge

from ..conftest import WORDS, assert_one_line_error, run_cli, tiny_cfg
from ..numerics import binomial_bound, encoder_depth, rounding_bound

pytestmark = pytest.mark.numeric


def _corpus(path, n, seed):
    g = torch.Generator().manual_seed(seed)
    lines = []
    for _ in range(n):
        picks = torch.randint(
            len(WORDS), (int(torch.randint(8, 30, (1,), generator=g)),), generator=g
        )
        lines.append(" ".join(WORDS[i] for i in picks.tolist()))
        if len(lines) % 5 == 0:
            lines.append("")  # documents
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A training and a held-out data folder of one tokenizer, and a held-out folder of another."""
    root = tmp_path_factory.mktemp("health")
    train, held = _corpus(root / "train.txt", 600, 0), _corpus(root / "held.txt", 120, 1)
    save_tokenizer(train_tokenizer([train], vocab_size=120, min_frequency=1), root / "tok", True)
    other = train_tokenizer([held], vocab_size=90, min_frequency=1)
    save_tokenizer(other, root / "other-tok", True)
    for source, tok, out in (
        (train, "tok", "data"),
        (held, "tok", "held"),
        (held, "other-tok", "held-other"),
    ):
        prepare([str(source)], root / tok, seq_len=64, out_dir=root / out, workers=1)
    prepare([str(held)], root / "tok", seq_len=32, out_dir=root / "held-32", workers=1)
    return root


def _cfg(root, **overrides):
    return tiny_cfg(root / "data", **overrides)


# --- the figures ---------------------------------------------------------------------------


def test_constant_states_have_one_direction_and_random_ones_use_them_all():
    rms, cosine, rank = representation(torch.ones(500, 32) * 0.7)
    assert rms == pytest.approx(0.0, abs=1e-12) and cosine == pytest.approx(1.0)
    assert rank == pytest.approx(1.0)  # one direction
    g = torch.Generator().manual_seed(0)
    rms, cosine, rank = representation(torch.randn(4000, 32, generator=g))
    # Independent Gaussian states: unit RMS, cosines of mean 0 (spread 1/sqrt(32) per pair, the
    # mean of 8M pairs well under 0.01), nearly every direction used.
    assert rms == pytest.approx(1.0, rel=0.05) and abs(cosine) < 0.01 and rank > 0.9 * 32


def test_detection_figures_against_their_definitions():
    replaced = torch.tensor([True] * 20 + [False] * 80)
    r = 0.2
    prior = -(r * math.log(r) + (1 - r) * math.log(1 - r))
    # Perfect ranking, confident: AUC and AP 1, and nearly all of the prior's entropy saved.
    share, auc, ap, gain = detection(torch.where(replaced, 20.0, -20.0), replaced)
    assert (share, auc, ap) == (pytest.approx(0.2), 1.0, 1.0)
    assert gain == pytest.approx(prior, abs=1e-6)
    # Always the prior: chance ranking, no gain.
    _, auc, ap, gain = detection(torch.full((100,), math.log(r / (1 - r))), replaced)
    assert auc == 0.5 and ap == pytest.approx(0.2) and gain == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ElectraError, match="no replaced or no original"):
        detection(torch.zeros(10), torch.zeros(10, dtype=torch.bool))


def test_a_model_with_constant_final_states_is_detected_as_collapsed(folders):
    cfg = _cfg(folders)
    data = PretrainingData(folders / "held")
    objective = build_objective(cfg.model, cfg.objective, data.special, data.seq_len)
    networks = objective.models()
    rows = data.batch(torch.arange(16))
    healthy = measure(networks, objective, rows, data.special)
    assert judge([(0, healthy)]).name != "collapsed" and healthy.mean_cosine < 0.5
    # The last LayerNorm of the discriminator maps every token to its bias: one vector.
    last = networks["discriminator"].electra.encoder.layer[-1].output.LayerNorm
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.linspace(-1, 1, last.bias.numel()))
    collapsed = measure(networks, objective, rows, data.special)
    collapsed.verdict = judge([(0, healthy), (1, collapsed)]).name
    assert collapsed.verdict == "collapsed"
    assert collapsed.hidden_rms < 1e-6 and collapsed.effective_rank == pytest.approx(1.0)
    assert "collapsed" in in_words(collapsed) and "lower --train.lr" in in_words(collapsed)
    # The generator's figures do not depend on the discriminator; the discriminator's AUC does.
    assert collapsed.mlm_loss == pytest.approx(healthy.mlm_loss)
    assert networks["discriminator"].training  # the mode the networks were in is kept


def test_measuring_leaves_the_callers_rng_alone(folders):
    cfg = _cfg(folders)
    data = PretrainingData(folders / "held")
    objective = build_objective(cfg.model, cfg.objective, data.special, data.seq_len)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    first = measure(objective.models(), objective, data.batch(torch.arange(8)), data.special)
    assert torch.equal(torch.rand(3), expected)
    again = measure(objective.models(), objective, data.batch(torch.arange(8)), data.special)
    assert first == again  # the same masks and samples for a seed


# --- during pretraining ---------------------------------------------------------------------


def test_pretrain_logs_heldout_records_and_says_the_verdict(folders, tmp_path, capsys):
    cfg = _cfg(folders, **{"train.eval_data": str(folders / "held"), "train.eval_every": 3})
    cfg = apply_overrides(cfg, {"train.steps": 8})
    run = pretrain(cfg, tmp_path / "run")
    heldout = read_metrics(run, HELDOUT)
    # The untrained reference, then every 3 steps and the last.
    assert [r["step"] for r in heldout] == [0, 3, 6, 8]
    keys = {"disc_auc", "disc_ap", "disc_prior_gain", "mlm_loss", "hidden_rms", "effective_rank"}
    assert all(keys <= set(r) and r["split"] == "heldout" for r in heldout)
    assert all(0 <= r["disc_auc"] <= 1 and 0 < r["effective_rank"] <= 32 for r in heldout)
    # The training windows' records are read apart from them.
    assert all("split" not in r for r in read_metrics(run))
    err = capsys.readouterr().err
    assert f"held-out health at step 8: {heldout[-1]['verdict']}" in err
    # The same scoring afterwards, of the finished models and of a checkpoint.
    health, which = score_run(run, folders / "held")
    assert which == "the finished models"
    assert health.disc_auc == pytest.approx(heldout[-1]["disc_auc"], abs=1e-6)
    at_6, which = score_run(run, folders / "held", step=6)
    assert which == "checkpoint step 6"
    assert at_6.disc_auc == pytest.approx(heldout[2]["disc_auc"], abs=1e-6)


def test_without_eval_data_nothing_changes_but_the_hint(folders, tmp_path, capsys):
    run = pretrain(_cfg(folders), tmp_path / "run")
    assert read_metrics(run, HELDOUT) == []
    assert "held-out health: not measured; pass --eval-data" in capsys.readouterr().err


def test_the_collapse_warning_is_said_once(folders, tmp_path, capsys, monkeypatch):
    flat = Health(tokens=10, hidden_rms=0.0, mean_cosine=1.0, hidden_size=32, mlm_loss=5.0)
    flat.verdict = "collapsed"
    monkeypatch.setattr(train_module, "measure", lambda *a, **k: flat)
    cfg = _cfg(folders, **{"train.eval_data": str(folders / "held"), "train.eval_every": 2})
    pretrain(cfg, tmp_path / "run")
    err = capsys.readouterr().err
    assert err.count("warning: at step 0 the held-out health is collapsed") == 1
    assert err.count("warning:") == 1
    assert "held-out health at step 6: collapsed" in err


@pytest.mark.parametrize(
    ("held", "needle"),
    [
        ("held-other", "was prepared with another tokenizer than the run's"),
        ("held-32", "was prepared with seq len 32, the run's data with 64"),
        ("missing", "does not exist"),
        ("empty", "has no meta.json"),
    ],
)
def test_bad_heldout_folders_are_one_line_and_write_nothing(folders, tmp_path, held, needle):
    (folders / "empty").mkdir(exist_ok=True)
    cfg = _cfg(folders, **{"train.eval_data": str(folders / held)})
    with pytest.raises(ElectraError, match=needle) as e:
        pretrain(cfg, tmp_path / "run")
    assert "\n" not in str(e.value) and str(folders / held) in str(e.value)
    assert not (tmp_path / "run").exists()


def test_scoring_a_folder_that_is_not_a_run(folders, tmp_path):
    with pytest.raises(ElectraError, match="is not a pretraining run's folder"):
        score_run(tmp_path, folders / "held")


def test_the_health_command_and_its_errors(folders, tmp_path, capsys):
    run = pretrain(_cfg(folders), tmp_path / "run")
    capsys.readouterr()
    code, out, _ = run_cli(capsys, "health", run, "--data", folders / "held")
    assert code == 0 and "(the finished models) on" in out
    assert out.splitlines()[1].split(":")[0] in ("learned", "not yet", "collapsed")
    code, out, _ = run_cli(capsys, "health", run, "--data", folders / "held", "--step", 4, "--json")
    record = json.loads(out)
    assert code == 0 and record["scored"] == "checkpoint step 4" and "disc_auc" in record
    assert record == electra.health(run, folders / "held", step=4)
    for argv, needle in (
        (["--data", folders / "held-other"], "was prepared with another tokenizer"),
        (["--data", folders / "held", "--rows", 0], "--rows 0: score at least 1"),
        (["--data", folders / "held", "--step", 3], "has no checkpoint at step 3"),
    ):
        assert_one_line_error(*run_cli(capsys, "health", run, *argv)[::2], needle)


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_is_measured(folders, name):
    """A discriminator is judged on its generator's samples; an MLM model (Replace MLM's too) by
    its own masked-LM loss; Electric's energy model by its states alone."""
    cfg, _ = fill_objective_settings(
        apply_overrides(_cfg(folders), {"objective.name": name}), given=()
    )
    data = PretrainingData(folders / "held")
    objective = build_objective(cfg.model, cfg.objective, data.special, data.seq_len)
    h = measure(objective.models(), objective, data.batch(torch.arange(8)), data.special)
    judged = "discriminator" in objective.models() and name != "electric"
    assert (h.disc_auc is not None) == judged
    assert (h.mlm_loss is not None) == (name != "electric")
    assert h.effective_rank > 1 and h.hidden_rms > 0
    assert judge([(0, h)]).name in ("learned", "not yet")


# --- the fixed corruption ------------------------------------------------------------------------


def test_the_fixed_corruption_depends_on_the_rows_alone(folders):
    data = PretrainingData(folders / "held")
    rows = data.batch(torch.arange(32))
    torch.manual_seed(1)
    first = fixed_corruption(rows, data.special)
    torch.manual_seed(2)  # the caller's RNG plays no part
    assert torch.equal(fixed_corruption(rows, data.special), first)
    ids, words = (
        rows["input_ids"],
        word_pieces(rows["input_ids"], rows["attention_mask"], data.special),
    )
    changed = first != ids
    assert not changed[~words].any()  # specials and padding stay
    # FIXED_RATE of the word pieces are chosen, and a chosen one changes unless its draw is the
    # same piece, with chance sum(p_i^2) over the rows' unigram shares p_i: the changed share is
    # a binomial proportion of mean FIXED_RATE * (1 - sum p^2); 5 standard deviations around it.
    n = int(words.sum())
    p = torch.bincount(ids[words]).double() / n
    expected = FIXED_RATE * (1 - float((p * p).sum()))
    assert abs(float(changed.sum()) / n - expected) < binomial_bound(expected, n)
    assert set(first[changed].tolist()) <= set(ids[words].tolist())  # the rows' own pieces


def test_the_same_weights_score_the_same_on_the_fixed_corruption(folders):
    """Two runs (other seeds, other generators) holding one discriminator: the fixed figure is
    the same, the own-generator figure is not comparable."""
    cfg = _cfg(folders)
    data = PretrainingData(folders / "held")
    rows = data.batch(torch.arange(32))
    torch.manual_seed(0)
    a = build_objective(cfg.model, cfg.objective, data.special, data.seq_len)
    torch.manual_seed(1)
    b = build_objective(cfg.model, cfg.objective, data.special, data.seq_len)
    b.discriminator.load_state_dict(a.discriminator.state_dict())
    ha = measure(a.models(), a, rows, data.special, seed=0)
    hb = measure(b.models(), b, rows, data.special, seed=5)
    assert ha.disc_auc_fixed == hb.disc_auc_fixed  # the same fp32 computation, bit for bit
    assert ha.disc_auc != hb.disc_auc
    # The records and `electra health --json` carry it.
    assert "disc_auc_fixed" in ha.record() and 0 <= ha.disc_auc_fixed <= 1


# --- the verdict remembers -----------------------------------------------------------------------


def test_the_health_command_judges_against_the_runs_start(folders, tmp_path):
    """A run trained without held-out text: `electra health` rebuilds its start from the run's
    seed, which measures as the step-0 record a run with --eval-data logs."""
    held = str(folders / "held")
    logged = pretrain(_cfg(folders, **{"train.eval_data": held}), tmp_path / "logged")
    start = read_metrics(logged, HELDOUT)[0]
    assert start["step"] == 0 and len(start["rows"]) == 16
    plain = pretrain(_cfg(folders), tmp_path / "plain")
    data = PretrainingData(folders / "held")
    cfg = RunConfig.load(plain / "config.json")
    rows = data.batch(torch.arange(len(data)))
    (step, rebuilt), *_ = with_start([], cfg, data, rows, cfg.train.seed)
    assert step == 0
    # The same weights, perhaps through another kernel path (the run's runtime prepares its
    # networks): the states agree to fp32 rounding over the encoder's reductions, and the figures
    # smooth in them to as much relative to their size. (The AUCs, by ranks, may swap a near tie.)
    bound = rounding_bound(torch.float32, terms=64, depth=encoder_depth(2, extra=2))
    for key in ("mean_cosine", "effective_rank", "mlm_loss"):
        assert getattr(rebuilt, key) == pytest.approx(start[key], rel=bound), key
    # Both commands judge the finished models against that start.
    for run in (logged, plain):
        health, _ = score_run(run, held)
        assert health.verdict in ("learned", "not yet", "collapsed")
    # A run whose held-out history was logged is judged on it: the last record's verdict again.
    health, _ = score_run(logged, held)
    assert health.verdict == read_metrics(logged, HELDOUT)[-1]["verdict"]


def test_a_resumed_run_keeps_its_history(folders, tmp_path, monkeypatch):
    """A run that collapsed before it was stopped is still judged collapsed after resuming: the
    verdict reads the history the first invocation logged."""
    held = str(folders / "held")
    cfg = _cfg(folders, **{"train.eval_data": held, "train.eval_every": 2, "train.stop_after": 4})
    seen = []
    real = train_module.measure

    def measured(*args, **kwargs):  # the measurements at steps 2 and 4 collapse
        h = real(*args, **kwargs)
        if len(seen) in (1, 2):
            h.mean_cosine = 0.95
        seen.append(h)
        return h

    monkeypatch.setattr(train_module, "measure", measured)
    run = pretrain(cfg, tmp_path / "run")
    assert [r["verdict"] for r in read_metrics(run, HELDOUT)][1:] == ["collapsed", "collapsed"]
    monkeypatch.setattr(train_module, "measure", real)
    cfg = apply_overrides(cfg, {"train.stop_after": 6})
    pretrain(cfg, run, resume=True)
    records = read_metrics(run, HELDOUT)
    assert [r["step"] for r in records] == [0, 2, 4, 6]
    # Step 6's own figures may pass; its history says whether it won back what it lost.
    start, last = Health.from_record(records[0]), Health.from_record(records[-1])
    expected = judge(
        [
            (0, start),
            (2, Health.from_record(records[1])),
            (4, Health.from_record(records[2])),
            (6, last),
        ]
    )
    assert last.verdict == expected.name and "collapsed" in (last.verdict + last.verdict_reason)


def test_a_discriminator_that_sees_every_replacement_scores_one_on_both(folders):
    """An oracle (logit high exactly where a token differs from the clean rows): both AUCs are 1,
    so the labels line up with the tokens; the same oracle on the clean rows answers nothing."""
    cfg = _cfg(folders)
    data = PretrainingData(folders / "held")
    rows = data.batch(torch.arange(32))
    objective = build_objective(cfg.model, cfg.objective, data.special, data.seq_len)
    clean = rows["input_ids"]
    objective.discriminator.forward = lambda ids, types, mask: 10.0 * (ids != clean).float()
    h = measure(objective.models(), objective, rows, data.special, chunk=32)
    assert h.disc_auc == 1.0 and h.disc_auc_fixed == 1.0
