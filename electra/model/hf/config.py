"""The hf family's encoder config (docs/any-encoder.md): any encoder of a `transformers` model type
that `electra.model.hf.types` lists, as plain data. The sizes every family shares are fields under
BERT's names (what the toolkit reads: the vocabulary, the width, the depth, the positions); every
other key of the type's `config.json` is kept as it was, as JSON text in `hf_extra` (only the keys
that differ from the type's defaults at these sizes, so that a generator made narrower or
shallower recomputes what derives from its sizes).

`config_from_json` reads a `config.json` (a folder's, or `model.hf_config` for a model from
scratch) through `transformers`' own config class, so a file that leaves keys out gets the type's
defaults, as `transformers` would build it. `hf_values` is the other way: the keyword arguments of
that config class for this one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from electra.errors import ElectraError
from electra.model.configs import check_arch
from electra.model.hf.types import TYPES, hf_type

# Our fields that are keys of the type's config (under `HFType.keys`' names where they differ).
SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "max_position_embeddings",
    "type_vocab_size",
    "pad_token_id",
    "initializer_range",
    "layer_norm_eps",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
)
# Keys of every `transformers` config that say nothing of the architecture (a folder's labels,
# its version, dtype): not carried in `hf_extra`.
_NOT_ARCHITECTURE = frozenset(
    {
        "_name_or_path",
        "architectures",
        "auto_map",
        "chunk_size_feed_forward",
        "dtype",
        "torch_dtype",
        "id2label",
        "label2id",
        "num_labels",
        "is_encoder_decoder",
        "model_type",
        "output_attentions",
        "output_hidden_states",
        "problem_type",
        "return_dict",
        "transformers_version",
        "finetuning_task",
        "use_cache",
        "is_decoder",
        "add_cross_attention",
        "bos_token_id",
        "eos_token_id",
        "sep_token_id",
        "cls_token_id",
    }
)


@dataclass
class HFConfig:
    """An encoder of a `transformers` model type, run on `transformers`' own classes. The defaults
    are bert-base's."""

    ffn_ratio: ClassVar[float] = 4.0  # a narrower generator's FFN: BERT's 4x
    arch: str = "hf"  # the architecture family (`electra.model.family`)
    # The `transformers` model type: bert, roberta, xlm-roberta, camembert, distilbert, deberta-v2.
    model_type: str = "bert"
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    # The tokens a row may hold (RoBERTa-style types: HF's value less pad_token_id + 1).
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # 0 or 1: the model reads no segments
    pad_token_id: int = 0
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    # The type's other config.json keys that differ from its defaults, as a JSON object (DeBERTa's
    # '{"relative_attention": true, ...}'); a config.json is the easier way (model.hf_config).
    hf_extra: str = "{}"
    # A config.json of the model to build (any supported type; an ELECTRA or ModernBERT one builds
    # the native family's): it sets every model.* field; model.* settings given beside it apply over it.
    hf_config: str = ""

    def __post_init__(self) -> None:
        check_arch(self, "hf")
        hf_type(self.model_type)
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            if getattr(self, name) < 1:
                raise ElectraError(f"model.{name}={getattr(self, name)} must be at least 1")
        if self.hidden_size % self.num_attention_heads:
            raise ElectraError(
                f"model.hidden_size={self.hidden_size} is not divisible by "
                f"model.num_attention_heads={self.num_attention_heads}: pick a head count that "
                "divides it"
            )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ElectraError(
                f"model.pad_token_id={self.pad_token_id} is outside the vocabulary (size "
                f"{self.vocab_size})"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0 <= getattr(self, name) < 1:
                raise ElectraError(f"model.{name}={getattr(self, name)} must be in [0, 1)")
        least = TYPES[self.model_type].min_type_vocab
        if self.type_vocab_size < least and "type_vocab_size" not in TYPES[self.model_type].fixed:
            raise ElectraError(
                f"model.type_vocab_size={self.type_vocab_size}: a {self.model_type} model has at "
                f"least {least} segment type{'s' if least > 1 else ''}"
            )
        extra = self.extra  # a JSON object, or one line
        if clash := sorted(
            set(extra) & {TYPES[self.model_type].keys.get(f, f) for f in SIZE_FIELDS}
        ):
            raise ElectraError(
                f"model.hf_extra sets {clash[0]}, which is a field of its own: set "
                f"model.{clash[0]} instead"
            )

    @property
    def extra(self) -> dict[str, Any]:
        try:
            value = json.loads(self.hf_extra or "{}")
        except ValueError as e:
            raise ElectraError(f"model.hf_extra is not JSON: {e}") from None
        if not isinstance(value, dict):
            raise ElectraError("model.hf_extra must be a JSON object of config.json keys")
        return value

    @property
    def takes_token_types(self) -> bool:
        """Whether the model reads segments (a pair's second text as type 1)."""
        return self.type_vocab_size >= 2


def hf_values(cfg: HFConfig, sizes_only: bool = False) -> dict[str, Any]:
    """The keyword arguments of the type's `transformers` config class that build `cfg`'s model
    (`sizes_only`: without `hf_extra`)."""
    kind = TYPES[cfg.model_type]
    values = {} if sizes_only else dict(cfg.extra)
    for name in SIZE_FIELDS:
        if name in kind.fixed:
            continue
        value = getattr(cfg, name)
        if name == "max_position_embeddings" and kind.position_offset:
            value += cfg.pad_token_id + 1
        values[kind.keys.get(name, name)] = value
    return values


def config_from_json(raw: dict[str, Any], file: Path | str) -> HFConfig:
    """The `HFConfig` of a `config.json` (`raw`, read from `file`) of a type in `TYPES`, its keys
    filled with the type's defaults as `transformers` fills them."""
    kind = hf_type(raw.get("model_type", ""), f"{file}: model_type")
    full = _transformers_dict(kind.model_type, raw, file)
    values: dict[str, Any] = {"model_type": kind.model_type}
    for name in SIZE_FIELDS:
        values[name] = kind.fixed.get(name, full.get(kind.keys.get(name, name)))
    if values["type_vocab_size"] is None:
        values["type_vocab_size"] = 0
    if kind.position_offset:
        values["max_position_embeddings"] -= values["pad_token_id"] + 1
    values = {k: v for k, v in values.items() if v is not None}
    try:
        cfg = HFConfig(**values)
    except (ElectraError, TypeError) as e:
        raise ElectraError(f"{file}: {str(e).removeprefix('model.')}") from None
    defaults = _transformers_dict(kind.model_type, hf_values(cfg, sizes_only=True), file)
    used = {kind.keys.get(f, f) for f in SIZE_FIELDS}
    extra = {
        k: v
        for k, v in full.items()
        if k not in used and k not in _NOT_ARCHITECTURE and defaults.get(k, object()) != v
    }
    if extra.get("tie_word_embeddings") is False:
        raise ElectraError(
            f"{file}: tie_word_embeddings is false; electra ties a masked LM's output layer to "
            "its token table: use a model saved with tied embeddings"
        )
    return HFConfig(**{**values, "hf_extra": json.dumps(extra, sort_keys=True)})


def _transformers_dict(model_type: str, values: dict[str, Any], file: Path | str) -> dict:
    """`transformers`' config of `model_type` built from `values`, as a dict (its defaults filled)."""
    auto = transformers_module().AutoConfig
    given = {k: v for k, v in values.items() if k not in ("model_type", "auto_map")}
    try:
        return auto.for_model(model_type, **given).to_dict()
    except (TypeError, ValueError) as e:
        raise ElectraError(f"{file}: transformers cannot read it: {e}") from None


def transformers_module() -> Any:
    """`transformers`, or a one-line refusal naming the extra that installs it."""
    try:
        import transformers
    except ImportError:
        raise ElectraError(
            "the hf family runs on transformers' own classes, and transformers is not installed: "
            "pip install 'electra[hf]'"
        ) from None
    return transformers
