"""Training checkpoints: everything needed to continue a run, whatever kills it.

RUN/checkpoints/step_00001000/ holds `model.safetensors` (the objective's weights, shared tensors
stored once), `state.pt` (optimizer state keyed by parameter name, data position and step; plain
tensors and numbers, loaded with `weights_only=True`), `config.json` (the resolved run config) and,
written last, `checksums.json` (SHA-256 of the others). Each checkpoint is written to a hidden
temporary folder, flushed to disk and renamed; a folder without valid checksums is never taken as
complete, so a kill, a crash or a full disk mid-write leaves the previous checkpoint the newest
one. Only the newest `keep_last` are kept.

Weights and optimizer state go through `torch.distributed.checkpoint.state_dict`, so one format
serves a single process, DDP and FSDP (gathered whole on save, sharded again on load), and a run
may resume with another number of processes.
"""

from __future__ import annotations

import json
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from electra.atomic import atomic_dir, fsync_dir, fsync_file, writing
from electra.config import RunConfig
from electra.data.store import file_sha256
from electra.engine.distributed import any_rank
from electra.errors import ElectraError

PREFIX = "step_"
CHECKSUMS = "checksums.json"
FILES = ("model.safetensors", "state.pt", "config.json")
_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """The run's checkpoint folders, oldest first, complete or not."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def is_complete(path: Path) -> bool:
    """Whether every file of checkpoint `path` is present with the checksum written for it."""
    try:
        sums = json.loads((path / CHECKSUMS).read_text())
        return set(sums) == set(FILES) and all(file_sha256(path / f) == sums[f] for f in FILES)
    except (OSError, ValueError, TypeError):
        return False


def latest_complete(run_dir: Path) -> Path | None:
    """The newest checkpoint that verifies; newer, broken ones are named on stderr and skipped."""
    for path in reversed(checkpoint_dirs(run_dir)):
        if is_complete(path):
            return path
        print(f"skipping checkpoint {path}: incomplete or corrupt (checksums)", file=sys.stderr)
    return None


def _canonical_names(model: nn.Module) -> dict[str, str]:
    """Each state-dict name -> the one name its tensor is stored under (tied tensors, such as the
    shared embedding table, are stored once, under the first name in sorted order)."""
    by_tensor: dict[int, list[str]] = {}
    for name, t in model.state_dict(keep_vars=True).items():
        by_tensor.setdefault(id(t), []).append(name)
    return {n: min(names) for names in by_tensor.values() for n in names}


def _write_files(tmp: Path, weights: dict, state: dict, cfg: RunConfig) -> None:
    # Neither writer raises OSError on a full disk: `writing` makes one of their errors.
    with writing(tmp / "model.safetensors"):
        save_file(weights, str(tmp / "model.safetensors"))
    with writing(tmp / "state.pt"):
        torch.save(state, tmp / "state.pt")
    cfg.save(tmp / "config.json")
    sums = {}
    for name in FILES:
        fsync_file(tmp / name)
        sums[name] = file_sha256(tmp / name)
    (tmp / CHECKSUMS).write_text(json.dumps(sums, indent=2) + "\n")
    fsync_file(tmp / CHECKSUMS)
    fsync_dir(tmp)


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data_state: dict[str, int],
    cfg: RunConfig,
    keep_last: int,
    extra: dict[str, Any] | None = None,
    is_main: bool = True,
) -> Path:
    """Writes step `step`'s checkpoint. Every rank calls it (FSDP gathers the shards); rank 0
    writes. A failed write (a full disk) removes the partial folder, keeps the previous
    checkpoints and raises, on every rank, an error naming the last complete one."""
    names = _canonical_names(model)
    full = get_model_state_dict(model, options=_FULL)
    weights = {k: v.contiguous() for k, v in full.items() if names.get(k, k) == k}
    optim = get_optimizer_state_dict(model, optimizer, options=_FULL)
    root = Path(run_dir) / "checkpoints"
    final = root / f"{PREFIX}{step:08d}"
    error = ""
    if is_main:
        try:
            state = {"step": step, "optimizer": optim, "data": data_state, **(extra or {})}
            # Files and folder flushed to disk before the rename, the rename after it.
            with atomic_dir(final, fsync=True) as tmp:
                _write_files(tmp, weights, state, cfg)
        except OSError as e:
            previous = latest_complete(run_dir)
            error = f"cannot write checkpoint {final} ({e.strerror or e}); " + (
                f"the last complete checkpoint, {previous.name}, is intact: free space, "
                f"then continue with `electra pretrain --resume {run_dir}`"
                if previous
                else "there is no earlier checkpoint: free space, then start it again from step "
                f"0 with `electra pretrain --resume {run_dir}`"
            )
        else:
            for old in checkpoint_dirs(run_dir)[:-keep_last]:
                shutil.rmtree(old)
    # Every rank waits here for rank 0's write, and learns whether it failed.
    if any_rank(bool(error), next(model.parameters()).device):
        raise ElectraError(error or "rank 0 could not write a checkpoint: see its error")
    return final


def load_checkpoint(
    path: Path, model: nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Restores weights and optimizer in place (every rank reads `path`, so it must be on storage
    all nodes see); returns the state (step, data position, ...)."""
    try:
        saved = load_file(str(path / "model.safetensors"))
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, SafetensorError, pickle.UnpicklingError) as e:
        # The checksums matched, so a file changed since, or this node sees other storage; torch's
        # first sentence names the fault, its advice (weights_only=False) would not help.
        first = (str(e).strip() or type(e).__name__).split(". ")[0].split("\n")[0]
        raise ElectraError(
            f"cannot load checkpoint {path} ({first}): move this checkpoint folder aside and "
            "resume again, from the one before it"
        ) from None
    names = _canonical_names(model)
    missing = sorted(n for n, c in names.items() if c not in saved)
    unexpected = sorted(set(saved) - set(names.values()))
    if missing or unexpected:
        raise ElectraError(
            f"checkpoint {path} does not fit this model (missing {len(missing)}, unexpected "
            f"{len(unexpected)} tensors): resume with the config the run was started with"
        )
    weights = {n: saved[c] for n, c in names.items()}
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
    # A parameter with no saved optimizer state has had no gradient yet (two_stage's
    # discriminator before its switch: Adam makes a state at the first gradient); not strict, so
    # it gets its state then, as it would have in the run that saved the checkpoint. The weights
    # above are checked strictly, and the checksums catch a truncated state.pt.
    set_optimizer_state_dict(
        model,
        optimizer,
        state["optimizer"],
        options=StateDictOptions(full_state_dict=True, strict=False),
    )
    return state
