"""The hf family's names in `transformers`: one `HFNames` per model type (`electra.model.hf.types`),
each the type's own classes. Our discriminator has no class there (ours is named
`...ForReplacedTokenDetection`); its folder is the type's `...ForTokenClassification` with two
labels (`electra.model.hf_names.RTD_LABELS`), which holds its one-logit head exactly.
"""

from __future__ import annotations

from typing import Any

from electra.model.family import Ref
from electra.model.hf.config import config_from_json
from electra.model.hf.types import TYPES, HFType
from electra.model.hf_names import HFNames, TaskHead

_HOOKS = "electra.model.hf.hf_heads"
_HEADS = (
    ("SequenceClassification", "text-classification", "classification head"),
    ("TokenClassification", "token-classification", "token classification head"),
    ("QuestionAnswering", "question-answering", "question answering head"),
)


def _max_length(kind: HFType):
    def of(config: dict[str, Any]) -> int:
        n = int(config["max_position_embeddings"])
        return n - int(config.get("pad_token_id") or 0) - 1 if kind.position_offset else n

    return of


def _names(kind: HFType) -> HFNames:
    p = kind.prefix
    roberta = kind.position_offset  # RoBERTa's bos/eos are its <s> and </s>, [CLS] and [SEP]
    return HFNames(
        model_type=kind.model_type,
        discriminator=f"{p}ForReplacedTokenDetection",
        generator=f"{p}ForMaskedLM",
        tied=(kind.tied[0], f"{kind.base}.{kind.tied[1]}"),
        encoder=f"{p}Model",
        heads=tuple(
            TaskHead(f"{p}For{n}", f"{p}For{n}", f"AutoModelFor{n}", pipeline, description)
            for n, pipeline, description in _HEADS
        ),
        discriminator_as=f"{p}ForTokenClassification",
        token_types=kind.model_type == "bert",
        token_id_keys=(("bos_token_id", "cls"), ("eos_token_id", "sep")) if roberta else (),
        max_length_of=_max_length(kind),
        read_config=config_from_json,
        config_values=Ref(_HOOKS, "config_values"),
        # Buffers older `transformers` versions saved, and BERT's next-sentence head, which a
        # `BertForPreTraining` checkpoint holds beside its MLM head and nothing here reads.
        dropped_keys=(
            f"{kind.base}.embeddings.position_ids",
            "cls.seq_relationship.weight",
            "cls.seq_relationship.bias",
        ),
        other_encoders=tuple((c, "pretraining heads") for c in kind.encoder_classes),
        card_title=f"A {kind.title} encoder",
        run_adjective="transformers",
        export_state=Ref(_HOOKS, "export_state"),
        import_classifier=Ref(_HOOKS, "import_classifier"),
        card_note=Ref(_HOOKS, "card_note"),
        base_model_state=Ref("electra.model.hf.modeling", "base_model_state"),
    )


HF = tuple(_names(kind) for kind in TYPES.values())
