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


def loaded(record: Any, name: str) -> Any:
    """Field `name` of a frozen `record`, a `Ref` imported on this first read and kept."""
    value = object.__getattribute__(record, name)
    if isinstance(value, Ref):
        value = value.load()
        object.__setattr__(record, name, value)  # once loaded, a value like any other
    return value


@dataclass(frozen=True, eq=False, repr=False)
class Family:
    """One architecture family. Fields typed as torch objects may be given as a `Ref`. A family is
    equal only to itself (comparing, or `dataclasses.replace`, would read every field and so
    import its `Ref`s)."""

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
    # Its Hugging Face side (`electra.model.hf_names.HFNames`), a tuple of them for a family of
    # several `transformers` model types (its config's `model_type` picks one); None: no export
    # or import.
    hf: Any = None
    # The generator's depth, as a fraction of the discriminator's, where the family shares its
    # token table at full width and only the depth can make the generator smaller.
    generator_layers_fraction: float = 1 / 3
    # What it is, in `--model.arch`'s help ("BERT's, ELECTRA's own"); "" none.
    summary: str = ""

    def __getattribute__(self, name: str) -> Any:
        value = loaded(self, name)
        if name == "heads" and any(isinstance(v, Ref) for v in value.values()):
            value = {kind: v.load() if isinstance(v, Ref) else v for kind, v in value.items()}
            object.__setattr__(self, name, value)
        return value

    def __repr__(self) -> str:  # the generated one would import every `Ref`, and torch
        return f"Family({self.name!r})"

    def head(self, kind: str) -> Any:
        """The fine-tuning head class of `kind`; a one-line refusal where the family has none."""
        if kind not in self.heads:
            raise ElectraError(
                f"model.arch={self.name}: the {self.title} family has no {kind} head "
                f"({', '.join(self.heads)} are its)"
            )
        return self.heads[kind]


_FAMILIES: dict[str, Family] = {}
_BUILT_IN: list[str] = []  # the folders of electra/model/, each a family; filled once
DEFAULT_FAMILY = "electra"


def register_family(family: Family) -> Family:
    """Adds `family` to the registry, after the built-in ones (a family of the same name is
    replaced): from then on a run's `model.arch` may name it, and its presets join the preset
    list. A config whose `arch` is not the family's name, or a preset or Hugging Face
    `model_type` another family has, is refused in one line."""
    if not isinstance(family, Family):
        raise ElectraError(
            f"register_family takes a Family (electra.model.Family), not {type(family).__name__}"
        )
    _load_built_in()
    _check_new(family)
    _FAMILIES[family.name] = family
    return family


def _check_new(family: Family) -> None:
    arch = {f.name: f.default for f in fields(family.config)}.get("arch")
    if arch != family.name:
        raise ElectraError(
            f"family {family.name!r}: its config {family.config.__name__} must have a field "
            f"`arch` whose default is {family.name!r} (a saved config names its family by it)"
        )
    others = [f for name, f in _FAMILIES.items() if name != family.name]
    taken = {p: f.name for f in others for p in f.presets}
    clash = next((p for p in family.presets if p in taken), None)
    if clash is not None:
        raise ElectraError(
            f"family {family.name!r}: the preset name {clash!r} is taken by family "
            f"{taken[clash]!r}; give the preset another name"
        )
    types = {t: f.name for f in others for t in _model_types(f)}
    model_type = next((t for t in _model_types(family) if t in types), None)
    if model_type is not None:
        raise ElectraError(
            f"family {family.name!r}: the model_type {model_type!r} is taken by family "
            f"{types[model_type]!r} (its model folders would be read as that family's)"
        )


def _model_types(found: Family) -> tuple[str, ...]:
    """The `model_type`s of a family's folders (its name where it has no HF names)."""
    if found.hf is None:
        return (found.name,)
    names = found.hf if isinstance(found.hf, tuple) else (found.hf,)
    return tuple(n.model_type for n in names)


def families() -> dict[str, Family]:
    """The registered families by name: the built-in ones first, in their folders' order (however
    their imports interleave), then the others in the order they were registered."""
    _load_built_in()
    return dict(sorted(_FAMILIES.items(), key=lambda item: _built_in_rank(item[1])))


def _built_in_rank(found: Family) -> int:
    module = found.config.__module__
    ranks = [i for i, name in enumerate(_BUILT_IN) if module.startswith(f"electra.model.{name}.")]
    return ranks[0] if ranks else len(_BUILT_IN)


def family(name: str = DEFAULT_FAMILY) -> Family:
    """The family registered under `name`."""
    found = families().get(name)
    if found is None:
        raise ElectraError(
            f"model.arch={name!r} is unknown: choose one of {', '.join(families())} (a family of "
            "your own is registered first, with electra.model.register_family)"
        )
    return found


def family_of(cfg: Any) -> Family:
    """The family a model config belongs to (`model.arch`)."""
    return family(cfg.arch)


def encoder_of(model: Any) -> Any:
    """The bare encoder inside a model with a head (`model.electra`, `model.model`, ...)."""
    return getattr(model, model.base_model_prefix)


def _load_built_in() -> None:
    # Every folder of electra/model/ is a family that registers itself when imported (what the
    # families share are this package's modules); once, before any other family is added.
    if _BUILT_IN:
        return
    found = pkgutil.iter_modules([str(Path(__file__).parent)])
    # The default family's folder first, the others in their names' order.
    names = sorted(module.name for module in found if module.ispkg)
    _BUILT_IN.extend(sorted(names, key=lambda name: name != DEFAULT_FAMILY))
    for name in _BUILT_IN:
        importlib.import_module(f"electra.model.{name}")
