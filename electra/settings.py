"""A pretraining run's settings, resolved once for every caller: `electra pretrain`, `electra
experiment` and a Python caller of `electra.pretrain` get the same run from the same settings.

A run config comes from a preset, then a config file, then `section.field` overrides
(`run_config`; a resumed run from its folder's config.json and overrides). The settings the caller
left unset that follow from others are then filled, each change said on stderr
(`resolve_run_settings`): the data folder's sequence length (a preset's is only a default: the
data was prepared at one length) and the settings the objective implies (`electra.objectives.
fill_objective_settings`: a two_stage run switches at half the steps, an adversarial one warms up
for a tenth). What the caller "left unset" is the keys they did not set (`given`); from Python,
without `given`, a setting is the caller's where it differs from its preset's.

No torch here: the data folder and the objectives are imported when a config is resolved.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from electra.config import RunConfig, apply_overrides, preset, presets
from electra.errors import ElectraError
from electra.overrides import flatten, read_config_file

DEFAULT_PRESET = "small"


def _to_stderr(note: str) -> None:
    print(note, file=sys.stderr)


def run_config(
    preset_name: str | None = None,
    config_file: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    source: str = "command line",
) -> tuple[RunConfig, set[str]]:
    """The config of a new run: the preset (`preset_name`, else the config file's `preset`, else
    small), then the config file's values, then `overrides` ({"train.lr": "1e-4"}, typed by the
    fields); and the section.field keys the file and the overrides set, for
    `resolve_run_settings`."""
    file_values = flatten(read_config_file(config_file)) if config_file else {}
    name = preset_name or file_values.pop("preset", None) or DEFAULT_PRESET
    file_values.pop("preset", None)
    cfg = apply_overrides(preset(str(name)), file_values, source=str(config_file or "config"))
    cfg = apply_overrides(cfg, dict(overrides or {}), source=source)
    return cfg, {*file_values, *(overrides or {})}


def resumed_config(
    run_dir: str | Path, overrides: Mapping[str, Any] | None = None, source: str = "command line"
) -> RunConfig:
    """The config a run in `run_dir` was started with (its config.json holds what was filled in
    then), with `overrides` on top (`--steps` to train further; the engine refuses those that
    may not change on resume, `electra.folders.run_folder`). `train.stop_after` is an
    invocation's, not the run's: unset unless given again."""
    saved = Path(run_dir) / "config.json"
    if not saved.is_file():
        raise ElectraError(f"{run_dir} is not a run folder (no config.json): check the path")
    cfg = RunConfig.load(saved)
    cfg = replace(cfg, train=replace(cfg.train, stop_after=None))
    return apply_overrides(cfg, dict(overrides or {}), source=source)


def given_keys(cfg: RunConfig) -> set[str]:
    """The section.field keys whose values differ from those of `cfg`'s preset: what a Python
    caller set, where no one listed it."""
    base = preset(cfg.preset) if cfg.preset in presets() else RunConfig()
    mine, theirs = flatten(cfg.to_dict()), flatten(base.to_dict())
    return {k for k, v in mine.items() if k != "preset" and theirs.get(k) != v}


def resolve_run_settings(
    cfg: RunConfig,
    given: Collection[str] | None = None,
    note: Callable[[str], None] | None = _to_stderr,
) -> RunConfig:
    """`cfg` with the settings the caller left unset that follow from others filled in: the data
    folder's sequence length, then the objective's implied settings. `given` is the section.field
    keys the caller set (default: those that differ from the preset's, `given_keys`); each change
    is passed to `note` (default: a line on stderr; None: silent)."""
    from electra.objectives import fill_objective_settings

    given = given_keys(cfg) if given is None else set(given)
    say = note or (lambda _: None)
    cfg = _seq_len_from_data(cfg, given, say)
    cfg, change = fill_objective_settings(cfg, given)
    if change:
        say(change)
    return cfg


def _seq_len_from_data(cfg: RunConfig, given: set[str], say: Callable[[str], None]) -> RunConfig:
    if "data.seq_len" in given or not cfg.data.path:
        return cfg
    from electra.data.store import PretrainingData

    seq_len = PretrainingData(cfg.data.path).seq_len
    if seq_len == cfg.data.seq_len:
        return cfg
    say(
        f"using seq len {seq_len} from the data folder {cfg.data.path} "
        f"(the {cfg.preset} preset's is {cfg.data.seq_len})"
    )
    return replace(cfg, data=replace(cfg.data, seq_len=seq_len))
