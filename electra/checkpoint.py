"""Training checkpoints: everything needed to continue a run bit for bit.

RUN/checkpoints/step_00001000/ holds `model.safetensors` (the objective's weights, shared tensors
stored once), `state.pt` (optimizer, RNG and data position; plain tensors and numbers, loaded with
`weights_only=True`) and `config.json` (the resolved run config). Each is written to a temporary
folder and renamed, and only the newest `keep_last` are kept.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model
from torch import nn

from electra.config import RunConfig
from electra.errors import ElectraError

PREFIX = "step_"


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data_state: dict[str, int],
    cfg: RunConfig,
    keep_last: int,
    extra: dict[str, Any] | None = None,
) -> Path:
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:08d}"
    tmp = root / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    state = {
        "step": step,
        "optimizer": optimizer.state_dict(),
        "rng": rng_state(),
        "data": data_state,
        **(extra or {}),
    }
    torch.save(state, tmp / "state.pt")
    cfg.save(tmp / "config.json")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in checkpoint_dirs(run_dir)[:-keep_last]:
        shutil.rmtree(old)
    return final


def load_checkpoint(
    path: Path, model: nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Restores weights and optimizer in place; returns the state (step, rng, data position)."""
    try:
        missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=False)
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0]
        raise ElectraError(f"cannot load checkpoint {path}: {first}") from None
    if missing or unexpected:
        raise ElectraError(
            f"checkpoint {path} does not fit this model (missing {len(missing)}, unexpected "
            f"{len(unexpected)} tensors): resume with the config the run was started with"
        )
    optimizer.load_state_dict(state["optimizer"])
    return state
