"""Encoder families as `transformers` names them: for each, the classes of its pretraining networks,
its bare encoder and its task heads, and the `config.json` that names them. What import, export
and `electra export`'s message need to know of a family is here, so a new family (a second
encoder) is one more `Family` in `FAMILIES`, not an edit of several tables keyed by class names.

Names only (strings): the modules that build our networks are `electra.model`'s. The family of
a model is its config's `arch` (`family_for`), the same name as `electra.model.registry`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from electra.model_config import GLOBAL, LOCAL

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


@dataclass(frozen=True)
class Family:
    """The `transformers` names of one encoder family (its `model_type`)."""

    model_type: str
    title: str  # the family's name in messages
    # Our discriminator's class (`electra.hf.pretrained.ROLES`' first folder). Where `transformers`
    # has no such class, `discriminator_as` is the class its folder is written as (two labels,
    # `RTD_LABELS`) and `read_model_config` reads such a folder back as `discriminator`.
    discriminator: str
    generator: str
    # The generator's output weight and the token table it is tied to: `transformers` leaves the
    # first out of the file.
    tied: tuple[str, str]
    encoder: str  # the bare encoder, as `AutoModel` saves it
    heads: tuple[TaskHead, ...]
    # config.json fields that `transformers` reads and our ModelConfig leaves implicit.
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

    @property
    def task_heads(self) -> tuple[str, ...]:
        """The `transformers` task classes, in the order of `heads`."""
        return tuple(h.hf_class for h in self.heads)

    def exported_head(self, ours: str) -> TaskHead | None:
        """The head whose export `ours` (our model class) becomes; None where HF has none."""
        return next((h for h in self.heads if h.ours == ours), None)

    def tokenizer_max_length(self, config: dict[str, Any]) -> int:
        """The `model_max_length` of the tokenizer of a model folder whose config is `config`."""
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
        fields = {k: v for k, v in asdict(model_config).items() if k != "arch"}
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
            **fields,
            **(self.derived_keys(model_config) if self.derived_keys else {}),
            **ids,
            **extra,
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


ELECTRA = Family(
    model_type="electra",
    title="ELECTRA",
    discriminator="ElectraForPreTraining",
    generator="ElectraForMaskedLM",
    tied=("generator_lm_head.weight", "electra.embeddings.word_embeddings.weight"),
    encoder="ElectraModel",
    heads=(
        TaskHead(
            "ElectraForSequenceClassification",
            "ElectraForSequenceClassification",
            "AutoModelForSequenceClassification",
            "text-classification",
            "classification head",
        ),
        TaskHead(
            "ElectraForTokenClassification",
            "ElectraForTokenClassification",
            "AutoModelForTokenClassification",
            "token-classification",
            "token classification head",
        ),
        # Our linear start/end head is HF's QA class; the XLNet-style head (our
        # `ElectraForQuestionAnswering`) has no HF counterpart, so it is no entry here.
        TaskHead(
            "ElectraForSpanQuestionAnswering",
            "ElectraForQuestionAnswering",
            "AutoModelForQuestionAnswering",
            "question-answering",
            "question answering head",
        ),
    ),
    config_extra=(("position_embedding_type", "absolute"),),
)


def _modern_head(kind: str, auto: str, pipeline: str, description: str) -> TaskHead:
    name = f"ModernBertFor{kind}"  # our class (`electra.model.modern_heads`) has HF's name
    return TaskHead(name, name, auto, pipeline, description)


# The ModernBERT architecture (`electra.model.modernbert`). HF has no pretraining class: the
# discriminator goes out as a two-label token classifier, which `AutoModelForTokenClassification`
# loads as it is. The constant fields are HF's defaults, written so that a reader of the file sees
# that the model has no biases (our modules have none) and ties its decoder.
MODERNBERT = Family(
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

# Keyed by `model_type`, which is also our `model.arch` name of the family.
FAMILIES = {f.model_type: f for f in (ELECTRA, MODERNBERT)}


def family_for(model_config: Any) -> Family:
    """The family of a model config (`ModelConfig` or `ModernConfig`), by its `arch`."""
    return FAMILIES[model_config.arch]


def auto_class(architecture: str) -> str:
    """The `transformers` Auto class that loads a folder of `architecture` (the class itself
    where it is not a task head: `ElectraForPreTraining` loads with its own class)."""
    for family in FAMILIES.values():
        if architecture in family.task_heads:
            return family.task_head(architecture).auto_class
    return architecture
