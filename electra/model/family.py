"""Architecture families: the `Family` record and its registry. A family is one folder,
`electra/model/<name>/`, whose `__init__.py` declares one `Family` and registers it; nothing
outside `electra/model/` names a family: objectives, the engine, fine-tuning, export and the CLI
ask the record of a run's `model.arch` (docs/architecture.md §Adding a family).

The record is plain data, so that reading a config loads no torch: what lives in torch modules
(the networks, FLOP counts, kernels, the objectives' pieces) is declared as a `Ref`, a module
attribute imported on first use.

Every family's networks are called alike: `(input_ids, token_type_ids, attention_mask)` (a family
without segments ignores the second), an `embeddings` argument to share another network's, the
encoder under the attribute `base_model_prefix` names (`encoder_of`), and a masked LM's `logits`,
`tie_weights` and `hidden_at` (the final states at given positions).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from electra.errors import ElectraError


@dataclass(frozen=True)
class Ref:
    """`module:name`, imported when the record's field is first read."""

    module: str
    name: str

    def load(self) -> Any:
        return getattr(importlib.import_module(self.module), self.name)


@dataclass(frozen=True)
class Preset:
    """A named starting point of a run of this family: its encoder (a function returning the
    family's config) and the objective, data and train settings that differ from their defaults,
    or `schedule_of`, another preset whose objective, data and train sections it takes (then
    `objective` etc. are changes to those)."""

    model: Callable[[], Any]
    objective: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)
    train: Mapping[str, Any] = field(default_factory=dict)
    schedule_of: str = ""


@dataclass(frozen=True)
class Family:
    """One architecture family. Fields typed as torch objects may be given as a `Ref`."""

    name: str  # `model.arch`, and the HF `model_type` where the family has one
    title: str  # what messages and model cards call it ("ELECTRA", "ModernBERT")
    config: type  # its encoder config: plain data, HF's config field names
    presets: Mapping[str, Preset]
    # The networks: the bare encoder; with the vocabulary head (generator, BERT's MLM model);
    # with the per-token replaced-or-original head (discriminator); one encoder layer (what FSDP
    # shards one by one).
    encoder: Any
    masked_lm: Any
    pretraining: Any
    layer: Any
    # Fine-tuning heads by kind: "sequence", "token", "span_qa" and, where the family has it,
    # "official_qa" (the official XLNet-style QA head).
    heads: Mapping[str, Any]
    # `forward_flops(network, seq_len, convention)`: the forward FLOPs of one `flops.Network`
    # over one sequence, in the "official" or the "model" convention (`electra.model.flops`); an
    # `ElectraError` for "official" (no count in it) makes its runs log the model convention.
    forward_flops: Any
    # The depth (embeddings 0, layer i at i + 1, a head n + 1) of a parameter by its name in a
    # model of n layers: fine-tuning's layer-wise LR decay.
    layerwise_depth: Any
    # The CPU kernels: {stock module class: its kernel subclass} that `use_kernels` swaps in.
    kernels: Any = None
    # Attention paths beside sdpa that its encoder runs (`electra.model.attention`).
    attention_paths: tuple[str, ...] = ("sdpa",)
    # Config fields a generator and a discriminator that share embeddings must agree on.
    shared_fields: tuple[str, ...] = ()
    # Whether a shared token table fixes the generator's width (no embedding projection).
    shares_at_full_width: bool = False
    packs: bool = False  # whether fine-tuning may pack short rows (the encoder takes positions)
    document_mask: bool = False  # data.document_mask's default (the encoder masks documents)
    # The fields fine-tuning's --dropout sets.
    dropout_fields: tuple[str, ...] = ()
    # The objectives' pieces: `gdes_embeddings(cfg, source)`, GDES's discriminator embeddings
    # over the generator's; `copy_gate(cfg)`, All-Tokens MLM's per-token gate;
    # `cloze_towers(cfg, embeddings)`, Electric's two-tower generator.
    gdes_embeddings: Any = None
    copy_gate: Any = None
    cloze_towers: Any = None
    # Its Hugging Face side (`electra.model.hf_names.HFNames`); None: no export or import.
    hf: Any = None

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if isinstance(value, Ref):
            value = value.load()
            object.__setattr__(self, name, value)  # once loaded, a value like any other
        elif name == "heads" and any(isinstance(v, Ref) for v in value.values()):
            value = {kind: v.load() if isinstance(v, Ref) else v for kind, v in value.items()}
            object.__setattr__(self, name, value)
        return value

    def head(self, kind: str) -> Any:
        """The fine-tuning head class of `kind`; a one-line refusal where the family has none."""
        if kind not in self.heads:
            raise ElectraError(
                f"model.arch={self.name}: the {self.title} family has no {kind} head "
                f"({', '.join(self.heads)} are its)"
            )
        return self.heads[kind]


_FAMILIES: dict[str, Family] = {}
DEFAULT_FAMILY = "electra"


def register_family(family: Family) -> Family:
    """Adds `family` to the registry (a family of the same name is replaced): from then on a
    run's `model.arch` may name it. Its presets join the preset list."""
    arch = {f.name: f.default for f in fields(family.config)}.get("arch")
    if arch != family.name:
        raise ElectraError(
            f"family {family.name!r}: its config {family.config.__name__} must have a field "
            f"`arch` whose default is {family.name!r} (a saved config names its family by it)"
        )
    _FAMILIES[family.name] = family
    return family


def families() -> dict[str, Family]:
    """The registered families by name (the built-in ones first)."""
    _load_built_in()
    return dict(_FAMILIES)


def family(name: str = DEFAULT_FAMILY) -> Family:
    """The family registered under `name`."""
    found = families().get(name)
    if found is None:
        raise ElectraError(f"model.arch={name!r} is unknown: choose one of {', '.join(families())}")
    return found


def family_of(cfg: Any) -> Family:
    """The family a model config belongs to (`model.arch`)."""
    return family(cfg.arch)


def encoder_of(model: Any) -> Any:
    """The bare encoder inside a model with a head (`model.electra`, `model.model`, ...)."""
    return getattr(model, model.base_model_prefix)


def _load_built_in() -> None:
    # Every folder of electra/model/ is a family that registers itself when imported (what the
    # families share are this package's modules).
    for found in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if found.ispkg:
            importlib.import_module(f"electra.model.{found.name}")
