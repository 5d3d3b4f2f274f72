"""Model folders: `config.json` (a Hugging Face `ElectraConfig`), `model.safetensors`, tokenizer files.

This is what pretraining leaves behind for `detect`, fine-tuning and export, and what they load.
A folder is written beside its destination and renamed into place, so it is complete or absent.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, fields
from pathlib import Path

import tokenizers
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from electra.config import ModelConfig, write_json_atomic
from electra.errors import ElectraError
from electra.model import ElectraForMaskedLM, ElectraForPreTraining
from electra.tokenizer import load_tokenizer

ARCHITECTURES = {
    "ElectraForPreTraining": ElectraForPreTraining,
    "ElectraForMaskedLM": ElectraForMaskedLM,
}
ROLES = ("discriminator", "generator", "mlm")  # sub-folders of a run, in order of preference


def save_pretrained(model: nn.Module, out_dir: Path, tokenizer_dir: Path) -> None:
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    config = {
        "architectures": [type(model).__name__],
        "model_type": "electra",
        "position_embedding_type": "absolute",
        **asdict(model.config),
    }
    write_json_atomic(tmp / "config.json", config)
    # Tied tensors (the generator's output layer and its word table) are stored under both names,
    # as separate copies, so the file loads into any ELECTRA implementation without tie logic.
    state = {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
    for f in sorted(Path(tokenizer_dir).iterdir()):
        if f.is_file():
            shutil.copy2(f, tmp / f.name)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)


def resolve_model_dir(path: str | Path) -> Path:
    """A model folder, or a run folder holding one (its discriminator first)."""
    path = Path(path)
    if (path / "config.json").is_file() and (path / "model.safetensors").is_file():
        return path
    for role in ROLES:
        if (path / role / "model.safetensors").is_file():
            return path / role
    if not path.exists():
        raise ElectraError(f"model folder not found: {path}")
    raise ElectraError(
        f"{path} holds no model (config.json + model.safetensors): pass a model folder or a "
        "finished run folder"
    )


def read_model_config(path: Path) -> tuple[str, ModelConfig]:
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ElectraError(f"cannot read {path / 'config.json'}: {e}") from None
    arch = (raw.get("architectures") or ["ElectraForPreTraining"])[0]
    if arch not in ARCHITECTURES:
        raise ElectraError(
            f"{path / 'config.json'}: architecture {arch!r} is not supported "
            f"(expected one of {', '.join(ARCHITECTURES)})"
        )
    known = {f.name for f in fields(ModelConfig)}
    return arch, ModelConfig(**{k: v for k, v in raw.items() if k in known})


def load_pretrained(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[nn.Module, tokenizers.Tokenizer]:
    """Loads a model folder (or a run's discriminator) and its tokenizer, checking they fit."""
    path = resolve_model_dir(path)
    arch, cfg = read_model_config(path)
    tokenizer = load_tokenizer(path)
    if tokenizer.get_vocab_size() > cfg.vocab_size:
        raise ElectraError(
            f"the tokenizer in {path} has {tokenizer.get_vocab_size()} tokens but the model only "
            f"{cfg.vocab_size}: use the tokenizer the model was trained with"
        )
    model = ARCHITECTURES[arch](cfg)
    try:
        state = load_file(path / "model.safetensors")
        model.load_state_dict(state, strict=True)
    except (OSError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0]
        raise ElectraError(
            f"{path / 'model.safetensors'} does not fit {path / 'config.json'}: {first}"
        ) from None
    return model.to(device).eval(), tokenizer
