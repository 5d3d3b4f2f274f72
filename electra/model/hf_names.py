"""What a family is called in `transformers` (`HFNames`, a `Family`'s `hf`): the classes of its
pretraining networks, its bare encoder and its task heads, and the `config.json` that names them.
Import, export and `electra export`'s message ask these; each family declares its own in its
folder (`electra/model/<family>/hf.py`).

Names only (strings), no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from electra.errors import ElectraError
from electra.model.family import families, family_of

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
class HFNames:
    """The `transformers` names of one encoder family (its `model_type`): a `Family`'s `hf`."""

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


def hf_families() -> dict[str, HFNames]:
    """The Hugging Face side of each registered family that has one, by `model_type`."""
    return {f.hf.model_type: f.hf for f in families().values() if f.hf is not None}


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
    return family.hf
