"""Schedules that fit the run (issue 59, item 1): a warm-up left to a preset never takes more than
WARMUP_SHARE of a run's steps, a schedule that keeps the rate far under its peak is said at the
start, and a continued run takes continued pretraining's rate and its family's preset."""

from __future__ import annotations

import pytest

from electra.config import apply_overrides, preset
from electra.engine.optim import learning_rate
from electra.pretraining.resolve import (
    CONTINUE_HEAD_LR_SCALE,
    CONTINUE_LR,
    WARMUP_SHARE,
    continuation_preset,
    peak_rate,
    resolve_run,
    run_config,
)

from ..conftest import tiny_cfg
from ..model.hf.test_hf_pretraining import corpus, mlm_folder  # noqa: F401 (a fixture)


def resolved(cfg, given=None):
    said = []
    return resolve_run(cfg, given=given, note=said.append).cfg, said


@pytest.mark.parametrize(("steps", "warmup"), [(150, 10_000), (10, 3), (1000, 999), (7, 100)])
def test_peak_rate_is_the_schedules_highest(steps, warmup):
    """The closed form against the schedule itself, step by step: the same float operations
    where the peak falls on a step, else never below a step's rate."""
    highest = max(learning_rate(s, 1e-3, steps, warmup) for s in range(steps))
    assert highest <= peak_rate(1e-3, steps, warmup) * (1 + 4 * 2.0**-52)
    assert peak_rate(1e-3, steps, warmup) - highest <= 1e-3 / min(steps, warmup)


def test_a_presets_warmup_is_cut_to_a_share_of_a_short_run(wikitext_data):
    """small's 10,000-step warm-up in a 150-step run is 15 steps, said; the issue's run never
    passed 7.5e-6 of its 5e-4."""
    cfg = apply_overrides(preset("small"), {"data.path": str(wikitext_data), "train.steps": 150})
    assert peak_rate(cfg.train.lr, 150, cfg.train.warmup) < 7.6e-6
    cfg, said = resolved(cfg, given={"data.path", "train.steps"})
    assert cfg.train.warmup == round(WARMUP_SHARE * 150) == 15
    assert any("warm-up 15 steps" in line for line in said), said
    assert peak_rate(cfg.train.lr, 150, cfg.train.warmup) == pytest.approx(5e-4 * 0.9)


def test_a_warmup_the_caller_sets_is_kept_and_warned_of(wikitext_data):
    cfg = tiny_cfg(wikitext_data, **{"train.steps": 150, "train.warmup_steps": 1000})
    cfg, said = resolved(cfg, given={"train.warmup_steps", "train.steps", "data.path"})
    assert cfg.train.warmup == 1000
    (line,) = [s for s in said if s.startswith("warning:")]
    assert "never passes" in line and "train.warmup_steps" in line
    cfg = tiny_cfg(wikitext_data, **{"train.steps": 150, "train.warmup_steps": 10})
    assert not [s for s in resolved(cfg, given={"train.warmup_steps"})[1] if "warning" in s]


def test_a_continued_run_takes_its_familys_preset_and_continued_settings(tmp_path, corpus):  # noqa: F811
    """No preset named: the folder's family at its width (a 32-wide BERT: hf-tiny); the rate,
    the fresh heads' scale and a warm-up of a tenth are continued pretraining's, said in the first
    lines; what the caller sets stays."""
    folder, data = mlm_folder(tmp_path, "bert", corpus)
    assert continuation_preset(folder) == "hf-tiny"
    over = {"data.path": str(data), "train.init_from": str(folder), "train.steps": 40}
    cfg, keys = run_config(None, None, over)
    assert cfg.preset == "hf-tiny"
    cfg, said = resolved(cfg, given=keys)
    assert cfg.train.lr == CONTINUE_LR and cfg.train.head_lr_scale == CONTINUE_HEAD_LR_SCALE
    assert cfg.train.warmup == 4
    assert any(line.startswith(f"continuing {folder} with preset hf-tiny") for line in said)
    cfg, keys = run_config("hf-small", None, {**over, "train.lr": "3e-5"})
    cfg, _ = resolved(cfg, given=keys)
    assert cfg.train.lr == 3e-5 and cfg.train.head_lr_scale == CONTINUE_HEAD_LR_SCALE
