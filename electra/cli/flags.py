"""Flags generated from the config dataclasses, and `--section.field VALUE` overrides: the one
override syntax (`KEY=VALUE` in `electra experiment`'s --pretrain-set and arms is its shorthand)."""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping
from dataclasses import fields
from typing import Any

from electra.errors import ElectraError


def parse_overrides(extra: list[str]) -> dict[str, str]:
    """`--train.lr 1e-4` or `--train.lr=1e-4` -> {"train.lr": "1e-4"}."""
    out: dict[str, str] = {}
    i = 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("--") or "." not in arg.split("=")[0]:
            raise ElectraError(
                f"unrecognised argument {arg!r}: config overrides look like --train.lr 1e-4"
            )
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(extra):
                raise ElectraError(f"override --{key} needs a value")
            value = extra[i + 1]
            i += 1
        out[key] = value
        i += 1
    return out


def only_overrides(extra: list[str]) -> bool:
    """Whether every word of `extra` is a `--section.field` override or its value: for a command
    whose other stray words are argparse's error (`electra finetune`)."""
    i = 0
    while i < len(extra):
        key, eq, _ = extra[i].partition("=")
        if not (key.startswith("--") and "." in key):
            return False
        i += 1 if eq else 2
    return True


def run_config_from_args(args: argparse.Namespace, extra: list[str]):
    """`electra pretrain`'s config before its unset settings are filled, and the section.field
    keys the user set, as `electra.pretrain` reads the same settings (`electra.api.run_settings`:
    the preset, the config file and the overrides, or a resumed run's saved config with them on
    top). Every field has its flag (`add_config_flags`); what is left over in `extra` gets the
    did-you-mean of `electra.config.apply_overrides`."""
    from electra.api import run_settings

    overrides: dict[str, Any] = config_flags_given(args)
    overrides.update(parse_overrides(extra))
    return run_settings(
        args.preset, args.config, overrides, resume=args.resume, source="command line"
    )


PRETRAIN_ALIASES = {
    "data.path": "--data",
    "data.seq_len": "--seq-len",
    "train.steps": "--steps",
    "train.batch_size": "--batch-size",
    "train.seed": "--seed",
    "train.device": "--device",
    "train.precision": "--precision",
    "train.compile": "--compile",
    "train.cuda_graph": "--cuda-graph",
    "train.attention": "--attention",
    "train.init_from": "--init-from",
    "train.generator_from": "--generator-from",
    "train.eval_data": "--eval-data",
    "train.eval_every": "--eval-every",
}
_CONFIG_FLAG = "config_flag:"  # the prefix of a generated flag's dest, to find them again


def add_config_flags(
    group,
    cls: type,
    prefix: str = "",
    aliases: dict[str, str] | None = None,
    *,
    skip: Collection[str] = (),
    defaults: Any = None,
    show_defaults: bool = True,
    helps: Mapping[str, str] | None = None,
) -> None:
    """A flag for each field of the config dataclass `cls`, its help the field's comment
    (`electra.overrides.field_docs`) and its default: `--PREFIXfield` (`--train.lr`) or, without a
    prefix, `--field-name`. A prefixed bool flag alone means true (`--compile`) or takes a value
    (`--train.compile false`); an unprefixed one is `--pack` / `--no-pack`. A tuple field takes
    several values. Values stay strings here and are typed by the config's own parser
    (`electra.overrides.with_values`), so that a bad value gets the error every other source of
    settings gets. `skip` leaves fields out; `defaults` is the config whose values the help shows
    (a preset's, or a subclass's; default `cls()`), unless `show_defaults` is false; `helps`
    replaces fields' comments (a help made from the registry)."""
    from electra.overrides import field_docs

    defaults = defaults or cls()
    docs = {**field_docs(type(defaults)), **(helps or {})}  # a subclass's comments: its defaults
    for f in fields(cls):
        if f.name in skip:
            continue
        key = prefix + f.name
        names = [f"--{key}" if prefix else f"--{f.name.replace('_', '-')}"]
        names += [aliases[key]] if aliases and key in aliases else []
        default = getattr(defaults, f.name)
        shown = " ".join(default) if isinstance(default, tuple) else default
        help_text = f"{docs[f.name]} (default {shown!r})" if show_defaults else docs[f.name]
        help_text = help_text.lstrip().replace("%", "%%")
        group.add_argument(
            *names, dest=_CONFIG_FLAG + key, default=None, help=help_text, **_flag_kind(f, prefix)
        )


def add_no_progress(parser: argparse.ArgumentParser) -> None:
    """`electra pretrain --no-progress`: the spelling of every command that shows progress
    (fine-tuning's and predict's come from their `progress` field), here the same as the setting
    `--train.progress false` that config files and saved runs hold."""
    parser.add_argument(
        "--no-progress",
        dest=_CONFIG_FLAG + "train.progress",
        action="store_const",
        const="false",
        default=None,
        help="no progress on stderr (the same as --train.progress false)",
    )


def _flag_kind(f, prefix: str) -> dict[str, Any]:
    """How a field's flag takes its value, by the field's declared type."""
    typ = str(f.type)
    if typ == "bool" and not prefix:  # --pack / --no-pack
        return {"action": argparse.BooleanOptionalAction}
    if typ == "bool":  # --train.compile alone, or --train.compile false
        return {"nargs": "?", "const": "true", "metavar": "BOOL"}
    if typ.startswith("tuple"):
        return {"nargs": "+", "metavar": "VALUE"}
    return {"metavar": "N" if typ.startswith("int") else "X" if "float" in typ else "TEXT"}


def config_flags_given(args: argparse.Namespace) -> dict[str, Any]:
    """{field key: value} of the generated flags the user gave."""
    return {
        k[len(_CONFIG_FLAG) :]: v
        for k, v in vars(args).items()
        if k.startswith(_CONFIG_FLAG) and v is not None
    }


def add_progress_off(parser: argparse.ArgumentParser, when: str) -> None:
    """`--no-progress` of a command that runs others (`electra.engine.progress.progress_off`):
    not a setting it records, so that a continued run may differ in it."""
    parser.add_argument("--no-progress", action="store_true", help=f"no progress on stderr {when}")
