"""Every pretraining run folder can go forward (issue 46): a diverging run skips and counts its
steps without crashing in its statistics, a run killed before its first checkpoint resumes from
step 0, `--overwrite` starts a run again, what killed commands left is cleaned (never under a live
process), a full disk as torch reports it is one line, and `--resume` refuses a setting that
would change the run."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from sklearn.metrics import roc_auc_score

from electra.config import ObjectiveConfig, RunConfig
from electra.data.tokenizer import save_tokenizer, train_tokenizer
from electra.engine.tracking import read_metrics
from electra.errors import ElectraError
from electra.folders.checkpoint import checkpoint_dirs, is_complete
from electra.hf.export import export_hf
from electra.locks import RunLock
from electra.objectives.metrics import (
    AUC_HISTOGRAMS,
    NAN_BIN,
    auc_from_histograms,
    auc_histograms,
    auc_stat,
    detection_metrics,
)
from electra.pretraining.train import pretrain

from ..conftest import assert_one_line_error, run_cli, tiny_cfg
from ..numerics import rounding_bound

# The tiny model of `tiny_cfg`, as flags.
TINY_FLAGS = [
    "--preset", "tiny", "--device", "cpu", "--seq-len", "64", "--batch-size", "8",
    "--model.hidden_size", "32", "--model.embedding_size", "16", "--model.num_hidden_layers", "2",
    "--model.num_attention_heads", "2", "--model.intermediate_size", "64",
    "--train.warmup_steps", "2", "--train.log_every", "2", "--train.save_every", "2",
    "--train.tensorboard", "false", "--no-progress",
]  # fmt: skip


@pytest.fixture(autouse=True)
def not_restarted(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)


# --- (a) a diverging run -------------------------------------------------------------------------


def test_nan_and_infinite_logits_pass_through_the_statistics():
    """NaN scores go to their own bin (counted, out of the AUC); infinite ones are p = 0 or 1."""
    torch.manual_seed(0)
    labels = torch.rand(4, 16) < 0.3
    logits = torch.randn(4, 16) + 2.0 * labels
    mask = torch.ones(4, 16, dtype=torch.bool)
    bad = logits.clone()
    bad[0, :3] = math.nan
    bad[1, 0], bad[1, 1] = math.inf, -math.inf
    pos, neg = auc_histograms(bad, labels, mask)
    assert int(pos[NAN_BIN] + neg[NAN_BIN]) == 3
    assert int(pos.sum() + neg.sum()) == mask.sum()  # every real token counted once
    finite = ~bad.isnan()
    expected = roc_auc_score(labels[finite].numpy(), bad[finite].clamp(-50, 50).numpy())
    # Binning keeps the order of scores in different bins and makes a tie (counted half) of a
    # replaced and an original score in one bin: the AUC moves by at most half their share.
    p, n = pos[:NAN_BIN].double(), neg[:NAN_BIN].double()
    binned_ties = 0.5 * float((p * n).sum() / (p.sum() * n.sum()))
    assert auc_from_histograms(pos, neg) == pytest.approx(
        expected, abs=binned_ties + rounding_bound(torch.float64, mask.numel() ** 2)
    )
    metrics = detection_metrics({AUC_HISTOGRAMS: auc_stat(bad, labels, mask)}, {})
    assert metrics["disc_nan_scores"] == 3 and math.isfinite(metrics["disc_auc"])
    # All NaN (a step that diverged everywhere): no AUC, every token counted.
    nan = torch.full_like(logits, math.nan)
    metrics = detection_metrics({AUC_HISTOGRAMS: auc_stat(nan, labels, mask)}, {})
    assert math.isnan(metrics["disc_auc"]) and metrics["disc_nan_scores"] == 64
    clean = detection_metrics({AUC_HISTOGRAMS: auc_stat(logits, labels, mask)}, {})
    assert "disc_nan_scores" not in clean  # the column appears only where it counts something


def test_a_run_at_learning_rate_1e6_skips_counts_and_stops(wikitext_data, tmp_path):
    """The weights blow up, the logits turn NaN: steps are skipped and counted (no IndexError in
    the AUC histograms), and max_skipped_steps in a row stop the run with its documented error."""
    settings = {
        "train.lr": 1e6,
        "train.steps": 40,
        "train.log_every": 1,
        "train.max_skipped_steps": 3,
    }
    run = tmp_path / "run"
    with pytest.raises(ElectraError) as e:
        pretrain(tiny_cfg(wikitext_data, **settings), run)
    assert "3 consecutive steps had a non-finite loss or gradient" in str(e.value)
    assert "(train.max_skipped_steps=3)" in str(e.value) and f"--resume {run}" in str(e.value)
    rows = read_metrics(run)
    assert [r["skipped_steps"] for r in rows[-3:]] == [1, 1, 1]
    assert any(r.get("disc_nan_scores") for r in rows)  # NaN scores counted, not fatal
    for path in checkpoint_dirs(run):  # no checkpoint amid skipped steps
        assert int(path.name.split("_")[1]) <= rows[-3]["step"] - 1


# --- (b) a run killed before its first checkpoint -------------------------------------------------


def test_a_run_killed_before_its_first_checkpoint_goes_forward(wikitext_data, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["pretrain", *TINY_FLAGS, "--data", str(wikitext_data), "--out", str(run)]
    argv += ["--steps", "100000", "--train.save_every", "100000"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TORCHELASTIC_RESTART_COUNT", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "electra.cli", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run / "metrics.jsonl").is_file():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no logging step in 2 minutes"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert (run / "config.json").is_file() and not checkpoint_dirs(run)
    # Started again without --resume: refused, naming both ways on.
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, "already exists", f"--resume {run}", "--overwrite")
    # Resumed: from step 0, with its saved config, said on stderr.
    (run / "tensorboard").mkdir(exist_ok=True)
    (run / "tensorboard" / "events.out.tfevents.killed").write_bytes(b"steps 1-156")
    code, _, err = run_cli(capsys, "pretrain", "--resume", run, "--steps", 4)
    assert code == 0, err
    assert f"no checkpoint in {run} yet: starting it again from step 0 with its saved config" in err
    assert "done: 4 steps" in err
    assert [r["step"] for r in read_metrics(run)] == [2, 4]  # the killed run's rows dropped
    assert not (run / "tensorboard" / "events.out.tfevents.killed").exists()  # and its curves
    assert is_complete(checkpoint_dirs(run)[-1])


def test_a_folder_without_a_config_has_nothing_to_resume(wikitext_data, tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(
        ElectraError,
        match=r"has no checkpoint to resume from \(nor a config.json\): start it without",
    ):
        pretrain(tiny_cfg(wikitext_data), tmp_path / "run", resume=True)


# --- (c) --overwrite ------------------------------------------------------------------------------


def test_overwrite_starts_a_run_again_but_not_under_a_live_one(wikitext_data, tmp_path, capsys):
    run = pretrain(tiny_cfg(wikitext_data, **{"train.steps": 4}), tmp_path / "run")
    with RunLock(run), pytest.raises(ElectraError, match=r"is in use by pid \d+ on "):
        pretrain(tiny_cfg(wikitext_data, **{"train.steps": 2}), run, overwrite=True)
    assert [p.name for p in checkpoint_dirs(run)] == ["step_00000002", "step_00000004"]
    capsys.readouterr()
    pretrain(tiny_cfg(wikitext_data, **{"train.steps": 2}), run, overwrite=True)
    err = capsys.readouterr().err
    assert (
        f"--overwrite: removed the earlier run in {run}, its checkpoints up to step_00000004" in err
    )
    assert [p.name for p in checkpoint_dirs(run)] == ["step_00000002"]
    assert [r["step"] for r in read_metrics(run)] == [2]
    with pytest.raises(ElectraError, match="--resume continues a run and --overwrite starts"):
        pretrain(tiny_cfg(wikitext_data), run, resume=True, overwrite=True)


def test_overwrite_replaces_only_a_run_folder(wikitext_data, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    argv = ["pretrain", *TINY_FLAGS, "--data", wikitext_data, "--steps", 2]
    code, _, err = run_cli(capsys, *argv, "--out", mine, "--overwrite")
    assert_one_line_error(code, err, "--overwrite replaces only a run folder", "'notes.txt'")
    assert (mine / "notes.txt").read_text() == "keep me"
    # Nor one the run reads from: its data inside the folder.
    run = tmp_path / "run"
    shutil.copytree(wikitext_data, run / "checkpoints" / "data")
    code, _, err = run_cli(
        capsys, *argv[:-4], "--data", run / "checkpoints" / "data", "--steps", 2, "--out", run,
        "--overwrite",
    )  # fmt: skip
    assert_one_line_error(code, err, "--overwrite would remove")


# --- (d) what killed commands left ---------------------------------------------------------------


def test_leftovers_are_cleaned_on_the_next_run_but_not_under_a_live_one(
    wikitext_data, tmp_path, capsys
):
    run = pretrain(tiny_cfg(wikitext_data, **{"train.stop_after": 2}), tmp_path / "run")
    left = [
        run / "checkpoints" / ".step_00000004.tmp",  # a checkpoint cut short (atomic_dir)
        run / ".discriminator.tmp",  # a model folder cut short
        run / ".metrics.jsonl.4242.tmp",  # a file cut short (atomic_path)
    ]
    for path in left[:2]:
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"partial")
    left[2].write_text("{}")
    # Replaces killed after they put the old one aside (replace_dir): with the new one in place
    # the old one goes; without, it comes back (here, the checkpoint the run resumes from).
    replaced = run / ".config.json.old-4242"
    replaced.write_text("{}")
    aside = run / "checkpoints" / ".step_00000002.old-4243"
    (run / "checkpoints" / "step_00000002").rename(aside)
    left += [replaced, aside]
    with RunLock(run), pytest.raises(ElectraError, match="is in use by"):
        pretrain(tiny_cfg(wikitext_data), run, resume=True)
    assert all(p.exists() for p in left)  # a live process may be writing them
    capsys.readouterr()
    pretrain(tiny_cfg(wikitext_data), run, resume=True)
    err = capsys.readouterr().err
    assert not any(p.exists() for p in left)
    said = [line for line in err.splitlines() if line.startswith("removed what a killed run")]
    assert len(said) == 1 and all(str(p.relative_to(run)) in said[0] for p in left[:3])
    assert f"note: put back {run / 'checkpoints' / 'step_00000002'}" in err
    assert "note: removed .config.json.old-4242" in err
    assert "starting it again from step 0" not in err  # resumed from the checkpoint put back
    assert (run / ".lock").is_file() and (run / "discriminator").is_dir()


# --- item 5: a full disk, as torch.save reports it -----------------------------------------------


def test_a_full_disk_in_torch_save_is_one_line_and_keeps_the_last_checkpoint(
    wikitext_data, tmp_path, monkeypatch
):
    real_save, calls = torch.save, []

    def disk_fills(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:  # the second checkpoint's state.pt, as torch fails on a full disk
            raise RuntimeError(
                "[enforce fail at inline_container.cc:626] . PytorchStreamWriter failed writing "
                "file data/0: file write failed"
            )
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_fills)
    run = tmp_path / "run"
    with pytest.raises(ElectraError) as e:
        pretrain(tiny_cfg(wikitext_data), run)
    message = str(e.value)
    assert message.startswith(f"cannot write checkpoint {run / 'checkpoints' / 'step_00000004'} (")
    assert "PytorchStreamWriter failed writing file data/0: file write failed" in message
    assert "enforce fail" not in message and "\n" not in message
    assert "step_00000002, is intact" in message and f"--resume {run}" in message
    assert [p.name for p in checkpoint_dirs(run)] == ["step_00000002"]
    assert not list((run / "checkpoints").glob(".*"))  # no partial folder left behind


# --- item 6: --resume refuses a setting that changes the run -------------------------------------


@pytest.fixture
def stopped_run(wikitext_data, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["pretrain", *TINY_FLAGS, "--data", wikitext_data, "--out", run, "--steps", 6]
    code, _, err = run_cli(capsys, *argv, "--train.stop_after", 2)
    assert code == 0, err
    return run


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--model.hidden_size", "48"], "model.hidden_size is 32 in the run but 48 here"),
        (["--batch-size", "4"], "train.batch_size is 8 in the run but 4 here"),
        (["--model.arch", "modernbert"], "model.arch is 'electra' in the run but 'modernbert'"),
        (["--preset", "small"], "preset is 'tiny' in the run but 'small' here"),
        (["--seed", "7"], "train.seed is 42 in the run but 7 here"),
        (["--objective.mask_prob", "0.2"], "objective.mask_prob is 0.15 in the run but 0.2"),
    ],
    ids=["hidden_size", "batch_size", "arch", "preset", "seed", "mask_prob"],
)
def test_resume_refuses_a_setting_that_changes_the_run(stopped_run, capsys, flags, named):
    before = (stopped_run / "config.json").read_bytes()
    code, _, err = run_cli(capsys, "pretrain", "--resume", stopped_run, *flags)
    assert_one_line_error(code, err, named, "only train.steps", "may change on resume")
    assert (stopped_run / "config.json").read_bytes() == before  # nothing rewritten
    assert [p.name for p in checkpoint_dirs(stopped_run)] == ["step_00000002"]


def test_resume_refuses_other_data_and_another_folder(stopped_run, tmp_path, capsys):
    saved = RunConfig.load(stopped_run / "config.json")
    other = tmp_path / "other"
    shutil.copytree(saved.data.path, other)
    meta = json.loads((other / "meta.json").read_text())
    meta["num_examples"] = meta["num_examples"] - 1  # another data set, of the same tokenizer
    (other / "meta.json").write_text(json.dumps(meta))
    code, _, err = run_cli(capsys, "pretrain", "--resume", stopped_run, "--data", other)
    assert_one_line_error(code, err, "data.path is", f"but '{other}' here")
    code, _, err = run_cli(capsys, "pretrain", "--resume", stopped_run, "--out", tmp_path / "x")
    assert_one_line_error(code, err, "name two run folders", "drop --out")
    assert not (tmp_path / "x").exists()


def test_resume_takes_and_records_what_may_change(stopped_run, tmp_path, capsys):
    """More steps, another learning rate, and the same data moved elsewhere: said, trained
    with, and recorded in the run's config.json (rewritten atomically, as at every start)."""
    saved = RunConfig.load(stopped_run / "config.json")
    moved = tmp_path / "moved"
    shutil.copytree(saved.data.path, moved)
    code, _, err = run_cli(
        capsys, "pretrain", "--resume", stopped_run, "--steps", 4, "--train.lr", "1e-3",
        "--data", moved,
    )  # fmt: skip
    assert code == 0, err
    assert f"resuming {stopped_run} with " in err and f"train.lr {saved.train.lr} -> 0.001" in err
    assert "train.steps 6 -> 4" in err
    now = RunConfig.load(stopped_run / "config.json")
    assert (now.train.lr, now.train.steps, now.data.path) == (1e-3, 4, str(moved))
    assert now.train.stop_after is None  # the stop was the first invocation's
    assert now.model == saved.model and now.train.batch_size == saved.train.batch_size
    assert RunConfig.load(checkpoint_dirs(stopped_run)[-1] / "config.json").train.lr == 1e-3
    assert "done: 4 steps" in err


# --- item 8: the README's sharing name -------------------------------------------------------------


def test_sharing_full_is_all():
    assert ObjectiveConfig(sharing="full").sharing == "all"
    assert ObjectiveConfig(sharing="embedding").sharing == "embeddings"
    with pytest.raises(ElectraError, match=r"choose one of none, embeddings, all, gdes \(full for"):
        ObjectiveConfig(sharing="tied")


def test_a_folder_holding_only_leftovers_takes_a_new_run(wikitext_data, tmp_path, capsys):
    """A command killed before it wrote anything but a temporary leaves no run to continue: the
    folder takes a new run, which clears the leftover."""
    run = tmp_path / "run"
    (run / ".discriminator.tmp").mkdir(parents=True)
    pretrain(tiny_cfg(wikitext_data, **{"train.stop_after": 1}), run)
    assert not (run / ".discriminator.tmp").exists()
    assert "removed what a killed run left" in capsys.readouterr().err


def test_a_swapped_run_tokenizer_is_refused_by_export_and_resume(wikitext_data, tmp_path):
    """RUN/tokenizer replaced by another run's: `export --step` would ship the weights with the
    wrong vocabulary (and stamp its fingerprint on them), `--resume` train on with it."""
    run = pretrain(tiny_cfg(wikitext_data, **{"train.stop_after": 2}), tmp_path / "run")
    corpus = tmp_path / "other.txt"
    corpus.write_text(" ".join(f"zebra{i % 31} quux{i % 7}" for i in range(2000)))
    shutil.rmtree(run / "tokenizer")
    other = train_tokenizer([corpus], vocab_size=60, min_frequency=1)
    save_tokenizer(other, run / "tokenizer", lowercase=True)
    with pytest.raises(ElectraError, match="are of different vocabularies"):
        export_hf(run, tmp_path / "hf", step=2)
    assert not (tmp_path / "hf").exists()
    with pytest.raises(ElectraError, match="copy it back if it was replaced"):
        pretrain(tiny_cfg(wikitext_data), run, resume=True)
