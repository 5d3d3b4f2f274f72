"""The DeBERTa-v3 family as `transformers` names it (`DebertaV2Config`, model_type `deberta-v2`,
`DebertaV2ForMaskedLM`, ...), and its `config.json` read back.

`transformers` reads `relative_attention`, `position_buckets`, `share_att_key`, `norm_rel_ebd`,
`pos_att_type` and `max_relative_positions` with defaults (several with `getattr`) that are not
DeBERTa-v3's, so every file written here states them. A file that sets what the family does not
compute (relative attention off, absolute positions in the input, token types, a convolution, an
embedding size of its own, separate position projections) is refused in one line naming the file
and the key.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from electra.errors import ElectraError
from electra.model.deberta.config import FIXED, DebertaV3Config
from electra.model.family import Ref
from electra.model.hf_names import HFNames, TaskHead, config_from_fields, known_fields

_HOOKS = "electra.model.deberta.hf_heads"
# Our fields that are no key of DebertaV2Config.
_OURS_ONLY = ("arch", "enhanced_mask_decoder")


def config_values(cfg: DebertaV3Config) -> dict[str, Any]:
    """The DebertaV2Config keys of `cfg`: its fields (but ours alone) and the fixed settings;
    `enhanced_mask_decoder` where on, so that electra reads a run's generator folder back whole
    (`transformers` keeps an unknown key and holds no decoder: export writes it off)."""
    values = {k: v for k, v in asdict(cfg).items() if k not in _OURS_ONLY}
    ours = {"enhanced_mask_decoder": True} if cfg.enhanced_mask_decoder else {}
    return {**FIXED, **values, "pooler_hidden_size": cfg.hidden_size, "legacy": True, **ours}


def deberta_config_from_hf(raw: dict[str, Any], file: Path) -> DebertaV3Config:
    """The `DebertaV3Config` of a DebertaV2Config `config.json` (`raw`, read from `file`)."""
    for key, value in FIXED.items():
        given = raw.get(key, _HF_DEFAULTS.get(key, value))
        if _normal(key, given) != _normal(key, value):
            raise ElectraError(
                f"{file}: {key}={given!r} is not DeBERTa-v3's ({key}={value!r}), the only "
                "architecture the deberta-v3 family computes: use a DeBERTa-v3 or mDeBERTa-v3 folder"
            )
    checks = (
        ("embedding_size", raw.get("embedding_size", raw.get("hidden_size"))),
        ("pooler_hidden_size", raw.get("pooler_hidden_size", raw.get("hidden_size"))),
        ("attention_head_size", None),
    )
    for key, same in checks:
        if key in raw and raw[key] is not None and raw[key] != same:
            raise ElectraError(
                f"{file}: {key}={raw[key]} differs from hidden_size={raw.get('hidden_size')}: the "
                "deberta-v3 family computes these at the hidden width only"
            )
    if raw.get("position_buckets") is None:
        raise ElectraError(
            f"{file}: no position_buckets: `transformers` then reads -1 (distances clipped, no log "
            "buckets), which the deberta-v3 family does not compute: add DeBERTa-v3's "
            '"position_buckets": 256 if the weights are its'
        )
    # A key left out is what `transformers` takes for it, not our (deberta-v3-base's) default.
    values = {**_HF_FIELDS, **known_fields(DebertaV3Config, raw)}
    return config_from_fields(DebertaV3Config, values, file)


# What `transformers` takes for a key a `config.json` leaves out (its DebertaV2Config defaults
# and `getattr` fallbacks): a file written for DeBERTa-v2/v3 by other tools may omit them.
_HF_DEFAULTS = {
    "relative_attention": False,
    "pos_att_type": None,
    "share_att_key": False,
    "position_biased_input": True,
    "type_vocab_size": 0,
    "conv_kernel_size": 0,
}

# Our fields whose default differs from what `transformers` takes where a file leaves them out
# (DebertaV2Config's defaults are DeBERTa-v2-xxlarge's; `norm_rel_ebd` is read with `getattr`).
_HF_FIELDS = {
    "hidden_size": 1536,
    "num_hidden_layers": 24,
    "num_attention_heads": 24,
    "intermediate_size": 6144,
    "norm_rel_ebd": "none",
}


def _normal(key: str, value: Any) -> Any:
    """`pos_att_type` in any of HF's spellings ("p2c|c2p", a list) as a set; others as given."""
    if key != "pos_att_type":
        return value
    if isinstance(value, str):
        value = value.lower().split("|")
    return frozenset(x.strip() for x in value or ())


def _head(kind: str, auto: str, pipeline: str, description: str) -> TaskHead:
    name = f"DebertaV2For{kind}"  # our class (`electra.model.deberta.heads`) has HF's name
    return TaskHead(name, name, auto, pipeline, description)


HF = HFNames(
    model_type="deberta-v2",
    discriminator="DebertaV2ForPreTraining",
    generator="DebertaV2ForMaskedLM",
    tied=(),  # our MLM head reads the token table: no tied copy to leave out
    encoder="DebertaV2Model",
    heads=(
        _head(
            "SequenceClassification",
            "AutoModelForSequenceClassification",
            "text-classification",
            "classification head",
        ),
        _head(
            "TokenClassification",
            "AutoModelForTokenClassification",
            "token-classification",
            "token classification head",
        ),
        _head(
            "QuestionAnswering",
            "AutoModelForQuestionAnswering",
            "question-answering",
            "question answering head",
        ),
    ),
    discriminator_as="DebertaV2ForTokenClassification",
    token_types=False,
    config_values=config_values,
    read_config=deberta_config_from_hf,
    # Weights `transformers` ties or derives (the MLM decoder, a position-id buffer) and what the
    # official checkpoints carry beside the encoder (the RTD and enhanced-mask-decoder heads of
    # the pretraining code under mask_predictions. and lm_predictions., an absolute table the
    # encoder never reads), as `transformers` ignores them.
    dropped_keys=(
        "cls.predictions.decoder.weight",
        "cls.predictions.decoder.bias",
        "deberta.embeddings.position_ids",
        "deberta.embeddings.position_embeddings.weight",
        "mask_predictions.",
        "lm_predictions.",
    ),
    # `transformers`' MLM head with `legacy` false: ours (`cls.predictions`) under other names.
    renamed_keys=(
        ("lm_predictions.lm_head.dense.", "cls.predictions.transform.dense."),
        ("lm_predictions.lm_head.LayerNorm.", "cls.predictions.transform.LayerNorm."),
        ("lm_predictions.lm_head.bias", "cls.predictions.bias"),
    ),
    # The relative table: 2 * position_buckets rows.
    row_fields=(("encoder.rel_embeddings.weight", "position_buckets", 2),),
    not_exported=(
        (
            "enhanced_mask_decoder",
            "the generator's enhanced mask decoder is left out (transformers' "
            "DebertaV2ForMaskedLM has none): its logits here are the plain stack's, not the "
            "trained generator's (electra's own generator/ folder keeps it)",
        ),
    ),
    token_id_keys=(("pad_token_id", "pad"),),
    card_title="A DeBERTa-v3 encoder",
    run_adjective="DeBERTa-v3",
    export_state=Ref(_HOOKS, "export_state"),
    import_classifier=Ref(_HOOKS, "import_classifier"),
    card_note=Ref(_HOOKS, "card_note"),
)
