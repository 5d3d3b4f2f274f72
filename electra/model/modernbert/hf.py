"""The modern family as `transformers` names it (`ModernBertConfig`, `ModernBertForMaskedLM`, ...)."""

from __future__ import annotations

from typing import Any

from electra.model.configs import GLOBAL, LOCAL
from electra.model.hf_names import HFNames, TaskHead


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


def _modern_head(kind: str, auto: str, pipeline: str, description: str) -> TaskHead:
    name = f"ModernBertFor{kind}"  # our class (`electra.model.modernbert.heads`) has HF's name
    return TaskHead(name, name, auto, pipeline, description)


# The ModernBERT architecture (`electra.model.modernbert.modeling`). HF has no pretraining class: the
# discriminator goes out as a two-label token classifier, which `AutoModelForTokenClassification`
# loads as it is. The constant fields are HF's defaults, written so that a reader of the file sees
# that the model has no biases (our modules have none) and ties its decoder.
HF = HFNames(
    model_type="modernbert",
    title="ModernBERT",
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
)
