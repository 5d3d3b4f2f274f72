"""The hf family's networks (docs/any-encoder.md): `transformers`' own modules of a model type, held
under the names `transformers` gives them, so that a state dict is the type's and export is a key
map.

Each network is built as `transformers` builds its class (`from_config`, its initialisation, SDPA
where the type has it) and its children are adopted by ours: `BertForMaskedLM`'s `bert` and `cls`
become ours, and ours computes with them. The encoder under `base_model_prefix` is called as every
family's encoder is (`electra.model.family`: `(input_ids, token_type_ids, attention_mask)`, the
final states as a tensor; `EncoderCalls`). Ours:

- `TransformersForMaskedLM`: the generator, or an MLM model: the type's `...ForMaskedLM`, its
  vocabulary head run only at the positions asked for (`hidden_at`, `logits`).
- `TransformersForReplacedTokenDetection`: the discriminator: the type's encoder, dropout and a
  one-logit linear `classifier`, the layout of its `...ForTokenClassification`, so that it exports
  exactly as that class with two labels (`electra.model.hf_names.RTD_LABELS`).
- `GdesEmbeddings`: DeBERTa-v3's gradient-disentangled token table over the generator's.

Each is a class per model type (`BertForMaskedLM`, `XLMRobertaForReplacedTokenDetection`, ...),
made on first use: constructing the family's class with a config returns the type's.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from electra.errors import ElectraError
from electra.model.family import encoder_of
from electra.model.hf.config import HFConfig, hf_values, transformers_module
from electra.model.hf.types import TYPES
from electra.model.layers import gather_positions


def transformers_config(cfg: HFConfig, **extra: Any) -> Any:
    """The type's `transformers` config of `cfg` (`extra`: labels and the like)."""
    return transformers_module().AutoConfig.for_model(cfg.model_type, **hf_values(cfg), **extra)


def build_hf(cfg: HFConfig, auto: str, **extra: Any) -> nn.Module:
    """`transformers`' model of `cfg` for the Auto class `auto`, as `from_config` builds it, with
    SDPA where the type runs it."""
    kwargs = {"attn_implementation": "sdpa"} if TYPES[cfg.model_type].sdpa else {}
    return getattr(transformers_module(), auto).from_config(
        transformers_config(cfg, **extra), **kwargs
    )


class EncoderCalls:
    """Mixed into a `transformers` base model (`BertModel`, ...) that one of ours holds: the
    family's call, `(input_ids, token_type_ids, attention_mask, positions)` to the final states
    [B, T, H] (at `positions` [B, N], [B, N, H]); segments are passed only to a model that reads
    them (type_vocab_size 2 or more)."""

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, positions=None):
        sdpa = self.config._attn_implementation == "sdpa"
        if sdpa and attention_mask is not None and attention_mask.dim() == 2:
            # Given [B, T], transformers reads it back to see whether it pads anything
            # (`padding_mask.all()`), a host sync per call; a boolean [B, 1, 1, T] mask it takes
            # as given, and SDPA broadcasts it over heads and queries.
            attention_mask = attention_mask.bool()[:, None, None, :]
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and getattr(self.config, "type_vocab_size", 0) >= 2:
            kwargs["token_type_ids"] = token_type_ids
        hidden = super().forward(**kwargs).last_hidden_state
        return hidden if positions is None else gather_positions(hidden, positions)


@cache
def _calls(cls: type) -> type:
    return type(cls.__name__, (EncoderCalls, cls), {"__module__": cls.__module__})


class TransformersNetwork(nn.Module):
    """One of ours over a `transformers` model's children (`adopt`); constructed with an
    `HFConfig`, it is the class of the config's model type (`typed`)."""

    suffix: ClassVar[str] = ""  # the type's class is f"{prefix}{suffix}"
    _typed: ClassVar[bool] = False

    def __new__(cls, cfg: HFConfig | None = None, *args: Any, **kwargs: Any):
        if not cls._typed:  # (a copy or unpickling calls a typed class, without arguments)
            cls = typed(cls, cfg.model_type)
        return super().__new__(cls)

    def adopt(self, cfg: HFConfig, model: nn.Module, calls: bool = True) -> None:
        """`model`'s children become ours, under their names; with `calls`, its encoder takes the
        family's call (`EncoderCalls`)."""
        self.config = cfg
        self.base_model_prefix = model.base_model_prefix
        for name, child in model.named_children():
            self.add_module(name, child)
        if calls:
            base = getattr(self, self.base_model_prefix)
            base.__class__ = _calls(type(base))

    def share(self, embeddings: nn.Module | None) -> None:
        """Another network's embeddings (`electra.objectives.sharing`) in place of its own."""
        if embeddings is not None:
            encoder_of(self).embeddings = embeddings


@cache
def typed(base: type, model_type: str) -> type:
    """`base`'s class for `model_type`, named as `transformers` names the type's classes."""
    name = f"{TYPES[model_type].prefix}{base.suffix}"
    return type(name, (base,), {"__module__": base.__module__, "_typed": True})


class TransformersForMaskedLM(TransformersNetwork):
    """The type's `...ForMaskedLM`: the generator (and the MLM objective's model). The output
    layer is tied to the token table, as `transformers` ties it."""

    suffix = "ForMaskedLM"

    def __init__(self, cfg: HFConfig, embeddings: nn.Module | None = None):
        super().__init__()
        self.adopt(cfg, build_hf(cfg, "AutoModelForMaskedLM"))
        self.share(embeddings)
        self.tie_weights()

    def tie_weights(self) -> None:
        """The output weight is the encoder's token table (again, after the encoder changed)."""
        out, table = TYPES[self.config.model_type].tied
        owner, _, name = out.rpartition(".")
        source = self.get_submodule(f"{self.base_model_prefix}.{table.rpartition('.')[0]}")
        setattr(self.get_submodule(owner), name, source.weight)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, positions=None):
        """Logits [B, T, V]; with `positions` [B, K], only there [B, K, V] (the generator predicts
        only what was masked: the vocabulary head is most of its cost)."""
        return self.logits(self.hidden_at(input_ids, token_type_ids, attention_mask, positions))

    def hidden_at(self, input_ids, token_type_ids, attention_mask, positions):
        """The encoder's final states at `positions` (all of them for None)."""
        return encoder_of(self)(input_ids, token_type_ids, attention_mask, positions)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The type's vocabulary head on states [..., H]."""
        for name in TYPES[self.config.model_type].mlm_head:
            hidden = getattr(self, name)(hidden)
        return hidden


class TransformersForReplacedTokenDetection(TransformersNetwork):
    """The discriminator: the encoder, `dropout` and a one-logit `classifier` per token [B, T]:
    the type's `...ForTokenClassification` with one label, as `transformers` initialises it."""

    suffix = "ForReplacedTokenDetection"

    def __init__(self, cfg: HFConfig, embeddings: nn.Module | None = None):
        super().__init__()
        self.adopt(cfg, build_hf(cfg, "AutoModelForTokenClassification", num_labels=1))
        self.share(embeddings)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        hidden = encoder_of(self)(input_ids, token_type_ids, attention_mask)
        return self.classifier(self.dropout(hidden)).squeeze(-1)


def transformers_encoder(cfg: HFConfig) -> nn.Module:
    """The bare encoder as the heads hold it (no pooler), taking the family's call."""
    return encoder_of(TransformersForReplacedTokenDetection(cfg))


class DeltaEmbedding(nn.Module):
    """stop_gradient(the generator's token table) + a residual that starts at zero."""

    def __init__(self, source: nn.Embedding):
        super().__init__()
        self._source = (source,)  # a tuple keeps nn.Module from registering it
        self.padding_idx = source.padding_idx
        self.weight_delta = nn.Parameter(torch.zeros_like(source.weight))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        table = self._source[0].weight.detach()
        # The padding row learns nothing, as in the folded model's `nn.Embedding(padding_idx=)`.
        delta = F.embedding(input_ids, self.weight_delta, padding_idx=self.padding_idx)
        return F.embedding(input_ids, table) + delta


class GdesEmbeddings:
    """Mixed into the type's embeddings module whose token table is a `DeltaEmbedding`: what it
    folds into (`electra.objectives.sharing.plain`)."""

    def folded(self) -> dict[str, torch.Tensor]:
        words = self.word_embeddings
        with torch.no_grad():
            return {"word_embeddings.weight": words._source[0].weight + words.weight_delta}


@cache
def _gdes(cls: type) -> type:
    return type(cls.__name__, (GdesEmbeddings, cls), {"__module__": cls.__module__})


def gdes_embeddings(cfg: HFConfig, source: nn.Module) -> nn.Module:
    """GDES for the hf family: the discriminator's own embeddings module (positions, segments and
    norm its own, freshly initialised) whose token table is the generator's, stop-gradient, plus
    a residual (DeBERTa-v3 disentangles the token table)."""
    embeddings = transformers_encoder(cfg).embeddings
    embeddings.word_embeddings = DeltaEmbedding(source.word_embeddings)
    embeddings.__class__ = _gdes(type(embeddings))
    return embeddings


class TransformersCopyGate(nn.Module):
    """All-Tokens MLM's per-token copy gate in the discriminator's head shape: dropout and one
    linear logit, initialised as `transformers` initialises a token classifier."""

    def __init__(self, cfg: HFConfig):
        super().__init__()
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, 1)
        nn.init.normal_(self.classifier.weight, std=cfg.initializer_range)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(hidden)).squeeze(-1)


class _IsLayer(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        kind = type(obj)
        return kind.__module__.startswith("transformers.") and kind.__name__ in {
            t.layer for t in TYPES.values()
        }


class TransformersLayer(metaclass=_IsLayer):
    """What FSDP shards one by one: an encoder layer of any of the types (`isinstance` only)."""


def layerwise_depth(name: str, n: int) -> int:
    """The depth of parameter `name` for fine-tuning's layer-wise LR: the embeddings (and
    DeBERTa's relative-position table, read by every layer) 0, layer i at i + 1, the head (a
    pooler included) n + 1."""
    if m := re.match(r"\w+\.(?:encoder|transformer)\.layer\.(\d+)\.", name):
        return int(m.group(1)) + 1
    if re.match(r"\w+\.(?:embeddings|encoder\.rel_embeddings|encoder\.LayerNorm)\.", name):
        return 0
    base, _, rest = name.partition(".")
    if base in {t.base for t in TYPES.values()} and not rest.startswith("pooler."):
        raise ElectraError(f"no layer-wise LR depth for parameter {name}")
    return n + 1


def base_model_state(cfg: HFConfig, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An encoder's weights as the type's bare model (`AutoModel`) holds them: with its pooler
    where it has one, as `transformers` initialises it (no objective here trains a pooler)."""
    if not TYPES[cfg.model_type].pooler:
        return state
    with torch.random.fork_rng():
        torch.manual_seed(0)  # the same pooler every export
        model = build_hf(cfg, "AutoModel")
    pooler = {k: v for k, v in model.state_dict().items() if k.startswith("pooler.")}
    return {**state, **pooler}
