"""Settings from their sources: config files (JSON or TOML), `section.field` keys, and values
typed by their field's declaration. Plain data and no torch: `electra.config`, the command line and
the fine-tuning recipe all parse settings here, so a bad value gets one error wherever it comes from."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import re
import types
import typing
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import tomllib

from electra.errors import ElectraError


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The settings of a JSON or TOML file, as nested dicts. A byte-order mark (Notepad's, Excel's)
    is read past; a folder, another suffix, bad syntax or a file that is not a table of settings is
    one error naming the file."""
    path = Path(path)
    if path.is_dir():
        raise ElectraError(f"config file {path} is a folder: pass the .json or .toml file in it")
    if not path.is_file():
        raise ElectraError(f"config file not found: {path}")
    if path.suffix not in (".toml", ".json"):
        raise ElectraError(f"config file {path} must end in .json or .toml")
    try:
        text = path.read_text(encoding="utf-8-sig")
        values = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise ElectraError(
            f"config file {path} is not valid {path.suffix[1:].upper()}: {e}"
        ) from None
    if not isinstance(values, dict):
        raise ElectraError(
            f"config file {path} holds a {type(values).__name__}, not a table of settings: "
            'write {"section": {"field": value}}'
        )
    return values


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"train": {"lr": 1}} -> {"train.lr": 1}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce(value: Any, typ: Any, key: str, source: str) -> Any:
    """Turns a command-line string (or a JSON value) into the field's declared type."""
    if isinstance(typ, types.UnionType) or typing.get_origin(typ) is typing.Union:
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        typ = args[0]
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            if isinstance(value, str):
                return int(float(value)) if float(value).is_integer() else int(value)
            return int(value)
        if typ is float:
            return float(value)
        if typ is str:
            return str(value)
        if typing.get_origin(typ) is tuple:  # tuple[str, ...]: a list, "a,b", or ["a,b"] (flags)
            items = [value] if isinstance(value, str) else list(value)
            parts = [p.strip() for v in items for p in str(v).split(",")]
            return tuple(p for p in parts if p)
    except (TypeError, ValueError):
        pass
    else:
        return value
    name = getattr(typ, "__name__", str(typ))
    raise ElectraError(f"{key}={value!r} in {source} is not a valid {name}")


def unknown_key(key: str, known: list[str], source: str) -> ElectraError:
    hint = difflib.get_close_matches(key, known, n=1)
    did_you_mean = f" (did you mean {hint[0]}?)" if hint else ""
    return ElectraError(f"unknown setting {key!r} in {source}{did_you_mean}")


def with_values(obj: Any, values: dict[str, Any], source: str, prefix: str = "") -> Any:
    """`obj` (a config dataclass) with fields replaced by `values`, typed or strings turned into
    the field's type (`epochs="10"`). An unknown name or a bad value is one error naming `source`;
    `prefix` is how the user names the fields (`train.`). The one override parser: pretraining
    runs (`apply_overrides`) and fine-tuning recipes use it."""
    hints = field_types(type(obj))
    unknown = [k for k in values if k not in hints]
    if unknown:
        raise unknown_key(prefix + unknown[0], [prefix + h for h in hints], source)
    typed = {k: coerce(v, hints[k], f"{prefix}{k}", source) for k, v in values.items()}
    return replace(obj, **typed)


def field_docs(cls: type) -> dict[str, str]:
    """Each field's comment in `cls`'s source (the comment lines above it, then the one at the end
    of its line), for the command line's help: the docs live once, beside the fields. Empty where
    the source is not available (a frozen install) or a field has no comment."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update({k: v for k, v in _comments_of(klass).items() if v})
    return {f.name: docs.get(f.name, "") for f in fields(cls)}


def _comments_of(klass: type) -> dict[str, str]:
    try:
        lines = inspect.getsource(klass).splitlines()
    except (OSError, TypeError):
        return {}
    docs, above = {}, []
    for line in lines[1:]:
        text = line.strip()
        if text.startswith("# ---"):  # a heading over a group of fields, not a field's doc
            above = []
            continue
        if text.startswith("#"):
            above.append(text.lstrip("# "))
            continue
        match = re.match(r"(\w+): [^=]+=[^#]*(?:#\s*(.*))?$", text)
        if match and not text.startswith(("def ", "return")):
            docs[match[1]] = " ".join([*above, match[2] or ""]).strip()
        above = []
    return docs


def none_for_unset(obj: Any, old_spellings: dict[str, Any]) -> None:
    """Sets to None the fields of `obj` (a config dataclass, in its `__post_init__`) that hold the
    value which meant "unset" before None did (`{field: 0}`, `-1` or `""`), so that a config.json
    or finetune.json saved then, a flag given that way and a Python caller all mean the same."""
    for name, old in old_spellings.items():
        value = getattr(obj, name)
        if value is not None and type(value) is type(old) and value == old:
            setattr(obj, name, None)
