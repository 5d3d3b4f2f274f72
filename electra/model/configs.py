"""What every family's encoder config shares, plain data (no torch): each config names its
family in `arch` (`check_arch`), a run switching `model.arch` keeps its sizes (`with_arch`), and a
setting of another family is refused naming that family (`other_family`). The configs themselves
are the families' (`electra/model/<family>/config.py`), with their Hugging Face config's names.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from electra.errors import ElectraError
from electra.model.family import families, family

# Any family's encoder config (a dataclass with `arch` and the sizes in `CARRIED`).
AnyModelConfig = Any

GLOBAL, LOCAL = "full_attention", "sliding_attention"  # HF's layer_types names
# The CPU kernels a built model may run (`electra.model.kernels.use_kernels`; `train.kernels`).
KERNELS = ("auto", "stock")

# Sizes that mean the same in every family and go along when a run switches its architecture.
CARRIED = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "initializer_range",
    "pad_token_id",
)


def check_arch(cfg: Any, name: str) -> None:
    """Refuses a config of the family `name` whose `arch` says another."""
    if cfg.arch != name:
        raise ElectraError(f"model.arch={cfg.arch!r}: use {' or '.join(families())}")


def with_arch(cfg: AnyModelConfig, arch: str) -> AnyModelConfig:
    """`cfg` as the family `arch` names: its sizes carried over, the rest that family's defaults."""
    target = family(arch).config
    if isinstance(cfg, target):
        return cfg
    names = {f.name for f in fields(target)}
    return target(**{k: v for k, v in asdict(cfg).items() if k in CARRIED and k in names})


def other_family(key: str, cfg: AnyModelConfig, source: str) -> ElectraError | None:
    """The error for a `model.` setting that only another family has (`model.norm_eps` on an
    ELECTRA run), naming that family; None for a key no family has."""
    section, _, name = key.partition(".")
    if section != "model":
        return None
    for arch, found in families().items():
        if arch != cfg.arch and name in {f.name for f in fields(found.config)}:
            return ElectraError(
                f"{key} in {source} is a setting of model.arch={arch}, and this run's model.arch "
                f"is {cfg.arch}: drop it, or set model.arch={arch}"
            )
    return None
