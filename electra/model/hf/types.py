"""The `transformers` model types the hf family runs (docs/any-encoder.md), plain data: for each,
the class-name prefix, the attribute its heads hold the encoder under, the modules of its masked-LM
head in order, its tied output weight, and the config keys that differ from BERT's names.

Adding a type whose classes follow BERT's layout (a `...ForMaskedLM` with its head in named
modules, `...ForTokenClassification` as dropout + linear) is one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from electra.errors import ElectraError


@dataclass(frozen=True)
class HFType:
    model_type: str
    prefix: str  # class names: f"{prefix}ForMaskedLM", f"{prefix}Model", ...
    base: str  # `base_model_prefix`: the attribute every head holds the encoder under
    mlm_head: tuple[str, ...]  # the masked LM's head modules, applied in order to the states
    tied: tuple[str, str]  # (output weight, the token table it is tied to), without the base
    # Our field name -> the key of HF's config where it differs (DistilBERT's `dim`, ...).
    keys: dict[str, str] = field(default_factory=dict)
    # Our fields the type's config has no key for, and the value the architecture fixes.
    fixed: dict[str, object] = field(default_factory=dict)
    # RoBERTa's positions start after the padding id: HF's `max_position_embeddings` is the
    # tokens a row holds plus pad_token_id + 1.
    position_offset: bool = False
    pooler: bool = False  # whether its bare encoder (`...Model`) holds a pooler
    # Other HF classes whose weights hold the encoder under `base` (their heads left behind).
    encoder_classes: tuple[str, ...] = ()
    sdpa: bool = True  # whether `transformers` runs it with SDPA (else its eager attention)
    layer: str = ""  # its encoder layer's class (what FSDP shards one by one)
    title: str = ""  # what messages and model cards call it
    classifier_out: str = "classifier"  # the linear layer giving a sequence classifier's logits
    # The least type_vocab_size its embeddings take (BERT's and RoBERTa's always add a segment
    # table, so 1; DeBERTa's adds none at 0).
    min_type_vocab: int = 1


_ROBERTA = {
    "base": "roberta",
    "mlm_head": ("lm_head",),
    "tied": ("lm_head.decoder.weight", "embeddings.word_embeddings.weight"),
    "position_offset": True,
    "pooler": True,
    "classifier_out": "classifier.out_proj",
}

TYPES = {
    t.model_type: t
    for t in (
        HFType(
            "bert",
            "Bert",
            "bert",
            ("cls",),
            ("cls.predictions.decoder.weight", "embeddings.word_embeddings.weight"),
            pooler=True,
            encoder_classes=("BertForPreTraining",),
            layer="BertLayer",
            title="BERT",
        ),
        HFType("roberta", "Roberta", layer="RobertaLayer", title="RoBERTa", **_ROBERTA),
        HFType(
            "xlm-roberta", "XLMRoberta", layer="XLMRobertaLayer", title="XLM-RoBERTa", **_ROBERTA
        ),
        HFType("camembert", "Camembert", layer="CamembertLayer", title="CamemBERT", **_ROBERTA),
        HFType(
            "distilbert",
            "DistilBert",
            "distilbert",
            ("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector"),
            ("vocab_projector.weight", "embeddings.word_embeddings.weight"),
            keys={
                "hidden_size": "dim",
                "num_hidden_layers": "n_layers",
                "num_attention_heads": "n_heads",
                "intermediate_size": "hidden_dim",
                "hidden_act": "activation",
                "hidden_dropout_prob": "dropout",
                "attention_probs_dropout_prob": "attention_dropout",
            },
            fixed={"type_vocab_size": 0, "layer_norm_eps": 1e-12},
            layer="TransformerBlock",
            title="DistilBERT",
        ),
    )
}

# Types whose folders go to a native family of the same `model_type` (faster, ours), named here
# so that messages list them among the supported ones.
NATIVE = ("electra", "modernbert", "deberta-v2")


def hf_type(model_type: str, source: str = "model.model_type") -> HFType:
    """The entry of `model_type`; a one-line refusal naming the supported types."""
    if model_type not in TYPES:
        raise ElectraError(
            f"{source}={model_type!r} is not a supported transformers encoder: use one of "
            f"{', '.join((*TYPES, *NATIVE))}"
        )
    return TYPES[model_type]
