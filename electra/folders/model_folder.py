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
import re
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
from electra.model.family import Family, families, family_of
from electra.model.hf_names import (
    RTD_LABELS,
    HFNames,
    default_model_type,
    folder_families,
    folder_names,
    hf_names,
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
    config = family.config_json(name, model.config, special=special, **extra)
    with atomic_dir(out_dir) as tmp:
        write_model_files(tmp, config, state, tokenizer, special)


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
    family = known[model_type]
    arch = folder_class(raw, family)
    if allowed is not None and arch not in allowed:
        raise ElectraError(
            f"{file}: architecture {written_class(arch)!r} is not supported here "
            f"(expected one of {', '.join(map(written_class, allowed))})"
        )
    return arch, model_config_from_hf(raw, file)


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
    # Buffers that older `transformers` versions saved with the weights: no learned state.
    state = {k: v for k, v in state.items() if k not in family.dropped_keys}
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
    model = architectures()[arch](cfg)
    load_strict(model, fit_state_dict(read_state_dict(path), model, path), path)
    return model.to(device).eval(), tokenizer


def model_tokenizer(path: Path, cfg: AnyModelConfig) -> tokenizers.Tokenizer:
    """The tokenizer of a model folder, checked to give only ids the model has; it carries the
    roles the folder's tokenizer_config.json names (`load_tokenizer`), so `special_ids` of it is
    `tokenizer_special_ids(path, tokenizer)`."""
    tokenizer = load_tokenizer(path)
    if tokenizer.get_vocab_size() > cfg.vocab_size:
        raise ElectraError(
            f"the tokenizer in {path} has {tokenizer.get_vocab_size()} tokens but the model only "
            f"{cfg.vocab_size}: use the tokenizer the model was trained with"
        )
    check_tokenizer(path, tokenizer)  # another run's tokenizer of the same size
    return tokenizer


# --- continued pretraining: a discriminator + generator pair, or an MLM folder -------------------
# A family whose discriminator HF has no class for (`HFNames.discriminator_as`) continues RTD from
# its masked LM's folder, what the hub holds of it; another, from a pair of HF folders.


def _mlm_families() -> list[tuple[Family, HFNames]]:
    return [
        (f, names) for f in families().values() for names in hf_names(f) if names.discriminator_as
    ]


def _mlm_classes() -> str:
    """The masked-LM classes whose folders RTD continues from, as messages name them."""
    return " or ".join(names.generator for _, names in _mlm_families())


def pair_dirs(path: str | Path) -> tuple[Path, Path]:
    path = Path(path)
    disc, gen = path / "discriminator", path / "generator"
    if not (is_model_dir(disc) and is_model_dir(gen)) and is_model_dir(path / "mlm"):
        runs = " or ".join(
            f"{with_article(names.run_adjective)} (model.arch={f.name})"
            for f, names in _mlm_families()
        )
        raise ElectraError(
            f"{path} is a run of the mlm objective, not a discriminator/generator pair: {runs} "
            f"one continues with RTD from its model folder, --init-from {path / 'mlm'}"
        )
    if not (is_model_dir(disc) and is_model_dir(gen)):
        pairs = " or ".join(
            f.title
            for f in families().values()
            if any(not names.discriminator_as for names in hf_names(f))
        )
        raise ElectraError(
            f"{path} must hold discriminator/ and generator/ model folders (as `electra export` "
            f"writes them, or two Hugging Face {pairs} folders placed so), or be a Hugging Face "
            f"{_mlm_classes()} folder"
        )
    return disc, gen


def mlm_source(path: str | Path) -> AnyModelConfig | None:
    """The config of a masked-LM folder (`_mlm_families`', as `transformers` or our export writes
    it) that continued pretraining starts from; None for any other path. A run's
    `discriminator/` or `generator/` given alone is refused, naming the pair folder to give instead
    (one of a pair would otherwise start both networks)."""
    path = Path(path)
    if not is_model_dir(path) or is_model_dir(path / "discriminator"):
        return None
    pair = path.parent
    if path.name in ("discriminator", "generator") and all(
        is_model_dir(pair / role) for role in ("discriminator", "generator")
    ):  # a generator continued alone would be a discriminator of the generator's size
        raise ElectraError(
            f"{path} is the {path.name} of the pair in {pair}: --init-from {pair} continues the "
            f"pair (an MLM folder to continue with RTD is a {_mlm_classes()} folder)"
        )
    arch, cfg = read_model_config(path, None)  # refused below naming only what is taken
    family = names_of(cfg)
    if arch != family.generator or not family.discriminator_as:
        raise ElectraError(
            f"{path} holds {with_article(written_class(arch))}: --init-from takes a folder with "
            "discriminator/ and generator/ (a run or `electra export`), or a Hugging Face "
            f"{_mlm_classes()} folder"
        )
    return cfg


def pair_tokenizer_dir(path: str | Path) -> Path:
    """The folder whose tokenizer the continued run's data must be prepared with."""
    return Path(path) if mlm_source(path) is not None else pair_dirs(path)[0]


def pair_configs(
    path: str | Path, generator_layers: int | None = None
) -> tuple[AnyModelConfig, AnyModelConfig]:
    """The discriminator's and generator's configs, checked to fit together. From an MLM folder
    (`mlm_source`): its config, and the generator `continuation_generator` makes of it."""
    if (cfg := mlm_source(path)) is not None:
        model_tokenizer(Path(path), cfg)  # the tokenizer its weights were trained with
        return cfg, continuation_generator(cfg, generator_layers, path)
    disc_dir, gen_dir = pair_dirs(path)
    (d_arch, d), (g_arch, g) = read_model_config(disc_dir), read_model_config(gen_dir)
    for folder, cfg in ((disc_dir, d), (gen_dir, g)):  # the tokenizers their weights had
        model_tokenizer(folder, cfg)
    family = names_of(d)
    if (d_arch, g_arch) != (family.discriminator, family.generator):
        raise ElectraError(
            f"{path}: expected {with_article(written_class(family.discriminator))} "
            f"discriminator and {with_article(family.generator)} generator, found "
            f"{written_class(d_arch)} and {written_class(g_arch)}"
        )
    for name in family_of(d).shared_fields:
        if getattr(d, name) != getattr(g, name):
            raise ElectraError(
                f"{path}: the discriminator has {name}={getattr(d, name)} but the generator "
                f"{getattr(g, name)}; a pair must agree on it to share embeddings"
            )
    return d, g


def continuation_generator(
    cfg: AnyModelConfig, layers: int | None, path: str | Path
) -> AnyModelConfig:
    """The generator of RTD continued from an MLM-pretrained modern model: the model's width and
    its lower third of layers (or `layers`), with its MLM head (`load_pair_weights`).

    Why not a fresh smaller one: the modern family has no embedding projection, so a generator
    that shares the discriminator's token table (`sharing=embeddings`, what continuation uses)
    has the discriminator's width anyway, and only its depth can be smaller. Its lower layers
    and its own MLM head, trained together with that table, make a generator that predicts
    plausible tokens from the first step (a fresh one gives the discriminator noise to detect
    while it learns), and that is weaker than the full model, as ELECTRA's generator should be
    (the paper's 1/4 to 1/2 size; DeBERTa-v3 and ModernBERT use a third of the depth)."""
    n = cfg.num_hidden_layers
    k = layers or max(1, round(n / 3))
    if not 1 <= k <= n:
        raise ElectraError(
            f"objective.generator_num_hidden_layers={k}: the model in {path} has {n} layers; "
            f"the generator takes its lower ones, so give at most {n}"
        )
    return replace(cfg, num_hidden_layers=k)


def load_pair_weights(discriminator: nn.Module, generator: nn.Module, path: str | Path) -> str:
    """Loads a pair into networks that share embeddings: the discriminator's tables are the shared
    ones, so the generator's copies of them (and its tied output weight) are left out. From a
    modern MLM folder, `load_mlm_continuation`. Returns the line that says what the run started
    from: the folder, the classes read, each network's layers and what was built fresh."""
    if mlm_source(path) is not None:
        return load_mlm_continuation(discriminator, generator, Path(path))
    disc_dir, gen_dir = pair_dirs(path)
    disc_state = fit_state_dict(read_state_dict(disc_dir), discriminator, disc_dir)
    load_strict(discriminator, disc_state, disc_dir)
    gen_state = fit_state_dict(read_state_dict(gen_dir), generator, gen_dir)
    load_shared_generator(generator, gen_state, gen_dir)
    (d_arch, _), (g_arch, _) = read_model_config(disc_dir), read_model_config(gen_dir)
    return (
        f"started from {path}: discriminator {written_class(d_arch)} "
        f"({_layers(discriminator)}) from discriminator/, generator {g_arch} "
        f"({_layers(generator)}) from generator/, sharing the discriminator's embeddings; "
        "nothing built fresh"
    )


def _layers(model: nn.Module) -> str:
    n = model.config.num_hidden_layers
    return f"{n} layer{'' if n == 1 else 's'}"


def load_shared_generator(generator: nn.Module, state: dict, source: Path) -> None:
    """Loads a generator that shares the discriminator's embeddings (already loaded there): its
    copies of them and its tied output weight are left out of `state`."""
    prefix = generator.base_model_prefix
    shared = {k for k in generator.state_dict() if k.startswith(f"{prefix}.embeddings.")}
    shared.update(names_of(generator.config).tied[:1])
    state = {k: v for k, v in state.items() if k not in shared}
    check_fits(generator, state, source, skip=shared)
    generator.load_state_dict(state, strict=False)


def load_mlm_continuation(discriminator: nn.Module, generator: nn.Module, path: Path) -> str:
    """The MLM model's encoder becomes the discriminator's (its RTD head stays fresh); the
    generator, of `continuation_generator`'s depth k and sharing the discriminator's token table,
    takes layers 0..k-1, the final norm and the MLM head (layer i keeps its attention type and
    theta: the pattern counts from the first layer). Returns `load_pair_weights`' line."""
    arch, cfg = read_model_config(path)
    with torch.device("meta"):  # the names and shapes the file must have
        mlm = architectures()[names_of(cfg).generator](cfg)
    state = fit_state_dict(read_state_dict(path), mlm, path)
    check_fits(mlm, state, path)
    prefix = mlm.base_model_prefix
    encoder = {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(f"{prefix}.")}
    getattr(discriminator, prefix).load_state_dict(encoder, strict=True)
    k = generator.config.num_hidden_layers
    dropped = re.compile(rf"{prefix}\.layers\.(\d+)\.")
    kept = {n: v for n, v in state.items() if not ((m := dropped.match(n)) and int(m[1]) >= k)}
    load_shared_generator(generator, kept, path)
    n = cfg.num_hidden_layers
    return (
        f"started from {path}: {arch}, {_layers(discriminator)}; discriminator: its encoder "
        f"({_layers(discriminator)}) and a fresh RTD head; generator: its lower {k} of {n} "
        "layers, its final norm and MLM head, sharing the discriminator's token table"
    )


def trained_objective(model_path: Path) -> str | None:
    """The objective of the run a model folder came from, when it can be told (a run folder, or
    a run's discriminator/ folder); None for a bare or exported folder."""
    for run in (model_path, model_path.parent):
        if (run / "config.json").is_file() and (run / "checkpoints").is_dir():
            return RunConfig.load(run / "config.json").objective.name
    return None
