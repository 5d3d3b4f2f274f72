"""Fine-tuning heads of the hf family: each is `transformers`' own task class of the model type
(`BertForSequenceClassification`, `RobertaForTokenClassification`, `XLMRobertaForQuestionAnswering`,
...), its children adopted and its own forward run, so that a fine-tuned model is that class's
weights and `pipeline()` computes what `electra predict` does. Called as every family's heads
are (`electra.model.heads`): `(input_ids, token_type_ids, attention_mask)`; segments go only to a
model that reads them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import torch

from electra.model.hf.config import HFConfig
from electra.model.hf.modeling import TransformersNetwork, build_hf, transformers_config

# The heads' own dropout keys, which the family's `dropout_fields` (what --dropout sets) leave
# out: DistilBERT's classifier 0.2 and QA 0.1, or a folder's own classifier_dropout.
_HEAD_DROPOUT = ("classifier_dropout", "cls_dropout", "seq_classif_dropout", "qa_dropout")


def head_config(cfg: HFConfig) -> HFConfig:
    """`cfg` with the head's dropout at the encoder's, so that --dropout means the same on every
    type (keys left unset already follow it in `transformers`)."""
    defaults, extra = transformers_config(cfg), cfg.extra
    keys = [k for k in _HEAD_DROPOUT if k in extra or getattr(defaults, k, None) is not None]
    if not keys:
        return cfg
    extra |= dict.fromkeys(keys, cfg.hidden_dropout_prob)
    return replace(cfg, hf_extra=json.dumps(extra, sort_keys=True))


class TransformersHead(TransformersNetwork):
    """`transformers`' task model of `auto`, whose forward ours calls (held apart, its children
    ours)."""

    auto = ""

    def __init__(self, cfg: HFConfig, num_labels: int = 2):
        super().__init__()
        model = build_hf(head_config(cfg), self.auto, num_labels=num_labels)
        self.adopt(cfg, model, calls=False)
        self._hf = (model,)  # a tuple keeps nn.Module from registering it twice

    def train(self, mode: bool = True) -> TransformersHead:
        self._hf[0].training = mode
        return super().train(mode)

    def run(self, input_ids, token_type_ids, attention_mask) -> Any:
        kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and self.config.takes_token_types:
            kwargs["token_type_ids"] = token_type_ids
        return self._hf[0](**kwargs)


class TransformersForSequenceClassification(TransformersHead):
    """Logits [B, num_labels] by the type's own pooling and head (BERT's pooler, RoBERTa's
    dense -> tanh head, DeBERTa's context pooler, ...). One output is a regression."""

    suffix = "ForSequenceClassification"
    auto = "AutoModelForSequenceClassification"

    def forward(
        self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, cls_index=None
    ) -> torch.Tensor:
        if position_ids is not None or cls_index is not None:
            raise ValueError("the hf family's classifier takes unpacked rows")
        return self.run(input_ids, token_type_ids, attention_mask).logits


class TransformersForTokenClassification(TransformersHead):
    suffix = "ForTokenClassification"
    auto = "AutoModelForTokenClassification"

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        """Logits [B, T, num_labels]."""
        return self.run(input_ids, token_type_ids, attention_mask).logits


class TransformersForQuestionAnswering(TransformersHead):
    """Start and end logits [B, T]: the type's span head."""

    suffix = "ForQuestionAnswering"
    auto = "AutoModelForQuestionAnswering"

    def __init__(self, cfg: HFConfig):
        super().__init__(cfg, 2)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> dict:
        out = self.run(input_ids, token_type_ids, attention_mask)
        return {"start_logits": out.start_logits, "end_logits": out.end_logits}
