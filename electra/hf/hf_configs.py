"""A Hugging Face `config.json` read into our model config of its family: `ElectraConfig` into
`ElectraModelConfig`, `ModernBertConfig` into `ModernConfig`, whichever `transformers` version wrote it.

ModernBERT's layer pattern and rotary thetas have two spellings: 4.x's `global_attn_every_n_layers`,
`global_rope_theta` and `local_rope_theta`, and 5.x's `layer_types` and `rope_parameters` (which 5.x
prefers where both are present). A file with either set reads; one whose two sets disagree, or whose
settings our modules do not compute (biases, rope scaling, another layer pattern), is refused with
one line naming the file and the key, rather than loaded into a model that computes something else.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from electra.errors import ElectraError
from electra.model.configs import GLOBAL, LOCAL, AnyModelConfig
from electra.model.electra.config import ElectraModelConfig
from electra.model.modernbert.config import ModernConfig, layer_types

# HF ModernBertConfig settings our modules hard-wire, with the only value they compute.
_MODERN_FIXED = {
    "attention_bias": False,
    "mlp_bias": False,
    "norm_bias": False,
    "classifier_bias": False,
    "decoder_bias": True,
}


def model_config_from_hf(raw: dict[str, Any], file: Path) -> AnyModelConfig:
    """The model config of a `config.json` of model_type electra or modernbert (`raw`)."""
    if raw.get("model_type", "electra") == "modernbert":
        return modern_config_from_hf(raw, file)
    return _built(ElectraModelConfig, _known(ElectraModelConfig, raw), file)


def _known(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    """The fields of `cls` that `raw` sets; HF's null (unset) leaves ours at its default."""
    known = {f.name for f in fields(cls)} - {"arch"}
    return {k: v for k, v in raw.items() if k in known and v is not None}


def _built(cls: type, values: dict[str, Any], file: Path) -> Any:
    """`cls(**values)`, a refusal naming the file it came from."""
    try:
        return cls(**values)
    except ElectraError as e:
        raise ElectraError(f"{file}: {str(e).removeprefix('model.')}") from None


def modern_config_from_hf(raw: dict[str, Any], file: Path) -> ModernConfig:
    for key, value in _MODERN_FIXED.items():
        if raw.get(key, value) != value:
            raise ElectraError(
                f"{file}: {key}={raw[key]} is not supported (electra's ModernBERT computes "
                f"{key}={value}, HF's default): use a model saved with it"
            )
    values = _known(ModernConfig, raw)
    every_n = _every_n(raw, file)
    if every_n is not None:
        values["global_attn_every_n_layers"] = every_n
    values.update(_thetas(raw, file))
    return _built(ModernConfig, values, file)


def _every_n(raw: dict[str, Any], file: Path) -> int | None:
    """n of "global on every n-th layer, from the first", from `layer_types` where given (5.x),
    checked against `global_attn_every_n_layers` (4.x) where both are."""
    types = raw.get("layer_types")
    if not types:
        return None
    types = list(types)
    given = raw.get("global_attn_every_n_layers")
    if isinstance(given, int) and given >= 1 and layer_types(given, len(types)) == types:
        return given
    globals_at = [i for i, t in enumerate(types) if t == GLOBAL] + [len(types)]
    n = globals_at[1] - globals_at[0]
    if n < 1 or layer_types(n, len(types)) != types:
        raise ElectraError(
            f"{file}: layer_types {types} is not global attention on every n-th layer from the "
            "first (ModernBERT's pattern, the one electra computes): use a model saved with it"
        )
    if given is not None:
        raise ElectraError(
            f"{file}: layer_types (global every {n} layers) and global_attn_every_n_layers="
            f"{given} disagree, so transformers 4.x and 5.x would build different models: "
            "make them agree"
        )
    return n


def _thetas(raw: dict[str, Any], file: Path) -> dict[str, float]:
    """The rotary thetas from `rope_parameters` (5.x), checked against the 4.x keys."""
    found = {}
    params = raw.get("rope_parameters") or {}
    for kind, key in ((GLOBAL, "global_rope_theta"), (LOCAL, "local_rope_theta")):
        p = params.get(kind) or {}
        if p.get("rope_type", "default") != "default":
            raise ElectraError(
                f"{file}: rope_parameters[{kind!r}] has rope_type {p['rope_type']!r}; electra's "
                "ModernBERT computes the default rotary positions only"
            )
        if "rope_theta" not in p:
            continue
        if key in raw and float(raw[key]) != float(p["rope_theta"]):
            raise ElectraError(
                f"{file}: {key}={raw[key]} but rope_parameters[{kind!r}] has rope_theta "
                f"{p['rope_theta']}, so transformers 4.x and 5.x would build different models: "
                "make them agree"
            )
        found[key] = float(p["rope_theta"])
    return found
