"""Model folders: `config.json` (a Hugging Face `ElectraConfig`), weights, tokenizer files.

This is what pretraining leaves behind for `detect`, fine-tuning and export, and what they load.
Because module names follow `transformers`, our folders are Hugging Face ELECTRA folders, and
Hugging Face folders (safetensors or `pytorch_model.bin`) load here. A folder is written beside
its destination and renamed into place, so it is complete or absent.
"""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Iterable
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path

import tokenizers
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from electra.atomic import atomic_dir, write_json_atomic
from electra.config import ModelConfig, RunConfig
from electra.data.tokenizer import load_tokenizer, lowercases, save_tokenizer
from electra.errors import ElectraError
from electra.hf.families import ELECTRA, FAMILIES, MODERNBERT
from electra.model.electra import ElectraForMaskedLM, ElectraForPreTraining
from electra.model.modernbert import ModernBertForMaskedLM, ModernBertForPreTraining
from electra.model_config import AnyModelConfig, model_config_class

# The pretraining networks by the `transformers` class their folders name.
ARCHITECTURES = {
    ELECTRA.discriminator: ElectraForPreTraining,
    ELECTRA.generator: ElectraForMaskedLM,
    MODERNBERT.discriminator: ModernBertForPreTraining,
    MODERNBERT.generator: ModernBertForMaskedLM,
}
ROLES = ("discriminator", "mlm", "generator")  # sub-folders of a run, in order of preference


def save_pretrained(model: nn.Module, out_dir: Path, tokenizer: tokenizers.Tokenizer) -> None:
    """Writes OUT (atomically): the model folder of `model`, with the `config.json` that
    `transformers` writes for its class."""
    # Tied tensors (the generator's output layer and its word table) are stored under both names,
    # as separate copies, so the file loads into any ELECTRA implementation without tie logic.
    state = {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
    config = FAMILIES[model.config.arch].config_json(type(model).__name__, model.config)
    with atomic_dir(out_dir) as tmp:
        write_model_files(tmp, config, state, tokenizer)


def write_model_files(
    folder: Path, config: dict, state: dict[str, torch.Tensor], tokenizer: tokenizers.Tokenizer
) -> None:
    """`config.json`, `model.safetensors` and the tokenizer files into `folder` (a temporary
    folder being filled: `atomic_dir`): the files of every model folder we write."""
    write_json_atomic(folder / "config.json", config)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    save_tokenizer(tokenizer, folder, lowercase=lowercases(tokenizer))


def is_model_dir(path: Path) -> bool:
    has_weights = (path / "model.safetensors").is_file() or (path / "pytorch_model.bin").is_file()
    return (path / "config.json").is_file() and has_weights


def resolve_model_dir(path: str | Path) -> Path:
    """A model folder, or a run (or exported pair) folder holding one (its discriminator first)."""
    path = Path(path)
    if is_model_dir(path):
        return path
    for role in ROLES:
        if is_model_dir(path / role):
            return path / role
    if not path.exists():
        raise ElectraError(f"model folder not found: {path}")
    raise ElectraError(
        f"{path} holds no model (config.json + model.safetensors): pass a model folder or a "
        "finished run folder"
    )


def read_model_config(
    path: Path, allowed: Iterable[str] = ARCHITECTURES
) -> tuple[str, AnyModelConfig]:
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ElectraError(f"cannot read {path / 'config.json'}: {e}") from None
    model_type = raw.get("model_type", ELECTRA.model_type)
    if model_type not in FAMILIES:
        raise ElectraError(
            f"{path / 'config.json'} is a {raw.get('model_type')!r} model, not an ELECTRA one"
        )
    arch = (raw.get("architectures") or [FAMILIES[model_type].discriminator])[0]
    if arch not in allowed:
        raise ElectraError(
            f"{path / 'config.json'}: architecture {arch!r} is not supported here "
            f"(expected one of {', '.join(allowed)})"
        )
    config_class = model_config_class(model_type)  # a family's model_type is its arch
    known = {f.name for f in fields(config_class)} - {"arch"}
    return arch, config_class(**{k: v for k, v in raw.items() if k in known})


# Buffers that older `transformers` versions saved with the weights; they carry no learned state.
_HF_BUFFERS = ("electra.embeddings.position_ids", "electra.embeddings.token_type_ids")


def weights_file(path: Path) -> Path:
    """The file `read_state_dict` reads: safetensors first, as `transformers` prefers it too."""
    if (path / "model.safetensors").is_file():
        return path / "model.safetensors"
    if (path / "pytorch_model.bin").is_file():
        return path / "pytorch_model.bin"
    raise ElectraError(f"{path} has no model.safetensors or pytorch_model.bin")


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The weights of a model folder: `model.safetensors`, or a PyTorch `pytorch_model.bin` loaded
    with `weights_only=True` (tensors only: never unpickle arbitrary objects)."""
    file = weights_file(path)
    return read_safetensors(file) if file.suffix == ".safetensors" else read_torch_tensors(file)


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


def fit_state_dict(state: dict[str, torch.Tensor], model: nn.Module, source: Path) -> dict:
    """Adapts a Hugging Face ELECTRA state dict to our module: drops saved buffers and restores the
    generator's tied output weight, which `transformers` leaves out of the file."""
    state = {k: v for k, v in state.items() if k not in _HF_BUFFERS}
    if isinstance(model, ElectraForMaskedLM):
        table = state.get("electra.embeddings.word_embeddings.weight")
        head = state.setdefault("generator_lm_head.weight", table)
        if table is not None and head is not None and not torch.equal(head, table):
            raise ElectraError(
                f"{source}: generator_lm_head.weight differs from the word embeddings; an untied "
                "output layer is not supported (ELECTRA ties it to the embedding table)"
            )
    return state


def load_strict(model: nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    if problem := misfit(model, state, weights_file(path).name):
        raise ElectraError(
            f"the weights in {path} do not fit its config.json: {problem}: fix config.json or use "
            "the folder it came with"
        )
    model.load_state_dict(state, strict=True)


def misfit(model: nn.Module, state: dict, file: str, skip: Iterable[str] = ()) -> str | None:
    """Why `state` does not load into `model` (the names in `skip` left out of both), or None.
    Worked out here because torch's message is many lines, and names neither file nor config."""
    skip = set(skip)
    expected = {k: v for k, v in model.state_dict().items() if k not in skip}
    for name, want in expected.items():
        got = state.get(name)
        if got is not None and got.shape != want.shape:
            return (
                f"{name} is {list(got.shape)} in {file} but {list(want.shape)} in the config"
                f"{_config_fields(model, got.shape, want.shape)}"
            )
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected and k not in skip]
    parts = []
    if missing:
        parts.append(
            f"{len(missing)} weights it needs are missing from {file} (first {missing[0]})"
        )
    if unexpected:
        parts.append(f"{len(unexpected)} in {file} have no place in it (first {unexpected[0]})")
    return ", ".join(parts) or None


def _config_fields(model: nn.Module, got: torch.Size, want: torch.Size) -> str:
    """The config fields that set the sizes that differ, e.g. " (vocab_size)"."""
    cfg = getattr(model, "config", None)
    if not is_dataclass(cfg) or len(got) != len(want):
        return ""
    values = asdict(cfg)
    sizes = {w for g, w in zip(got, want, strict=True) if g != w}
    names = [k for k, v in values.items() if type(v) is int and v in sizes]
    return f" ({', '.join(names)})" if names else ""


def load_pretrained(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[nn.Module, tokenizers.Tokenizer]:
    """Loads a model folder (ours or Hugging Face's, or a run's discriminator) and its tokenizer,
    checking that they fit each other."""
    path = resolve_model_dir(path)
    arch, cfg = read_model_config(path)
    tokenizer = model_tokenizer(path, cfg)
    model = ARCHITECTURES[arch](cfg)
    load_strict(model, fit_state_dict(read_state_dict(path), model, path), path)
    return model.to(device).eval(), tokenizer


def model_tokenizer(path: Path, cfg: ModelConfig) -> tokenizers.Tokenizer:
    """The tokenizer of a model folder, checked to give only ids the model has."""
    tokenizer = load_tokenizer(path)
    if tokenizer.get_vocab_size() > cfg.vocab_size:
        raise ElectraError(
            f"the tokenizer in {path} has {tokenizer.get_vocab_size()} tokens but the model only "
            f"{cfg.vocab_size}: use the tokenizer the model was trained with"
        )
    return tokenizer


# --- continued pretraining from a discriminator + generator pair ---------------------------------

# Fields the two networks must agree on for ELECTRA's embedding sharing to hold.
_SHARED_FIELDS = (
    "vocab_size",
    "embedding_size",
    "max_position_embeddings",
    "type_vocab_size",
    "hidden_act",
    "layer_norm_eps",
)


def pair_dirs(path: str | Path) -> tuple[Path, Path]:
    path = Path(path)
    disc, gen = path / "discriminator", path / "generator"
    if not (is_model_dir(disc) and is_model_dir(gen)):
        raise ElectraError(
            f"{path} must hold discriminator/ and generator/ model folders (as `electra export` "
            "writes them, or two Hugging Face ELECTRA folders placed so)"
        )
    return disc, gen


def pair_configs(path: str | Path) -> tuple[ModelConfig, ModelConfig]:
    """The discriminator's and generator's configs, checked to fit together."""
    disc_dir, gen_dir = pair_dirs(path)
    (d_arch, d), (g_arch, g) = read_model_config(disc_dir), read_model_config(gen_dir)
    if (d_arch, g_arch) != (ELECTRA.discriminator, ELECTRA.generator):
        raise ElectraError(
            f"{path}: expected an ElectraForPreTraining discriminator and an ElectraForMaskedLM "
            f"generator, found {d_arch} and {g_arch}"
        )
    for name in _SHARED_FIELDS:
        if getattr(d, name) != getattr(g, name):
            raise ElectraError(
                f"{path}: the discriminator has {name}={getattr(d, name)} but the generator "
                f"{getattr(g, name)}; a pair must agree on it to share embeddings"
            )
    return d, g


def load_pair_weights(discriminator: nn.Module, generator: nn.Module, path: str | Path) -> None:
    """Loads a pair into networks that share embeddings: the discriminator's tables are the shared
    ones, so the generator's copies of them (and its tied output weight) are left out."""
    disc_dir, gen_dir = pair_dirs(path)
    disc_state = fit_state_dict(read_state_dict(disc_dir), discriminator, disc_dir)
    load_strict(discriminator, disc_state, disc_dir)
    gen_state = fit_state_dict(read_state_dict(gen_dir), generator, gen_dir)
    shared = {k for k in gen_state if k.startswith("electra.embeddings.")}
    shared.add("generator_lm_head.weight")
    gen_state = {k: v for k, v in gen_state.items() if k not in shared}
    if problem := misfit(generator, gen_state, weights_file(gen_dir).name, skip=shared):
        raise ElectraError(
            f"the weights in {gen_dir} do not fit its config.json: {problem}: fix config.json or "
            "use the folder it came with"
        )
    generator.load_state_dict(gen_state, strict=False)


def trained_objective(model_path: Path) -> str | None:
    """The objective of the run a model folder came from, when it can be told (a run folder, or
    a run's discriminator/ folder); None for a bare or exported folder."""
    for run in (model_path, model_path.parent):
        if (run / "config.json").is_file() and (run / "checkpoints").is_dir():
            return RunConfig.load(run / "config.json").objective.name
    return None
