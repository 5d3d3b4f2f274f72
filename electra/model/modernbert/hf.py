"""The modern family as `transformers` names it (`ModernBertConfig`, `ModernBertForMaskedLM`, ...),
and its `config.json` read back whichever `transformers` version wrote it.

ModernBERT's layer pattern and rotary thetas have two spellings: 4.x's `global_attn_every_n_layers`,
`global_rope_theta` and `local_rope_theta`, and 5.x's `layer_types` and `rope_parameters` (which 5.x
prefers where both are present). A file with either set reads; one whose two sets disagree, or whose
settings our modules do not compute (biases, rope scaling, another layer pattern), is refused with
one line naming the file and the key, rather than loaded into a model that computes something else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from electra.errors import ElectraError
from electra.model.configs import GLOBAL, LOCAL
from electra.model.family import Ref
from electra.model.hf_names import HFNames, TaskHead, config_from_fields, known_fields
from electra.model.modernbert.config import ModernConfig, layer_types

_HOOKS = "electra.model.modernbert.hf_heads"
# HF ModernBertConfig settings our modules hard-wire, with the only value they compute.
_MODERN_FIXED = {
    "attention_bias": False,
    "mlp_bias": False,
    "norm_bias": False,
    "classifier_bias": False,
    "decoder_bias": True,
}


def modernbert_5x_keys(cfg: Any) -> dict[str, Any]:
    """The layer pattern and thetas as transformers 5.x's ModernBertConfig keeps them
    (`layer_types`, `rope_parameters`), beside the 4.x keys (`global_attn_every_n_layers`,
    `*_rope_theta`) of the model's own fields: 4.x reads only those, 5.x prefers these, so each
    version builds the same model from one file."""
    return {
        "layer_types": [cfg.layer_type(i) for i in range(cfg.num_hidden_layers)],
        "rope_parameters": {
            kind: {"rope_theta": cfg.rope_theta(kind), "rope_type": "default"}
            for kind in (GLOBAL, LOCAL)
        },
    }


def modern_config_from_hf(raw: dict[str, Any], file: Path) -> ModernConfig:
    """The `ModernConfig` of a ModernBertConfig `config.json` of 4.x or 5.x (`raw`, from `file`)."""
    for key, value in _MODERN_FIXED.items():
        if raw.get(key, value) != value:
            raise ElectraError(
                f"{file}: {key}={raw[key]} is not supported (electra's ModernBERT computes "
                f"{key}={value}, HF's default): use a model saved with it"
            )
    values = known_fields(ModernConfig, raw)
    every_n = _every_n(raw, file)
    if every_n is not None:
        values["global_attn_every_n_layers"] = every_n
    values.update(_thetas(raw, file))
    return config_from_fields(ModernConfig, values, file)


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


def _modern_head(kind: str, auto: str, pipeline: str, description: str) -> TaskHead:
    name = f"ModernBertFor{kind}"  # our class (`electra.model.modernbert.heads`) has HF's name
    return TaskHead(name, name, auto, pipeline, description)


# The ModernBERT architecture (`electra.model.modernbert.modeling`). HF has no pretraining class: the
# discriminator goes out as a two-label token classifier, which `AutoModelForTokenClassification`
# loads as it is. The constant fields are HF's defaults, written so that a reader of the file sees
# that the model has no biases (our modules have none) and ties its decoder.
HF = HFNames(
    model_type="modernbert",
    discriminator="ModernBertForPreTraining",
    generator="ModernBertForMaskedLM",
    tied=("decoder.weight", "model.embeddings.tok_embeddings.weight"),
    encoder="ModernBertModel",
    heads=(
        _modern_head(
            "SequenceClassification",
            "AutoModelForSequenceClassification",
            "text-classification",
            "classification head",
        ),
        _modern_head(
            "TokenClassification",
            "AutoModelForTokenClassification",
            "token-classification",
            "token classification head",
        ),
        _modern_head(
            "QuestionAnswering",
            "AutoModelForQuestionAnswering",
            "question-answering",
            "question answering head",
        ),
    ),
    config_extra=(
        ("attention_bias", False),
        ("mlp_bias", False),
        ("norm_bias", False),
        ("classifier_bias", False),
        ("decoder_bias", True),
        ("classifier_pooling", "cls"),
        ("tie_word_embeddings", True),
    ),
    discriminator_as="ModernBertForTokenClassification",
    token_types=False,
    derived_keys=modernbert_5x_keys,
    max_length_key="max_position_embeddings",  # rotary: the model reads up to its positions
    # ModernBERT's bos/eos are its [CLS]/[SEP] (HF's defaults 50281/50282 are those tokens).
    token_id_keys=(
        ("bos_token_id", "cls"),
        ("eos_token_id", "sep"),
        ("cls_token_id", "cls"),
        ("sep_token_id", "sep"),
    ),
    read_config=modern_config_from_hf,
    card_title="A ModernBERT-architecture encoder",
    run_adjective="modern",
    # HF's own heads: the weights go as they are (a regression's logit scaled to the value).
    export_state=Ref(_HOOKS, "export_state"),
    import_classifier=Ref(_HOOKS, "import_classifier"),
    card_note=Ref(_HOOKS, "card_note"),
)
