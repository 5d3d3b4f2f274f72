"""Training that survives faults: checksummed checkpoints, a full disk, a second run on the same
folder, and steps with a non-finite loss or gradient."""

from __future__ import annotations

import errno
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from electra.config import TrainConfig
from electra.engine.optim import build_optimizer
from electra.engine.step import Window, train_step
from electra.engine.tracking import read_metrics
from electra.errors import ElectraError
from electra.folders import checkpoint
from electra.folders.checkpoint import checkpoint_dirs, is_complete
from electra.locks import RunLock
from electra.objectives.electra import ReplacedTokenDetection
from electra.pretraining.train import pretrain

from ..conftest import tiny_cfg


def test_a_corrupt_or_partial_checkpoint_is_never_resumed_from(wikitext_data, tmp_path, capsys):
    run = pretrain(tiny_cfg(wikitext_data, **{"train.stop_after": 4}), tmp_path / "run")
    older, newest = checkpoint_dirs(run)
    assert is_complete(older) and is_complete(newest)
    # A flipped byte in the newest, and a folder some crash left without its checksums.
    data = bytearray((newest / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (newest / "model.safetensors").write_bytes(bytes(data))
    partial = run / "checkpoints" / "step_00000005"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"")
    assert not is_complete(newest) and not is_complete(partial)
    resumed = pretrain(tiny_cfg(wikitext_data), run, resume=True)
    err = capsys.readouterr().err
    assert f"skipping checkpoint {partial}" in err and f"skipping checkpoint {newest}" in err
    # It went on from step 2: steps 3-6 again, so the log holds each step once.
    assert [r["step"] for r in read_metrics(resumed)] == [2, 4, 6]
    assert is_complete(checkpoint_dirs(resumed)[-1])


def test_resume_refuses_a_run_with_only_broken_checkpoints(wikitext_data, tmp_path):
    run = pretrain(tiny_cfg(wikitext_data, **{"train.stop_after": 2}), tmp_path / "run")
    (checkpoint_dirs(run)[0] / "checksums.json").unlink()
    with pytest.raises(ElectraError, match="has only incomplete checkpoints to resume from"):
        pretrain(tiny_cfg(wikitext_data), run, resume=True)


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one(
    wikitext_data, tmp_path, monkeypatch
):
    real_save = checkpoint.save_file
    calls = []

    def disk_fills(tensors, path):
        calls.append(path)
        if len(calls) == 2:  # the second checkpoint: a partial file, then ENOSPC
            Path(path).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(tensors, path)

    monkeypatch.setattr(checkpoint, "save_file", disk_fills)
    run = tmp_path / "run"
    with pytest.raises(ElectraError) as e:
        pretrain(tiny_cfg(wikitext_data), run)
    assert "No space left on device" in str(e.value)
    assert "step_00000002, is intact" in str(e.value) and f"--resume {run}" in str(e.value)
    assert [p.name for p in checkpoint_dirs(run)] == ["step_00000002"]
    assert is_complete(checkpoint_dirs(run)[0])
    assert not list((run / "checkpoints").glob(".*"))  # no partial folder left behind


def test_two_runs_cannot_write_one_folder(wikitext_data, tmp_path):
    run = tmp_path / "run"
    # As if another run held it:
    with RunLock(run), pytest.raises(ElectraError, match=r"is in use by pid \d+ on "):
        pretrain(tiny_cfg(wikitext_data), run)
    assert not (run / "config.json").exists()
    pretrain(tiny_cfg(wikitext_data), run)  # the holder gone, the folder is free again


def test_a_non_finite_step_changes_nothing():
    """The skipped update leaves weights and optimizer moments bit-identical, on the device."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = build_optimizer(
        [{"params": list(model.parameters()), "weight_decay": 0.01}],
        TrainConfig(),
        torch.device("cpu"),
    )

    def step(scale: float) -> torch.Tensor:
        def loss_fn(x):
            from electra.objectives.base import StepOutput

            loss = model(x).pow(2).mean() * scale
            return StepOutput(loss, {})

        batch = {"input_ids": torch.ones(2, 4)}
        return train_step(
            lambda input_ids: loss_fn(input_ids),
            optimizer,
            list(model.parameters()),
            [batch],
            Window(),
            precision="fp32",
            clip_norm=TrainConfig().clip_norm,
        )

    assert not step(1.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    moments = {k: v.clone() for k, v in optimizer.state[model.weight].items()}
    for bad in (math.nan, math.inf):
        assert step(bad)
        assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
        state = optimizer.state[model.weight]
        assert all(torch.equal(state[k], v) for k, v in moments.items())
    assert not step(1.0)
    assert not torch.equal(model.weight, before["weight"])


def test_consecutive_non_finite_steps_stop_the_run(wikitext_data, tmp_path, monkeypatch):
    """From step 3 on the loss is NaN: steps are skipped and counted, and the third in a row
    stops the run, its last checkpoint the one from before."""
    forward = ReplacedTokenDetection.forward
    calls = []

    def poisoned(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        calls.append(1)
        if len(calls) > 2:
            out.loss = out.loss * math.nan
        return out

    monkeypatch.setattr(ReplacedTokenDetection, "forward", poisoned)
    cfg = {"train.log_every": 1, "train.max_skipped_steps": 3, "train.steps": 20}
    run = tmp_path / "run"
    with pytest.raises(ElectraError) as e:
        pretrain(tiny_cfg(wikitext_data, **cfg), run)
    assert "stopped at step 5: 3 consecutive steps had a non-finite loss or gradient" in str(
        e.value
    )
    assert "the last checkpoint, step 2, is from before them" in str(e.value)
    rows = read_metrics(run)
    assert [r["skipped_steps"] for r in rows] == [0, 0, 1, 1, 1]
    assert rows[-1]["grad_norm"] is None and math.isfinite(rows[1]["grad_norm"])  # NaN -> null
    assert [p.name for p in checkpoint_dirs(run)] == ["step_00000002"]
    assert not (run / "discriminator").exists()
    weights = load_file(checkpoint_dirs(run)[0] / "model.safetensors")
    assert all(torch.isfinite(v).all() for v in weights.values())
