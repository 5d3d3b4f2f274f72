"""What a pretraining run may do with its folder before it trains: go on from the newest complete
checkpoint (or from step 0, with the saved config, where a run was stopped before its first), with
the settings it was started with (only those that leave the run what it is may change on resume),
start again over an earlier run (`--overwrite`), and clear what killed commands left behind.

The decisions (`resume_point`, `check_new_folder`) write nothing; the removals (`clear_for_overwrite`,
`remove_leftovers`) run only once the caller holds the folder's lock, so they never touch what a
live process is writing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from electra.atomic import recover_replaced
from electra.config import RunConfig, apply_overrides
from electra.data.store import PretrainingData
from electra.data.tokenizer import fingerprint, load_tokenizer
from electra.engine.tracking import read_metrics
from electra.errors import ElectraError
from electra.folders.checkpoint import checkpoint_dirs, latest_complete
from electra.jsonl import write_jsonl
from electra.locks import LOCK_FILE, RunLock
from electra.overrides import flatten

# Settings a resumed run may change: how long it trains and when it stops, how often it logs and
# saves (and scores itself on held-out text), how it runs (device, precision, kernels, compilation, processes: the micro-batches' seeds
# follow the rows, electra.pretraining.train.micro_batch_seed) and the learning rate (the remedy a
# run stopped by non-finite steps is told to take). Everything else (architecture, sizes, objective,
# data, sequence length, batch, seed, schedule) makes another run: refused.
MAY_CHANGE_ON_RESUME = tuple(
    f"train.{name}"
    for name in (
        "steps",
        "stop_after",
        "lr",
        "log_every",
        "save_every",
        "keep_last",
        "max_skipped_steps",
        "tensorboard",
        "progress",
        "eval_data",
        "eval_every",
        "grad_accum",
        "parallel",
        "device",
        "precision",
        "compile",
        "compile_mode",
        "cuda_graph",
        "kernels",
        "attention",
    )
)
MAY_CHANGE_SAID = (
    "only train.steps, stop_after, lr, log_every, save_every, keep_last, max_skipped_steps, "
    "tensorboard, progress, eval_data, eval_every and how it runs (grad_accum, parallel, device, precision, compile, "
    "compile_mode, cuda_graph, kernels, attention)"
)
# Settings a run takes from its data and tokenizer whatever it is given (a new run too: see
# electra.pretraining.resolve.fit_config_to_data); the tokenizer's fingerprint is checked instead.
FROM_THE_DATA = ("model.vocab_size", "model.pad_token_id")
# Named first where several settings change: the one that explains the others.
_FIRST = ("preset", "model.arch", "objective.name", "data.path")

# What a run folder holds (docs/pretraining.md, The run folder): --overwrite replaces only such.
RUN_ENTRIES = {
    "config.json",
    "metrics.jsonl",
    "checkpoints",
    "tensorboard",
    "tokenizer",
    "discriminator",
    "generator",
    "mlm",
    LOCK_FILE,
}
# Hidden temporaries of electra.atomic: `.NAME.tmp` (atomic_dir), `.NAME.PID.tmp[.suffix]`
# (atomic_path) and `.NAME.old-PID` (replace_dir), left behind by a killed command.
LEFTOVER = re.compile(r"^\..+\.(tmp|\d+\.tmp(\..*)?|old-\d+)$")
_ASIDE = re.compile(r"^\.(.+)\.old-\d+$")  # the name of what a replace renamed aside


def say(line: str) -> None:
    """A line on stderr, from the first process only (torchrun's others decide alike)."""
    if os.environ.get("RANK", "0") == "0":
        print(line, file=sys.stderr)


def resume_point(
    cfg: RunConfig, run_dir: Path, data: PretrainingData, restarted: bool = False
) -> tuple[RunConfig, Path | None]:
    """The config a resumed run trains with (its saved one, with the changes it may take) and
    the checkpoint it goes on from: the newest complete one, or None where the run was stopped
    before its first (it starts again from step 0 with its saved config, and says so).
    `restarted`: torchrun restarted this worker after a failure."""
    latest = latest_complete(run_dir)
    if latest is None:
        if restarted:  # a worker restarted before the first checkpoint: afresh
            return cfg, None
        if checkpoint_dirs(run_dir):
            raise ElectraError(
                f"{run_dir} has only incomplete checkpoints to resume from: move them aside "
                f"(RUN/checkpoints) to start it again from step 0, or start a new run there "
                "with --overwrite"
            )
        if not (run_dir / "config.json").is_file():
            raise ElectraError(
                f"{run_dir} has no checkpoint to resume from (nor a config.json): start it "
                "without --resume, with --overwrite where the folder holds a run's files"
            )
        say(f"no checkpoint in {run_dir} yet: starting it again from step 0 with its saved config")
    saved_at = (latest or run_dir) / "config.json"
    saved = RunConfig.load(saved_at)
    check_run_tokenizer(run_dir, cfg.data.path, data.meta["tokenizer_fingerprint"])
    return resumed_settings(cfg, saved, run_dir), latest


def check_run_tokenizer(run_dir: Path, data_path: Any, data_fingerprint: str | None) -> None:
    """Refuses a run whose tokenizer/ is not the vocabulary of the data folder it names (one of
    them was swapped: the data for another folder's, or RUN/tokenizer for another run's)."""
    tokenizer = Path(run_dir) / "tokenizer"
    if data_fingerprint is None or not tokenizer.is_dir():
        return
    if fingerprint(load_tokenizer(tokenizer)) != data_fingerprint:
        raise ElectraError(
            f"{tokenizer} and the data in {data_path} are of different vocabularies: use the data "
            "the run was trained on, and the run's own tokenizer/ folder (copy it back if it was "
            "replaced)"
        )


def resumed_settings(cfg: RunConfig, saved: RunConfig, run_dir: Path) -> RunConfig:
    """`saved` with the settings of `cfg` that may change on resume. A setting of `cfg` that
    differs from the run's and may not change is refused, one line naming it, both values and
    what may change; one left unset (None) is the run's. The changes are said on stderr."""
    given, kept = flatten(cfg.to_dict()), flatten(saved.to_dict())
    changes: dict[str, Any] = {}
    refused = []
    for key, value in given.items():
        old = kept.get(key)
        if key in MAY_CHANGE_ON_RESUME:
            if value != old:
                changes[key] = value
        elif key in FROM_THE_DATA or value is None or value == old:
            continue
        elif key == "data.path" and old and Path(old).resolve() == Path(value).resolve():
            continue  # the same folder, named another way
        elif key == "data.path" and same_data(old, value, run_dir):
            changes[key] = value
        else:
            refused.append(key)
    refused += sorted(k for k in kept.keys() - given.keys() if kept[k] is not None)
    if refused:
        refused.sort(key=lambda k: _FIRST.index(k) if k in _FIRST else len(_FIRST))
        key = refused[0]
        more = f" (and {len(refused) - 1} more: {', '.join(refused[1:])})" if refused[1:] else ""
        raise ElectraError(
            f"--resume {run_dir}: {key} is {kept.get(key)!r} in the run but {given.get(key)!r} "
            f"here{more}: a resumed run keeps the settings it was started with; {MAY_CHANGE_SAID} "
            "may change on resume. Drop the setting, or start a new run with another --out"
        )
    if changes:
        shown = ", ".join(f"{k} {kept.get(k)!r} -> {v!r}" for k, v in changes.items())
        say(f"resuming {run_dir} with {shown} (recorded in its config.json)")
    return apply_overrides(saved, changes, source=f"--resume {run_dir}")


def same_data(saved: Any, given: Any, run_dir: Path) -> bool:
    """Whether the data folder `given` holds the run's data, saved as being in another folder,
    `saved`: a copy with the same meta.json (its shards, their sizes and checksums, the
    tokenizer's fingerprint). Where the run's folder is gone (moved), `given` is taken, said on
    stderr: its tokenizer is checked against the run's."""
    if not saved:  # a config that named no data (written by hand): nothing to compare
        return True
    old, new = Path(saved) / "meta.json", Path(given) / "meta.json"
    if not old.is_file():
        say(
            f"the data folder of run {run_dir}, {saved}, is gone: going on with {given}, which "
            "must hold the same data for the run to go on as it would have"
        )
        return True
    try:
        return json.loads(old.read_text(encoding="utf-8")) == json.loads(
            new.read_text(encoding="utf-8")
        )
    except (OSError, ValueError):
        return False


def check_new_folder(run_dir: Path, overwrite: bool, cfg: RunConfig) -> None:
    """A new run goes into a folder that is absent, empty (but for a lock), or, with `overwrite`,
    holds only an earlier run (not the data or the pair it trains from). Writes nothing."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise ElectraError(f"--out {run_dir} is a file, not a folder: choose another --out")
    # What killed commands left is cleared once the run holds the folder (remove_leftovers).
    entries = [p for p in run_dir.iterdir() if p.name != LOCK_FILE and not LEFTOVER.match(p.name)]
    if not entries:
        return
    if not overwrite:
        raise ElectraError(
            f"run folder {run_dir} already exists: continue it with --resume {run_dir}, start it "
            "again with --overwrite, or choose another --out"
        )
    foreign = [p.name for p in entries if p.name not in RUN_ENTRIES]
    if foreign:
        raise ElectraError(
            f"--overwrite replaces only a run folder, and {run_dir} holds {foreign[0]!r}, which no "
            "run writes: choose another --out, or remove the folder yourself"
        )
    inside = run_dir.resolve()
    reads = (
        ("data", cfg.data.path),
        ("train.init_from", cfg.train.init_from),
        ("train.generator_from", cfg.train.generator_from),
    )
    for name, path in reads:
        if path and inside in (Path(path).resolve(), *Path(path).resolve().parents):
            raise ElectraError(
                f"--overwrite would remove {path}, the {name} this run reads: move it out of "
                f"{run_dir} or choose another --out"
            )


def take_folder(lock: RunLock, cleanup: contextlib.ExitStack, overwrite: bool = False) -> None:
    """Holds the run folder for this process (`lock`, released by `cleanup`; taken once) and
    clears it: the earlier run with `overwrite`, and what killed commands left. A resumed run
    takes it before its checkpoints are read, so that one a killed replace put aside is back
    in place when the run looks for the newest."""
    if lock.fd is None:
        cleanup.enter_context(lock.acquire())
    if overwrite:
        clear_for_overwrite(lock.path.parent)
    remove_leftovers(lock.path.parent)  # held: no live process writes them


def clear_for_overwrite(run_dir: Path) -> None:
    """Removes the earlier run in `run_dir` (all but the lock, which the caller holds: removing
    it would let another process lock a new one), and says so."""
    steps = [p.name for p in checkpoint_dirs(run_dir)]
    removed = [p for p in run_dir.iterdir() if p.name != LOCK_FILE]
    if not removed:
        return
    for path in removed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    last = f", its checkpoints up to {steps[-1]}" if steps else ""
    say(f"--overwrite: removed the earlier run in {run_dir}{last}")


def remove_leftovers(run_dir: Path) -> None:
    """Removes the temporary files and folders that killed commands left in `run_dir` and its
    checkpoints/ (a checkpoint or model folder cut short, an old one renamed aside), naming
    them. The caller holds the folder's lock, so no live process is writing them. An old folder
    renamed aside by a replace killed before the new one took its place is put back instead."""
    for folder in (run_dir, run_dir / "checkpoints"):
        for aside in sorted(folder.glob(".*.old-*")) if folder.is_dir() else ():
            if m := _ASIDE.match(aside.name):
                for note in recover_replaced(folder / m[1]):
                    say(f"note: {note}")
    found = [
        p
        for folder in (run_dir, run_dir / "checkpoints")
        if folder.is_dir()
        for p in sorted(folder.iterdir())
        if LEFTOVER.match(p.name)
    ]
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if found:
        names = ", ".join(str(p.relative_to(run_dir)) for p in found)
        say(f"removed what a killed run left in {run_dir}: {names}")


def drop_metrics_after(run_dir: Path, step: int) -> None:
    """Removes the metrics a killed run logged after the checkpoint it resumes from, so that
    RUN/metrics.jsonl holds each step once."""
    rows = read_metrics(run_dir, split=None)
    kept = [r for r in rows if r.get("step", 0) <= step]
    if len(kept) < len(rows):
        write_jsonl(Path(run_dir) / "metrics.jsonl", kept)
