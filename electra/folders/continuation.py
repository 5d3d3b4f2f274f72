"""Continued pretraining (`electra pretrain --init-from FOLDER [--generator-from FOLDER]`,
docs/huggingface.md#continued-pretraining, docs/any-encoder.md): which model folders a run starts
from, their configs checked to fit together, and their weights loaded into the run's networks.

- A pair (`discriminator/` and `generator/`: a run, an export, two hub folders placed so).
- One model folder of a family whose discriminator `transformers` has no class for
  (`HFNames.discriminator_as`: the modern and hf families), of any class that holds its encoder
  (a masked LM, the bare encoder, a fine-tuned head, our discriminator): the run's main network
  (the discriminator, or the MLM objective's model) takes its encoder, and its head where the
  folder is of its class; the generator is `--generator-from`'s masked LM whole, or the folder's
  lower layers (`continuation_generator` says why).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from electra.config import TrainConfig
from electra.data.tokenizer import load_tokenizer
from electra.errors import ElectraError
from electra.folders.model_folder import (
    architectures,
    check_fits,
    check_sentence_transformers,
    fit_state_dict,
    is_model_dir,
    load_strict,
    model_tokenizer,
    read_model_config,
    resolve_model_dir,
    vocabulary_of,
    with_article,
    written_class,
)
from electra.folders.weights import read_state_dict
from electra.model.configs import AnyModelConfig
from electra.model.family import families, family_of
from electra.model.hf_names import HFNames, hf_names, names_of


def _one_folder_names() -> list[HFNames]:
    """The HF names of every type whose single folders continue (`discriminator_as`)."""
    return [names for f in families().values() for names in hf_names(f) if names.discriminator_as]


def _continuable(names: HFNames) -> set[str]:
    """The classes (as `read_model_config` gives them) whose folders continue alone."""
    heads = {c for h in names.heads for c in (h.hf_class, h.ours)}
    others = {c for c, _ in names.other_encoders}
    return {names.generator, names.discriminator, names.encoder, *heads, *others}


def _one_folder_types() -> str:
    """The model types whose single folders RTD continues from, as messages name them."""
    return ", ".join(names.model_type for names in _one_folder_names())


def pair_dirs(path: str | Path) -> tuple[Path, Path]:
    path = Path(path)
    disc, gen = path / "discriminator", path / "generator"
    if not (is_model_dir(disc) and is_model_dir(gen)) and is_model_dir(path / "mlm"):
        raise ElectraError(
            f"{path} is a run of the mlm objective, not a discriminator/generator pair: continue "
            f"from its model folder, --init-from {path / 'mlm'} (model_type "
            f"{_one_folder_types()})"
        )
    if not (is_model_dir(disc) and is_model_dir(gen)):
        pairs = " or ".join(
            f.title
            for f in families().values()
            if any(not names.discriminator_as for names in hf_names(f))
        )
        raise ElectraError(
            f"{path} must hold discriminator/ and generator/ model folders (as `electra export` "
            f"writes them, or two Hugging Face {pairs} folders placed so), or be one model "
            f"folder of model_type {_one_folder_types()}"
        )
    return disc, gen


def one_folder_source(path: str | Path) -> AnyModelConfig | None:
    """The config of one model folder (of a type `_one_folder_names` lists, any class holding the encoder,
    as `transformers` or our export writes it) that continued pretraining starts from; None for
    any other path. A run's `discriminator/` or `generator/` given alone is refused, naming the
    pair folder to give instead (one of a pair would otherwise start both networks)."""
    path = Path(path)
    check_sentence_transformers(path)
    if not is_model_dir(path) or is_model_dir(path / "discriminator"):
        return None
    pair = path.parent
    if path.name in ("discriminator", "generator") and all(
        is_model_dir(pair / role) for role in ("discriminator", "generator")
    ):  # a generator continued alone would be a discriminator of the generator's size
        raise ElectraError(
            f"{path} is the {path.name} of the pair in {pair}: --init-from {pair} continues the "
            "pair"
        )
    arch, cfg = read_model_config(path, None)  # refused below naming only what is taken
    names = names_of(cfg)
    if not names.discriminator_as or arch not in _continuable(names):
        raise ElectraError(
            f"{path} holds {with_article(written_class(arch))}: --init-from takes a folder with "
            "discriminator/ and generator/ (a run or `electra export`), or one model folder of "
            f"model_type {_one_folder_types()}"
        )
    return cfg


def pair_tokenizer_dir(path: str | Path) -> Path:
    """The folder whose tokenizer the continued run's data must be prepared with."""
    return Path(path) if one_folder_source(path) is not None else pair_dirs(path)[0]


def pair_configs(
    path: str | Path, generator_layers: int | None = None, generator_from: str | None = None
) -> tuple[AnyModelConfig, AnyModelConfig]:
    """The discriminator's and generator's configs, checked to fit together. From one folder
    (`one_folder_source`): its config, and the generator `generator_from` holds (`generator_source`)
    or `continuation_generator` makes of it."""
    if (cfg := one_folder_source(path)) is not None:
        model_tokenizer(Path(path), cfg)  # the tokenizer its weights were trained with
        if generator_from:
            return cfg, generator_source(generator_from, cfg, Path(path))
        return cfg, continuation_generator(cfg, generator_layers, path)
    if generator_from:
        raise ElectraError(
            f"--generator-from {generator_from}: {path} is a pair, whose generator/ is the "
            "generator; give one or the other"
        )
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


def generator_source(path: str | Path, disc: AnyModelConfig, source: Path) -> AnyModelConfig:
    """The config of `--generator-from`: a masked-LM folder of the discriminator's model type and
    with the tokenizer of `source` (the folder the discriminator starts from)."""
    path = resolve_model_dir(path)
    arch, cfg = read_model_config(path, None)
    names = names_of(disc)
    if arch != names.generator or names_of(cfg).model_type != names.model_type:
        raise ElectraError(
            f"--generator-from {path} holds {with_article(written_class(arch))}: give a "
            f"{names.generator} folder (a masked LM of the type the run continues)"
        )
    mine, theirs = model_tokenizer(path, cfg), load_tokenizer(source)
    if vocabulary_of(mine) != vocabulary_of(theirs):
        raise ElectraError(
            f"--generator-from {path} has another tokenizer than {source}: the generator must "
            "predict the discriminator's token ids; give a masked LM trained with that tokenizer"
        )
    return cfg


def continuation_generator(
    cfg: AnyModelConfig, layers: int | None, path: str | Path
) -> AnyModelConfig:
    """The generator of RTD continued from one folder: the model's width and its lower layers
    (the family's `generator_layers_fraction` of them: a third for ModernBERT's, half for
    DeBERTa-v3's rule; or `layers`), with the folder's MLM head where it has one (`load_continued`).

    Why not a fresh smaller one: these families have no embedding projection, so a generator that
    shares the discriminator's token table (`sharing=embeddings`, what continuation uses) has the
    discriminator's width anyway, and only its depth can be smaller. Its lower layers (and MLM
    head), trained together with that table, make a generator that predicts plausible tokens from
    the first step, where a fresh one gives the discriminator noise to detect while it learns; and
    it is weaker than the full model, as ELECTRA's generator should be (the paper's 1/4 to 1/2
    size; DeBERTa-v3 uses half the depth, ModernBERT a third)."""
    n = cfg.num_hidden_layers
    k = layers or max(1, round(n * family_of(cfg).generator_layers_fraction))
    if not 1 <= k <= n:
        raise ElectraError(
            f"objective.generator_num_hidden_layers={k}: the model in {path} has {n} layers; "
            f"the generator takes its lower ones, so give at most {n}"
        )
    return replace(cfg, num_hidden_layers=k)


def continued_networks(objective: nn.Module) -> tuple[nn.Module, nn.Module | None]:
    """The networks a continued run starts from folders: its main one (the discriminator, or the
    MLM objective's model) and its masked-LM generator (None without one)."""
    main = getattr(objective, "discriminator", None) or objective.mlm
    return main, getattr(objective, "generator", None)


def load_pair_weights(
    main: nn.Module,
    generator: nn.Module | None,
    path: str | Path,
    generator_from: str | None = None,
) -> str:
    """Loads a pair into networks that share embeddings: the discriminator's tables are the shared
    ones, so the generator's copies of them (and its tied output weight) are left out. From one
    folder, `load_continued`. Returns the line that says what the run started from: the folder,
    the classes read, each network's layers and what was built fresh."""
    if one_folder_source(path) is not None:
        return load_continued(main, generator, Path(path), generator_from)
    disc_dir, gen_dir = pair_dirs(path)
    disc_state = fit_state_dict(read_state_dict(disc_dir), main, disc_dir)
    load_strict(main, disc_state, disc_dir)
    gen_state = fit_state_dict(read_state_dict(gen_dir), generator, gen_dir)
    load_shared_generator(generator, gen_state, gen_dir)
    (d_arch, _), (g_arch, _) = read_model_config(disc_dir), read_model_config(gen_dir)
    return (
        f"started from {path}: discriminator {written_class(d_arch)} "
        f"({_layers(main)}) from discriminator/, generator {g_arch} "
        f"({_layers(generator)}) from generator/, sharing the discriminator's embeddings; "
        "nothing built fresh"
    )


def _layers(model: nn.Module) -> str:
    n = model.config.num_hidden_layers
    return f"{n} layer{'' if n == 1 else 's'}"


def load_shared_generator(
    generator: nn.Module, state: dict, source: Path, fresh: Iterable[str] = ()
) -> None:
    """Loads a generator that shares the discriminator's embeddings (already loaded there): its
    copies of them and its tied output weight are left out of `state`, and so are the weights
    in `fresh` (a head the source has not)."""
    prefix = generator.base_model_prefix
    shared = {k for k in generator.state_dict() if k.startswith(f"{prefix}.embeddings.")}
    shared.update(names_of(generator.config).tied[:1])
    shared.update(fresh)
    state = {k: v for k, v in state.items() if k not in shared}
    check_fits(generator, state, source, skip=shared)
    generator.load_state_dict(state, strict=False)


def folder_weights(path: Path) -> tuple[str, AnyModelConfig, dict[str, torch.Tensor], str]:
    """The class and config of one model folder, its weights as that class holds them (a bare
    encoder's under the family's prefix; a head's encoder only, its pooler left behind with the
    head) and the prefix."""
    arch, cfg = read_model_config(path, None)
    whole = architectures().get(arch)
    with torch.device("meta"):  # the names and shapes the file must have
        network = (whole or family_of(cfg).pretraining)(cfg)
    prefix = network.base_model_prefix
    state = read_state_dict(path)
    if not any(k.startswith(f"{prefix}.") for k in state):
        state = {f"{prefix}.{k}": v for k, v in state.items()}  # a bare encoder's names
    state = fit_state_dict(state, network, path)
    if whole is None:
        inside = f"{prefix}."
        state = {k: v for k, v in state.items() if k.startswith(inside) and ".pooler." not in k}
        check_fits(network, state, path, skip=[k for k in network.state_dict() if k not in state])
    else:
        check_fits(network, state, path)
    return arch, cfg, state, prefix


def load_continued(
    main: nn.Module, generator: nn.Module | None, path: Path, generator_from: str | None
) -> str:
    """One folder's encoder becomes the main network's (the discriminator's, or the MLM model's),
    with its head where the folder is of the main network's own class (our discriminator; a
    masked LM for the MLM objective), else a fresh head. The generator: `generator_from`'s masked
    LM whole; else the folder's layers 0..k-1 (k its depth: `continuation_generator`), sharing the
    main network's token table, with the folder's MLM head where it has one (layer i keeps its
    attention type: a pattern counts from the first layer). Returns `load_pair_weights`' line."""
    arch, cfg, state, prefix = folder_weights(path)
    inside, n = f"{prefix}.", cfg.num_hidden_layers
    encoder = {k: v for k, v in state.items() if k.startswith(inside)}
    role = "discriminator" if isinstance(main, _discriminators()) else "model"
    if type(main).__name__ == arch:
        load_strict(main, state, path)
        main_part = f"all of it ({_layers(main)}, its head too)"
    else:
        getattr(main, prefix).load_state_dict(
            {k[len(inside) :]: v for k, v in encoder.items()}, strict=True
        )
        head = "RTD" if role == "discriminator" else "MLM"
        main_part = f"its encoder ({_layers(main)}) and a fresh {head} head"
    line = f"started from {path}: {written_class(arch)}, {n} layers; {role}: {main_part}"
    if generator is None:
        return line
    if generator_from:
        gen_dir = resolve_model_dir(generator_from)
        load_strict(
            generator, fit_state_dict(read_state_dict(gen_dir), generator, gen_dir), gen_dir
        )
        return f"{line}; generator: all of {gen_dir} ({_layers(generator)}), its own embeddings"
    k = generator.config.num_hidden_layers
    layer = re.compile(r".*\.layers?\.(\d+)\.")
    kept = {n: v for n, v in encoder.items() if not ((m := layer.match(n)) and int(m[1]) >= k)}
    has_head = type(generator).__name__ == arch
    if has_head:
        kept.update({n: v for n, v in state.items() if not n.startswith(inside)})
    fresh = [] if has_head else [n for n in generator.state_dict() if not n.startswith(inside)]
    load_shared_generator(generator, kept, path, fresh)
    head = "its MLM head" if has_head else "a fresh MLM head"
    return (
        f"{line}; generator: its lower {k} of {n} layers and {head}, sharing the {role}'s "
        "token table"
    )


def fresh_heads(
    main: nn.Module, generator: nn.Module | None, path: str | Path, generator_from: str | None
) -> list[nn.Parameter]:
    """The parameters `load_pair_weights` builds fresh, by its rule: the main network's head where
    one folder is not of its class, and the generator's head where it is made of that folder's
    lower layers and the folder is no masked LM of its class. A pair starts nothing fresh."""
    if one_folder_source(path) is None:
        return []
    arch, _ = read_model_config(Path(path), None)
    own = [main] + ([generator] if generator is not None and not generator_from else [])
    return [
        p
        for network in own
        if type(network).__name__ != arch
        for name, p in network.named_parameters()
        if not name.startswith(f"{network.base_model_prefix}.")
    ]


def continued_groups(objective: nn.Module, train: TrainConfig) -> dict[str, tuple]:
    """`param_groups`' `fresh` and `held` of a continued run (`train.init_from`): its fresh heads
    at `train.head_lr_scale`, and the main network's encoder (its embeddings included), held still
    for `train.head_warmup_steps` while the fresh heads and the generator train."""
    if not train.init_from:
        return {}
    main, generator = continued_networks(objective)
    fresh = fresh_heads(main, generator, train.init_from, train.generator_from)
    held = getattr(main, main.base_model_prefix).parameters()
    return {
        "fresh": ({id(p) for p in fresh}, train.head_lr_scale),
        "held": ({id(p) for p in held}, train.head_warmup_steps),
    }


def _discriminators() -> tuple[type, ...]:
    return tuple(f.pretraining for f in families().values())
