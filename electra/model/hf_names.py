"""What a family is called in `transformers` (`HFNames`, a `Family`'s `hf`): the classes of its
pretraining networks, its bare encoder and its task heads, the `config.json` that names them (both
ways: written by `HFNames.config_json`, read by `model_config_from_hf`), and the hooks that carry
what is particular to a family's HF classes (its head weights on export, its classifier on
import, its model card's note). Import, export and `electra export`'s message ask these; each
family declares its own in its folder (`electra/model/<family>/hf.py`).

A family without HF names (`Family.hf` None) still writes and reads model folders of its own:
`folder_names` gives it names from its record (`model_type` its name, the classes ours), which
electra reads and `transformers` does not; `hf_of` refuses it.

Names and plain functions, no torch: the hooks that need torch are `Ref`s, imported when read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from electra.errors import ElectraError
from electra.model.family import DEFAULT_FAMILY, Family, Ref, families, family_of, loaded

# The labels of a discriminator written as a two-label token classifier (the modern family's):
# row 0 of its classifier is zeros, so softmax over (0, z) is our sigmoid(z).
RTD_LABELS = ("original", "replaced")


@dataclass(frozen=True)
class TaskHead:
    """One fine-tuned head: our class (`electra.model.heads`), the `transformers` class that loads
    its export, the Auto class and pipeline that take that folder, and what messages call it."""

    ours: str
    hf_class: str
    auto_class: str
    pipeline: str
    description: str
    # A weight that our head of this class has and HF's has not, and what messages call our
    # head: a folder holding it without finetune.json is refused rather than run as HF's.
    own_weight: tuple[str, str] = ()


@dataclass(frozen=True)
class HFNames:
    """The `transformers` names of one encoder family (its `model_type`): a `Family`'s `hf`."""

    model_type: str
    # Our discriminator's class (`electra.folders.model_folder.ROLES`' first folder). Where
    # `transformers` has no such class, `discriminator_as` is the class its folder is written as
    # (two labels, `RTD_LABELS`) and `read_model_config` reads such a folder back as
    # `discriminator`.
    discriminator: str
    generator: str
    # The generator's output weight and the token table it is tied to: `transformers` leaves the
    # first out of the file (() where no file leaves it out).
    tied: tuple[str, ...]
    encoder: str  # the bare encoder, as `AutoModel` saves it
    heads: tuple[TaskHead, ...]
    # config.json fields that `transformers` reads and the family's config leaves implicit.
    config_extra: tuple[tuple[str, Any], ...] = ()
    discriminator_as: str = ""
    # Whether the exported tokenizer gives token_type_ids (ModernBERT's 4.x forward refuses them).
    token_types: bool = True
    # config.json keys computed from the model's config (other `transformers` versions' names).
    derived_keys: Callable[[Any], dict[str, Any]] | None = None
    # The special-token id keys of HF's config, by the role of the token that gives each id
    # (`electra.data.tokenizer.SpecialIds`' fields).
    token_id_keys: tuple[tuple[str, str], ...] = ()
    # The config key whose value is the tokenizer's `model_max_length` in a model folder (what
    # HF's pipelines truncate to); "" keeps BERT's 512, as ELECTRA's folders always had.
    max_length_key: str = ""
    # `max_length_of(config) -> int`, where the length is computed from the config (RoBERTa's
    # positions start after the padding id); it overrides `max_length_key`.
    max_length_of: Callable[[dict[str, Any]], int] | None = None
    # `config_values(model_config) -> dict`: the config.json keys of a model config where they
    # are not its fields by name (a family running `transformers`' classes has `transformers`
    # write them); None: its fields but `arch`.
    config_values: Callable[[Any], dict[str, Any]] | None = None
    # `read_config(raw, file)`: the family's config from a `config.json` (`raw`, read from
    # `file`), where more than its fields by name (`config_from_fields`): other versions'
    # spellings, settings refused. Plain data, no torch.
    read_config: Callable[[dict[str, Any], Path], Any] | None = None
    # Weights older `transformers` versions saved that carry no learned state, or heads of other
    # code that the family's classes do not hold: dropped on load (a key ending in "." drops
    # every weight under that prefix).
    dropped_keys: tuple[str, ...] = ()
    # Other names of weights the family's classes hold, as (prefix, our prefix): a file's key
    # under the first is read under the second where the model has that name and the file has
    # none (DeBERTa's MLM head saved with `legacy` false); applied before `dropped_keys`.
    renamed_keys: tuple[tuple[str, str], ...] = ()
    # Weights whose rows a config field sets, as (weight name suffix, field, rows per unit):
    # a file whose table has another size is refused naming the field's value that fits it.
    row_fields: tuple[tuple[str, str, int], ...] = ()
    # Boolean config fields of ours that `transformers`' classes cannot hold, each with the
    # sentence export says of it: a model with one on is written with it off, the weights only
    # it reads left out.
    not_exported: tuple[tuple[str, str], ...] = ()
    # Other `transformers` classes whose folders hold the encoder under the family's prefix, and
    # what of theirs fine-tuning leaves behind (BERT's `BertForPreTraining`: its MLM and
    # next-sentence heads).
    other_encoders: tuple[tuple[str, str], ...] = ()
    # Our model classes that no `transformers` class takes, and why (an export's refusal).
    unexported: tuple[tuple[str, str], ...] = ()
    # An exported model card's title ("" the family's title).
    card_title: str = ""
    # What messages call a run of the family where it continues RTD from an MLM folder
    # (`discriminator_as`: HF has no pretraining class, so an MLM is what the hub holds).
    run_adjective: str = ""
    # Hooks, each a `Ref` (torch) or None:
    # `export_state(task, model, head, state, source) -> (state, config extra)`: a fine-tuned
    # model's weights under HF's head (`state`: ours, float copies) and the config keys its head
    # adds; None: the head is HF's own, its weights go as they are.
    export_state: Any = None
    # `import_classifier(raw, model_cfg, num_labels)`: the module computing HF's sequence
    # classifier of a `config.json` (`raw`), which `predict` runs as it is.
    import_classifier: Any = None
    # `card_note(pipeline, config) -> list[str]`: the model card's paragraph on the head.
    card_note: Any = None
    # `base_model_state(model_config, state) -> state`: an encoder's weights (without the prefix)
    # as the type's bare model holds them, where that has more (BERT's pooler); None: as they are.
    base_model_state: Any = None

    def __getattribute__(self, name: str) -> Any:
        return loaded(self, name)

    @property
    def task_heads(self) -> tuple[str, ...]:
        """The `transformers` task classes, in the order of `heads`."""
        return tuple(h.hf_class for h in self.heads)

    def exported_head(self, ours: str) -> TaskHead | None:
        """The head whose export `ours` (our model class) becomes; None where HF has none."""
        return next((h for h in self.heads if h.ours == ours), None)

    def tokenizer_max_length(self, config: dict[str, Any]) -> int:
        """The `model_max_length` of the tokenizer of a model folder whose config is `config`."""
        if self.max_length_of is not None:
            return self.max_length_of(config)
        return int(config[self.max_length_key]) if self.max_length_key else 512

    def task_head(self, hf_class: str) -> TaskHead:
        return next(h for h in self.heads if h.hf_class == hf_class)

    @property
    def written_discriminator(self) -> str:
        """The class a discriminator folder's config.json names."""
        return self.discriminator_as or self.discriminator

    def config_json(
        self,
        architecture: str,
        model_config: Any,
        tokenizer: Any = None,
        *,
        special: Any = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A `config.json` as `transformers` writes it for `architecture`: the family's fields,
        the model's (a dataclass, its field names HF's; our `arch` is no HF key), the keys of
        other `transformers` versions (`derived_keys`), the special-token ids (`special`, a
        `SpecialIds`, else those of `tokenizer`, a `tokenizers.Tokenizer`), then `extra`
        (labels)."""
        if self.config_values is not None:
            values = self.config_values(model_config)
        else:
            values = {k: v for k, v in asdict(model_config).items() if k != "arch"}
        ids = {}
        if (tokenizer is not None or special is not None) and self.token_id_keys:
            if special is None:
                from electra.data.tokenizer import special_ids

                special = special_ids(tokenizer)
            ids = {key: getattr(special, role) for key, role in self.token_id_keys}
        return {
            "architectures": [architecture],
            "model_type": self.model_type,
            **dict(self.config_extra),
            **values,
            **(self.derived_keys(model_config) if self.derived_keys else {}),
            **ids,
            **extra,
        }


def hf_names(found: Family) -> tuple[HFNames, ...]:
    """The Hugging Face names of a family, one per `model_type` it runs (a family may run several,
    as the hf family runs `transformers`' types: its `hf` is then a tuple); () for none."""
    if found.hf is None:
        return ()
    return found.hf if isinstance(found.hf, tuple) else (found.hf,)


def hf_families() -> dict[str, HFNames]:
    """The Hugging Face side of each registered family that has one, by `model_type`."""
    return {names.model_type: names for f in families().values() for names in hf_names(f)}


def folder_names(found: Family) -> tuple[HFNames, ...]:
    """The names model folders of the family `found` are written and read under: its Hugging Face
    names, or for a family without, its own (`model_type` its name, the classes ours, no task
    heads of HF's): a folder that electra reads and `transformers` does not."""
    if found.hf is not None:
        return hf_names(found)
    return (
        HFNames(
            model_type=found.name,
            discriminator=_class_name(found, "pretraining"),
            generator=_class_name(found, "masked_lm"),
            tied=(),  # our own folders hold the tied output weight under its own name too
            encoder=_class_name(found, "encoder"),
            heads=(),
        ),
    )


def _class_name(found: Family, field: str) -> str:
    # A field not yet imported is a `Ref` that names its class: no torch to read a config.
    value = found.__dict__[field]
    return value.name if isinstance(value, Ref) else value.__name__


def folder_families() -> dict[str, HFNames]:
    """`folder_names` of every registered family, by the `model_type` its folders have."""
    return {names.model_type: names for f in families().values() for names in folder_names(f)}


def names_of(model_config: Any) -> HFNames:
    """The names a model folder of `model_config` is written under (`folder_names`; of a family
    of several types, the one its `model_type` names)."""
    return _pick(folder_names(family_of(model_config)), model_config)


def _pick(names: tuple[HFNames, ...], model_config: Any) -> HFNames:
    if len(names) == 1:
        return names[0]
    return next(n for n in names if n.model_type == model_config.model_type)


def family_of_type(model_type: str) -> Family:
    """The family whose model folders have `model_type` (`folder_families`' key)."""
    return next(
        f for f in families().values() if any(n.model_type == model_type for n in folder_names(f))
    )


def default_model_type() -> str:
    """What a `config.json` without `model_type` is: the default family's (folders written before
    families existed are ELECTRA's)."""
    return folder_names(families()[DEFAULT_FAMILY])[0].model_type


def model_config_from_hf(raw: dict[str, Any], file: Path) -> Any:
    """The model config of a `config.json` (`raw`, read from `file`) of a registered family's
    `model_type` (the caller has checked it is one), whichever `transformers` version wrote it."""
    names = folder_families()[raw.get("model_type", default_model_type())]
    if names.read_config is not None:
        return names.read_config(raw, file)
    cls = family_of_type(names.model_type).config
    return config_from_fields(cls, known_fields(cls, raw), file)


def known_fields(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    """The fields of `cls` that `raw` sets; HF's null (unset) leaves ours at its default."""
    known = {f.name for f in fields(cls)} - {"arch"}
    return {k: v for k, v in raw.items() if k in known and v is not None}


def config_from_fields(cls: type, values: dict[str, Any], file: Path) -> Any:
    """`cls(**values)`, a refusal naming the file it came from."""
    try:
        return cls(**values)
    except ElectraError as e:
        raise ElectraError(f"{file}: {str(e).removeprefix('model.')}") from None


def auto_class(architecture: str) -> str:
    """The `transformers` Auto class that loads a folder of `architecture` (the class itself
    where it is not a task head: `ElectraForPreTraining` loads with its own class)."""
    for family in hf_families().values():
        if architecture in family.task_heads:
            return family.task_head(architecture).auto_class
    return architecture


def hf_of(model_config: Any) -> HFNames:
    """The Hugging Face side of the family of `model_config`; a one-line refusal where the family
    has none (it trains, fine-tunes and predicts here, but has no `transformers` classes to
    export to or import from)."""
    family = family_of(model_config)
    if family.hf is None:
        raise ElectraError(
            f"model.arch={family.name}: the {family.title} family has no Hugging Face names, so "
            "its models cannot be written for or read from `transformers`; use its run folder "
            "or fine-tuned folder with electra itself"
        )
    return _pick(hf_names(family), model_config)
