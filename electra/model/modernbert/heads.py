"""Fine-tuning heads on the ModernBERT-architecture encoder (issue 38), each the layout of its
`transformers` namesake, so that a fine-tuned model exports by its own keys and an HF folder of
these classes loads here by name:

- `ModernBertForSequenceClassification`: the [CLS] vector (or, with `pooling="mean"`, the mean of
  the real tokens' states, HF's `classifier_pooling`), then `head` (dense -> act -> norm), `drop`,
  `classifier`. One output is a regression.
- `ModernBertForTokenClassification`: `head`, `drop` and `classifier` on every token.
- `ModernBertForQuestionAnswering`: the same on every token, to two logits, start and end (HF's
  span head; the official XLNet-style QA head is the electra family's only).

Called as the electra family's heads are (`electra.model.heads`): `(input_ids, token_type_ids,
attention_mask)`; the family has no segments, so token_type_ids is ignored. Each is the family's
`ModernBertWithClassifier` (the discriminator's layout), initialised as HF initialises them.
"""

from __future__ import annotations

import torch

from electra.errors import ElectraError
from electra.model.modernbert.config import ModernConfig
from electra.model.modernbert.modeling import ModernBertWithClassifier

POOLINGS = ("cls", "mean")  # HF's `classifier_pooling`


class ModernBertForSequenceClassification(ModernBertWithClassifier):
    def __init__(self, cfg: ModernConfig, num_labels: int, pooling: str = "cls"):
        super().__init__(cfg, num_labels)
        if pooling not in POOLINGS:
            raise ElectraError(
                f"classifier_pooling={pooling!r} is not supported: use {' or '.join(POOLINGS)}"
            )
        self.pooling = pooling

    def forward(
        self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, cls_index=None
    ) -> torch.Tensor:
        """Logits [B, num_labels]. Packed rows (`position_ids`, `cls_index`) are the electra
        family's: fine-tuning does not pack for this one (`electra.finetuning.loop`)."""
        if position_ids is not None or cls_index is not None:
            raise ValueError("the modern family's classifier takes unpacked rows")
        hidden = self.model(input_ids, None, attention_mask)
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:  # the real tokens' mean, as HF's
            if attention_mask is None:
                attention_mask = torch.ones(hidden.shape[:2], device=hidden.device)
            mask = attention_mask.to(hidden.dtype)[..., None]
            pooled = (hidden * mask).sum(1) / mask.sum(1)
        return self.logits(pooled)


class ModernBertForTokenClassification(ModernBertWithClassifier):
    def __init__(self, cfg: ModernConfig, num_labels: int):
        super().__init__(cfg, num_labels)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        """Logits [B, T, num_labels]."""
        return self.logits(self.model(input_ids, None, attention_mask))


class ModernBertForQuestionAnswering(ModernBertWithClassifier):
    """Start and end logits from every token's head output; nothing is masked in the model (a
    window's "no answer" is start and end at position 0), as in HF and in the electra family's
    `ElectraForSpanQuestionAnswering`."""

    def __init__(self, cfg: ModernConfig):
        super().__init__(cfg, 2)

    def forward(
        self, input_ids, token_type_ids=None, attention_mask=None
    ) -> dict[str, torch.Tensor]:
        """Start and end logits [B, T]."""
        start, end = self.logits(self.model(input_ids, None, attention_mask)).unbind(-1)
        return {"start_logits": start, "end_logits": end}
