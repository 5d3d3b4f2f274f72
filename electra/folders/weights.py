"""A model folder's weights, as the hub ships them: `model.safetensors`, a PyTorch
`pytorch_model.bin` read by torch's weights-only loader (nothing in the file can run), or either
saved in shards with an index. Every fault is one line naming the file."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from electra.errors import ElectraError

# What a model folder's weights are in, in the order `transformers` prefers them: one file, or
# the index of a model saved in shards (`{"weight_map": {name: shard file}}`).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def weights_file(path: Path) -> Path:
    """The file `read_state_dict` reads (`WEIGHT_FILES`' first that the folder has)."""
    found = next((path / name for name in WEIGHT_FILES if (path / name).is_file()), None)
    if found is None:
        raise ElectraError(
            f"{path} has no model.safetensors or pytorch_model.bin (nor the index of its shards)"
        )
    return found


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The weights of a model folder: `model.safetensors`, or a PyTorch `pytorch_model.bin` loaded
    with `weights_only=True` (tensors only: never unpickle arbitrary objects), or the shards of
    either that an index names."""
    file = weights_file(path)
    if file.name.endswith(".index.json"):
        return read_shards(file)
    return read_safetensors(file) if file.suffix == ".safetensors" else read_torch_tensors(file)


def read_shards(index: Path) -> dict[str, torch.Tensor]:
    """The weights of a model saved in shards: every shard its index names, each read as one
    file is, and every weight the index maps found in its shard."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ElectraError(
            f"cannot read {index} ({type(e).__name__}: {e}): a shard index is JSON with a "
            '"weight_map" of weight names to shard files; re-download it'
        ) from None
    state: dict[str, torch.Tensor] = {}
    for name in shards:
        shard = index.parent / name
        if Path(name).name != name or not shard.is_file():
            raise ElectraError(
                f"{index} names the shard {name!r}, which is not a file beside it: download "
                "every shard of the model into the folder"
            )
        read = read_safetensors if shard.suffix == ".safetensors" else read_torch_tensors
        state.update(read(shard))
    if missing := sorted(k for k, shard in weight_map.items() if k not in state):
        raise ElectraError(
            f"{index} maps {len(missing)} weights (first {missing[0]!r}) to shards that do not "
            "hold them: re-download the model"
        )
    return state


def read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(file)
    except (SafetensorError, OSError) as e:
        # A download or copy cut short is the usual cause; the library's wording says only "header".
        reason = str(e).removeprefix("Error while deserializing header: ")
        raise ElectraError(
            f"cannot read {file} ({reason}; it may be truncated or not a safetensors file): "
            "re-export or re-download it"
        ) from None


_CONVERT = (
    "convert it to safetensors in a Python you trust: state_dict = torch.load(path, "
    "weights_only=False), then safetensors.torch.save_file(<its tensors>, 'model.safetensors') "
    "(or with transformers, model.save_pretrained(folder, safe_serialization=True))"
)


def read_torch_tensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # Only the object's name from torch's advice: its remedy (weights_only=False, allowlisting
        # the class) would run code from a file the user may not have made.
        if found := re.search(r"Unsupported global: GLOBAL (\S+)", str(e)):
            raise ElectraError(
                f"refusing to load {file}: it holds a Python object ({found[1]}), not only tensors, "
                f"and unpickling it could run code from the file; {_CONVERT}"
            ) from None
        raise ElectraError(_unreadable(file, e)) from None
    except Exception as e:  # noqa: BLE001 - torch raises assorted types for a damaged file
        raise ElectraError(_unreadable(file, e)) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ElectraError(
            f"{file} holds a {type(state).__name__} that is not a state dict (names -> tensors): "
            "save the model's state_dict() in it, or pass the folder of a saved model"
        )
    return state


def _unreadable(file: Path, e: Exception) -> str:
    # torch's first sentence names the fault; the rest is generic advice (or empty at end of file).
    found = re.search(r"WeightsUnpickler error:\s*(.+)", str(e))
    first = str(e).strip().split(". ")[0].split("\n")[0]
    reason = found[1] if found else first or "unexpected end of file"
    return (
        f"cannot read {file} ({reason}; it may be truncated or not a PyTorch weights file): "
        "re-export or re-download it"
    )
