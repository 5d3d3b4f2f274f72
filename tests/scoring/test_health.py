"""Held-out health: the figures (AUC, average precision, prior gain, representation collapse), a
collapsed model detected, the records `pretrain --eval-data` writes, the end-of-run verdict, the
collapse warning, scoring a finished run or a checkpoint, and bad held-out folders."""

from __future__ import annotations

import json
import math

import pytest
import torch

import electra
from electra.config import apply_overrides
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
    Health,
    detection,
    in_words,
    measure,
    representation,
    score_run,
    verdict,
)

from ..conftest import WORDS, assert_one_line_error, run_cli, tiny_cfg

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


def test_constant_states_are_collapsed_and_random_ones_are_not():
    rms, cosine, rank = representation(torch.ones(500, 32) * 0.7)
    assert rms == pytest.approx(0.0, abs=1e-12) and cosine == pytest.approx(1.0)
    assert rank == pytest.approx(1.0)  # one direction
    assert verdict(Health(tokens=500, hidden_rms=rms, mean_cosine=cosine)) == "collapsed"
    g = torch.Generator().manual_seed(0)
    rms, cosine, rank = representation(torch.randn(4000, 32, generator=g))
    # Independent Gaussian states: unit RMS, cosines of mean 0 (spread 1/sqrt(32) per pair, the
    # mean of 8M pairs well under 0.01), nearly every direction used.
    assert rms == pytest.approx(1.0, rel=0.05) and abs(cosine) < 0.01 and rank > 0.9 * 32
    healthy = Health(tokens=4000, hidden_rms=rms, mean_cosine=cosine, disc_auc=0.8)
    healthy.disc_prior_gain = 0.05
    assert verdict(healthy) == "learned"
    healthy.disc_auc = 0.52
    assert verdict(healthy) == "not yet"


def test_a_discriminator_that_gave_up_on_one_direction_is_collapsed():
    g = torch.Generator().manual_seed(0)
    states = torch.randn(32, generator=g) * 3 + 0.3 * torch.randn(2000, 32, generator=g)
    rms, cosine, rank = representation(states)
    assert cosine > 0.9 and rank < 0.5 * 32
    h = Health(tokens=2000, hidden_rms=rms, mean_cosine=cosine, disc_auc=0.54)
    h.disc_prior_gain = 0.002  # its answers are the replaced share's
    assert verdict(h) == "collapsed"
    h.disc_auc, h.disc_prior_gain = 0.75, 0.06  # still reading its input: anisotropic, not dead
    assert verdict(h) == "learned"
    # An MLM model's states alike (a post-LayerNorm encoder's are) are no verdict on their own.
    assert verdict(Health(tokens=2000, hidden_rms=rms, mean_cosine=cosine)) == "learned"


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
    assert healthy.verdict != "collapsed" and healthy.mean_cosine < 0.5
    # The last LayerNorm of the discriminator maps every token to its bias: one vector.
    last = networks["discriminator"].electra.encoder.layer[-1].output.LayerNorm
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.linspace(-1, 1, last.bias.numel()))
    collapsed = measure(networks, objective, rows, data.special)
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
    assert h.effective_rank > 1 and h.hidden_rms > 0 and h.verdict in ("learned", "not yet")
