"""Model folders: `config.json` (a Hugging Face config of the model's family, `ElectraConfig`,
`ModernBertConfig`, ...), weights, tokenizer files.

This is what pretraining leaves behind for `detect`, fine-tuning and export, and what they load.
Because module names follow `transformers`, our folders are Hugging Face folders of the family's
`model_type` (`electra.model.hf_names`), and Hugging Face folders (safetensors or
`pytorch_model.bin`) load here. A discriminator that HF has no class for (the modern family's) is
written as the two-label token classifier (`HFNames.discriminator_as`) that
`AutoModelForTokenClassification` loads as it is (`electra.model.hf_names.RTD_LABELS`: classifier
rows [0; w], so HF's softmax is our sigmoid) and read back as row 1 minus row 0. A family without
HF names writes folders under its own names (`folder_names`), which electra reads and
`transformers` does not. A folder is written beside its destination and renamed into place, so it
is complete or absent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, is_dataclass, replace
from pathlib import Path

import tokenizers
import torch
from safetensors.torch import save_file
from torch import nn

from electra.atomic import atomic_dir, write_json_atomic, writing
from electra.config import RunConfig
from electra.data.tokenizer import (
    SpecialIds,
    load_tokenizer,
    lowercases,
    save_tokenizer,
    special_ids,
)
from electra.errors import ElectraError
from electra.folders.saved_with import check_config, check_tokenizer, saved_with
from electra.folders.weights import WEIGHT_FILES, read_state_dict, weights_file
from electra.model.configs import AnyModelConfig
from electra.model.family import families
from electra.model.hf_names import (
    RTD_LABELS,
    HFNames,
    default_model_type,
    folder_families,
    folder_names,
    model_config_from_hf,
    names_of,
)


def architectures() -> dict[str, type[nn.Module]]:
    """The pretraining networks by the class name `read_model_config` gives their folders (our
    class names, which are HF's where HF has the class), over every family registered now."""
    found: dict[str, type[nn.Module]] = {}
    for family in families().values():
        for names in folder_names(family):
            found[names.discriminator] = family.pretraining
            found[names.generator] = family.masked_lm
    return found


ROLES = ("discriminator", "mlm", "generator")  # sub-folders of a run, in order of preference


def save_pretrained(
    model: nn.Module,
    out_dir: Path,
    tokenizer: tokenizers.Tokenizer,
    special: SpecialIds | None = None,
) -> None:
    """Writes OUT (atomically): the model folder of `model`, with the `config.json` that
    `transformers` writes for its class. `special`: the tokenizer's special ids where the caller
    has them (a data folder's); else as the tokenizer's own folder names them (`special_ids`)."""
    special = special or special_ids(tokenizer)
    # Tied tensors (the generator's output layer and its word table) are stored under both names,
    # as separate copies, so the file loads into any implementation without tie logic.
    state = {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
    family, name, extra = names_of(model.config), type(model).__name__, {}
    if name == family.discriminator and family.discriminator_as:
        name, extra = family.discriminator_as, rtd_label_config()
        state.update(two_label_classifier(state["classifier.weight"], state["classifier.bias"]))
    config = family.config_json(name, held_config(model), special=special, **extra)
    with atomic_dir(out_dir) as tmp:
        write_model_files(tmp, config, state, tokenizer, special)


def held_config(model: nn.Module) -> AnyModelConfig:
    """The config a pretraining network's folder states: its own, but the fields of ours that
    `transformers` cannot hold (`HFNames.not_exported`) off where the network holds nothing they
    build (a discriminator made from a config with the generator's decoder on)."""
    cfg = model.config
    on = [f for f, _ in names_of(cfg).not_exported if getattr(cfg, f)]
    if not on or type(model) not in architectures().values():
        return cfg
    plain = without(model, on)
    return plain.config if plain.state_dict().keys() == model.state_dict().keys() else cfg


def without(model: nn.Module, fields: Iterable[str]) -> nn.Module:
    """An empty (meta) network of `model`'s class with the boolean config `fields` off."""
    with torch.device("meta"):  # the weights, where wanted, are `model`'s
        return type(model)(replace(model.config, **{field: False for field in fields}))


def exported_form(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """`model` as its family's `transformers` class can hold it, and what export says of what is
    left out (`HFNames.not_exported`): a field of ours that is on is written off (a discriminator
    built from a config with the generator's decoder on holds none: nothing to say), and the
    weights only it reads are dropped; the model itself where no field is on."""
    on = [(f, note) for f, note in names_of(model.config).not_exported if getattr(model.config, f)]
    if not on:
        return model, []
    plain = without(model, [field for field, _ in on])
    state = model.state_dict()
    keep = {k: v for k, v in state.items() if k in plain.state_dict()}
    plain.load_state_dict(keep, strict=True, assign=True)
    return plain.eval(), [note for _, note in on] if len(keep) < len(state) else []


def rtd_label_config() -> dict:
    return {
        "id2label": dict(enumerate(RTD_LABELS)),
        "label2id": {name: i for i, name in enumerate(RTD_LABELS)},
        "num_labels": len(RTD_LABELS),
    }


def two_label_classifier(weight: torch.Tensor, bias: torch.Tensor) -> dict[str, torch.Tensor]:
    """One logit's classifier as two labels, rows [0; w] and [0; b]: softmax over (0, z) is
    sigmoid(z), and HF's cross-entropy on it is our binary cross-entropy."""
    return {
        "classifier.weight": torch.cat((torch.zeros_like(weight), weight)),
        "classifier.bias": torch.cat((torch.zeros_like(bias), bias)),
    }


def write_model_files(
    folder: Path,
    config: dict,
    state: dict[str, torch.Tensor],
    tokenizer: tokenizers.Tokenizer,
    special: SpecialIds | None = None,
) -> None:
    """`config.json`, `model.safetensors` and the tokenizer files into `folder` (a temporary
    folder being filled: `atomic_dir`): the files of every model folder we write. The tokenizer
    names its special tokens by their own spellings (`special`, else `special_ids`) and truncates
    where the model stops reading (`HFNames.tokenizer_max_length`)."""
    write_json_atomic(folder / "config.json", config)
    # What the weights were saved with (`electra.folders.saved_with`), checked when they load.
    metadata = {"format": "pt", **saved_with(config, tokenizer)}
    with writing(folder / "model.safetensors"):  # a full disk is an OSError naming the file
        save_file(state, folder / "model.safetensors", metadata=metadata)
    family = folder_families()[config["model_type"]]
    save_tokenizer(
        tokenizer,
        folder,
        lowercase=lowercases(tokenizer),
        token_types=family.token_types,
        special=special or special_ids(tokenizer),
        model_max_length=family.tokenizer_max_length(config),
    )


def is_model_dir(path: Path) -> bool:
    has_weights = any((path / name).is_file() for name in WEIGHT_FILES)
    return (path / "config.json").is_file() and has_weights


# The sentence-transformers modules that are a `transformers` encoder in a folder (`BERT` is the
# name versions before 1.0 wrote).
ENCODER_MODULES = ("sentence_transformers.models.Transformer", "sentence_transformers.models.BERT")


def check_sentence_transformers(path: Path) -> None:
    """A sentence-transformers folder (modules.json) whose first module is the encoder in the
    folder itself passes; one that starts with another module (static embeddings, CLIP, a
    Transformer in a subfolder) is refused in one line: its config.json and weights are not that
    encoder's, or are elsewhere."""
    listing = path / "modules.json"
    if not listing.is_file():
        return
    try:
        modules = sorted(json.loads(listing.read_text(encoding="utf-8")), key=lambda m: m["idx"])
        first = modules[0]
        kind, where = first["type"], first.get("path", "")
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise ElectraError(f"{listing} is not a sentence-transformers module list ({e})") from None
    if kind not in ENCODER_MODULES:
        raise ElectraError(
            f"{listing}: its first module is {kind}, not a transformers encoder "
            "(sentence_transformers.models.Transformer): only an encoder folder continues"
        )
    if where not in ("", "."):
        raise ElectraError(f"{listing}: its encoder is in {path / where}: pass that folder instead")


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
    path: Path, allowed: Iterable[str] | Callable[[], Iterable[str]] | None = architectures
) -> tuple[str, AnyModelConfig]:
    """The class a model folder's config.json names (a discriminator written as a two-label
    classifier as our pretraining class: `folder_class`) and the model config of its family; a
    class not in `allowed` (a function giving them: asked now; None: any) is refused naming the
    allowed ones as config.json names them."""
    if callable(allowed):
        allowed = allowed()
    file = path / "config.json"
    raw = config_json(file)
    family = folder_families()[raw.get("model_type", default_model_type())]
    arch = folder_class(raw, family)
    if allowed is not None and arch not in allowed:
        raise ElectraError(
            f"{file}: architecture {written_class(arch)!r} is not supported here "
            f"(expected one of {', '.join(map(written_class, allowed))})"
        )
    return arch, model_config_from_hf(raw, file)


def config_json(file: Path) -> dict:
    """A `config.json` of a model type that a registered family runs, read; custom code and
    other types refused in one line."""
    try:
        raw = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise ElectraError(f"cannot read {file}: {e}") from None
    if not isinstance(raw, dict):
        raise ElectraError(f"{file} is not a JSON object")
    if raw.get("auto_map"):
        raise ElectraError(
            f"{file} names custom code (auto_map: {', '.join(sorted(raw['auto_map']))}), which "
            "electra does not run: use a model of a transformers type "
            f"({', '.join(folder_families())})"
        )
    model_type = raw.get("model_type", default_model_type())
    known = folder_families()
    if model_type not in known:
        raise ElectraError(
            f"{file} is a {model_type!r} model, which electra does not run: pass a model folder "
            f"of model_type {', '.join(known)}"
        )
    return raw


def model_config_of_file(file: Path) -> AnyModelConfig:
    """The model config a `config.json` file describes (`model.hf_config`: a model from scratch),
    of whichever family runs its type."""
    return model_config_from_hf(config_json(file), file)


def written_class(arch: str) -> str:
    """`arch` (a class `read_model_config` gives) as a folder's config.json names it: our modern
    discriminator, a class `transformers` lacks, is its two-label token classifier."""
    for family in folder_families().values():
        if family.discriminator_as and arch == family.discriminator:
            return f"{family.discriminator_as} with labels {'/'.join(RTD_LABELS)}"
    return arch


def with_article(word: str) -> str:
    """`word` with its article: a ModernBertModel, an ElectraModel."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def folder_class(raw: dict, family: HFNames) -> str:
    """The class named by a config.json (`raw`), where a two-label token classifier with the
    labels `RTD_LABELS` is a discriminator of a family that writes it so."""
    arch = (raw.get("architectures") or [family.written_discriminator])[0]
    labels = tuple(str(v) for _, v in sorted((raw.get("id2label") or {}).items()))
    if family.discriminator_as and arch == family.discriminator_as and labels == RTD_LABELS:
        return family.discriminator
    return arch


def fit_state_dict(state: dict[str, torch.Tensor], model: nn.Module, source: Path) -> dict:
    """Adapts a Hugging Face state dict to our module: drops saved buffers, restores a masked
    LM's tied output weight, which `transformers` leaves out of the file, and reads a modern
    discriminator's two-label classifier as one logit (row 1 minus row 0)."""
    name, family = type(model).__name__, names_of(model.config)
    state = renamed(state, model, family.renamed_keys)
    # Buffers that older `transformers` versions saved with the weights (no learned state), and
    # heads of other code (a key ending in "." names a prefix).
    prefixes = tuple(k for k in family.dropped_keys if k.endswith("."))
    state = {
        k: v
        for k, v in state.items()
        if k not in family.dropped_keys and not (prefixes and k.startswith(prefixes))
    }
    if name == family.generator and family.tied:
        out, table_name = family.tied
        table, head = state.get(table_name), state.get(out)
        if table is not None and head is not None and not torch.equal(head, table):
            raise ElectraError(
                f"{source}: {out} differs from the token embeddings; an untied output layer is "
                "not supported (electra ties it to the embedding table)"
            )
    state = with_tied_copies(state, model)
    rtd = [f.discriminator for f in folder_families().values() if f.discriminator_as]
    weight = state.get("classifier.weight")
    if name in rtd and weight is not None and weight.shape[0] == len(RTD_LABELS):
        bias = state["classifier.bias"]
        state["classifier.weight"] = (weight[1] - weight[0])[None]
        state["classifier.bias"] = (bias[1] - bias[0])[None]
    return state


def renamed(state: dict, model: nn.Module, renames: Iterable[tuple[str, str]]) -> dict:
    """`state` with keys under another name of a weight `model` holds read under its own
    (`HFNames.renamed_keys`), where the file has none under that."""
    names = model.state_dict().keys()
    for theirs, ours in renames:
        if any(n.startswith(ours) for n in names) and not any(k.startswith(ours) for k in state):
            state = {
                (ours + k[len(theirs) :] if k.startswith(theirs) else k): v
                for k, v in state.items()
            }
    return state


def with_tied_copies(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """`state` with the names of tied weights that `transformers` leaves out of a file (a masked
    LM's output weight and bias) filled from the weight each is tied to in `model`."""
    names: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        names.setdefault(id(tensor), []).append(name)
    state = dict(state)
    for tied in names.values():
        if given := next((n for n in tied if n in state), None):
            for name in tied:
                state.setdefault(name, state[given])
    return state


def load_strict(model: nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    check_fits(model, state, path)
    model.load_state_dict(state, strict=True)


def check_fits(model: nn.Module, state: dict, path: Path, skip: Iterable[str] = ()) -> None:
    """Refuses weights that do not fit `model` (which may be on the meta device), in one line."""
    if problem := misfit(model, state, weights_file(path).name, skip):
        raise ElectraError(
            f"the weights in {path} do not fit its config.json: {problem}: fix config.json or use "
            "the folder it came with"
        )
    check_config(path)  # an edit that keeps the sizes (hidden_act, an epsilon, the heads)


def misfit(model: nn.Module, state: dict, file: str, skip: Iterable[str] = ()) -> str | None:
    """Why `state` does not load into `model` (the names in `skip` left out of both), or None.
    Worked out here because torch's message is many lines, and names neither file nor config."""
    skip = set(skip)
    expected = {k: v for k, v in model.state_dict().items() if k not in skip}
    for name, want in expected.items():
        got = state.get(name)
        if got is not None and got.shape != want.shape:
            why = _rows_field(model, name, got) or _config_fields(model, got.shape, want.shape)
            return (
                f"{name} is {list(got.shape)} in {file} but {list(want.shape)} in the config{why}"
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


def _rows_field(model: nn.Module, name: str, got: torch.Tensor) -> str:
    """Where a config field sets the rows of weight `name` (`HFNames.row_fields`), that field's
    value and the one the file's rows fit, e.g. " (position_buckets=128 makes 2 x 128 rows; the
    file's table is position_buckets=256's)"; "" otherwise."""
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(cfg, "arch"):
        return ""
    for suffix, field, per in names_of(cfg).row_fields:
        if name.endswith(suffix) and len(got) % per == 0:
            return (
                f" ({field}={getattr(cfg, field)} makes {per} x {getattr(cfg, field)} rows; the "
                f"file's table is {field}={len(got) // per}'s)"
            )
    return ""


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
    model = architectures()[arch](cfg)
    load_strict(model, fit_state_dict(read_state_dict(path), model, path), path)
    return model.to(device).eval(), tokenizer


def model_tokenizer(path: Path, cfg: AnyModelConfig) -> tokenizers.Tokenizer:
    """The tokenizer of a model folder, checked to give only ids the model has; it carries the
    roles the folder's tokenizer_config.json names (`load_tokenizer`), so `special_ids` of it is
    `tokenizer_special_ids(path, tokenizer)`."""
    tokenizer = load_tokenizer(path)
    # The highest id, not the count: a vocabulary may have gaps (and added tokens past its end).
    top = max(vocabulary_of(tokenizer).values(), default=-1)
    if top >= cfg.vocab_size:
        raise ElectraError(
            f"the tokenizer in {path} has {tokenizer.get_vocab_size()} tokens, ids up to {top} "
            f"({tokenizer.id_to_token(top)}), but the model {cfg.vocab_size} (vocab_size): use "
            "the tokenizer the model was trained with"
        )
    check_tokenizer(path, tokenizer)  # another run's tokenizer of the same size
    return tokenizer


def vocabulary_of(tokenizer: tokenizers.Tokenizer) -> dict[str, int]:
    """A tokenizer's tokens and ids, added tokens included."""
    return tokenizer.get_vocab(with_added_tokens=True)


def trained_objective(model_path: Path) -> str | None:
    """The objective of the run a model folder came from, when it can be told (a run folder, or
    a run's discriminator/ folder); None for a bare or exported folder."""
    for run in (model_path, model_path.parent):
        if (run / "config.json").is_file() and (run / "checkpoints").is_dir():
            return RunConfig.load(run / "config.json").objective.name
    return None
