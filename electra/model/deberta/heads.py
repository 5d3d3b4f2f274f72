"""Fine-tuning heads on the DeBERTa-v3 encoder, each the layout of its `transformers` namesake
(module for module, key for key), so that a fine-tuned model exports by its own keys and an HF
folder of these classes loads here by name:

- `DebertaV2ForSequenceClassification`: HF's `ContextPooler` (`pooler`: the first token, its
  dropout at `pooler_dropout`, `dense`, `pooler_hidden_act`), `dropout`, `classifier`. One output
  is a regression.
- `DebertaV2ForTokenClassification`: `dropout` and `classifier` on every token.
- `DebertaV2ForQuestionAnswering`: `qa_outputs` on every token, to two logits, start and end
  (HF's span head; the official XLNet-style QA head is the electra family's only).

The heads' dropout is `hidden_dropout_prob`, HF's when a config sets no `cls_dropout` (no field
of ours), so that --dropout (the family's `dropout_fields`) reaches it. Called as every family's
heads are (`electra.model.heads`): `(input_ids, token_type_ids, attention_mask)`; DeBERTa-v3 has
no segments, so token_type_ids is ignored. Initialised as HF initialises them
(`electra.model.deberta.modeling.init_weights`).
"""

from __future__ import annotations

import torch
from torch import nn

from electra.model.deberta.config import DebertaV3Config
from electra.model.deberta.modeling import DebertaV2Model, init_weights
from electra.model.layers import activation


class ContextPooler(nn.Module):
    """HF's pooler: the first token's state, dropout, dense, activation (in that order)."""

    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.pooler_dropout)
        self.act = activation(cfg.pooler_hidden_act)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(self.dropout(hidden[:, 0])))


class DebertaV2WithHead(nn.Module):
    """The encoder under HF's prefix `deberta`, and the config the head was built with."""

    base_model_prefix = "deberta"

    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.config = cfg
        self.deberta = DebertaV2Model(cfg)


class DebertaV2ForSequenceClassification(DebertaV2WithHead):
    def __init__(self, cfg: DebertaV3Config, num_labels: int):
        super().__init__(cfg)
        self.pooler = ContextPooler(cfg)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        init_weights(self, cfg.initializer_range)

    def forward(
        self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, cls_index=None
    ) -> torch.Tensor:
        """Logits [B, num_labels]. Packed rows (`position_ids`, `cls_index`) are the electra
        family's: fine-tuning does not pack for this one (`electra.finetuning.loop`)."""
        if position_ids is not None or cls_index is not None:
            raise ValueError("the deberta-v3 family's classifier takes unpacked rows")
        hidden = self.deberta(input_ids, None, attention_mask)
        return self.classifier(self.dropout(self.pooler(hidden)))


class DebertaV2ForTokenClassification(DebertaV2WithHead):
    def __init__(self, cfg: DebertaV3Config, num_labels: int):
        super().__init__(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)
        init_weights(self, cfg.initializer_range)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        """Logits [B, T, num_labels]."""
        return self.classifier(self.dropout(self.deberta(input_ids, None, attention_mask)))


class DebertaV2ForQuestionAnswering(DebertaV2WithHead):
    """Start and end logits from every token's state; nothing is masked in the model (a window's
    "no answer" is start and end at position 0), as in HF."""

    def __init__(self, cfg: DebertaV3Config):
        super().__init__(cfg)
        self.qa_outputs = nn.Linear(cfg.hidden_size, 2)
        init_weights(self, cfg.initializer_range)

    def forward(
        self, input_ids, token_type_ids=None, attention_mask=None
    ) -> dict[str, torch.Tensor]:
        """Start and end logits [B, T]."""
        hidden = self.deberta(input_ids, None, attention_mask)
        start, end = self.qa_outputs(hidden).unbind(-1)
        return {"start_logits": start, "end_logits": end}
