"""Fine-tuning heads on the ELECTRA encoder (docs/specification.md §Fine-tuning), named as in
Hugging Face where a counterpart exists so the encoder's weights load by name.

- `ElectraForSequenceClassification`: dropout and one linear layer on the final [CLS] vector
  (the paper's head; HF's adds a hidden layer). One output is a regression (STS-B).
- `ElectraForTokenClassification`: dropout and one linear layer on every token.
- `ElectraForQuestionAnswering`: the XLNet-style head of the official code: start logits, end
  logits conditioned on the start, and an answerability classifier.
- `ElectraForSpanQuestionAnswering`: BERT's and Hugging Face's start/end head, one linear layer
  `qa_outputs` to two logits per token (`qa_head="linear"`). Its weights are those of HF's
  `ElectraForQuestionAnswering`, which has no counterpart of the official head, so a model
  fine-tuned with it exports to Hugging Face.
- `ElectraForSequenceClassificationHF`: Hugging Face's two-layer classifier on [CLS]
  (`classifier.dense`, exact GELU, `classifier.out_proj`), under HF's names: it runs a classifier
  folder saved by `transformers` (`electra.hf.from_transformers`); fine-tuning trains the paper's head.

Every family has its own heads (its record's `heads`); `electra.model.heads.build_head` picks a
task's head by the encoder's family.

Head layers take TF's default Glorot-uniform init, as in the official code, except the linear QA
head's, which takes BERT's run_squad init (normal, std initializer_range; HF's is the same).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.model.electra.config import ElectraModelConfig
from electra.model.electra.modeling import ElectraModel, activation, init_weights

QA_HIDDEN = 512  # width of the official QA head's hidden layers ("qa_hidden")
MASKED_LOGIT = -1000.0  # the official code's penalty outside the answer mask


def _glorot(*layers: nn.Linear) -> None:
    for layer in layers:
        nn.init.xavier_uniform_(layer.weight)
        nn.init.zeros_(layer.bias)


class _LinearHead(nn.Module):
    """The encoder, then dropout and one linear layer (the paper's classification and tagging head)."""

    base_model_prefix = "electra"  # the encoder's attribute (electra.model.family.encoder_of)

    def __init__(self, cfg: ElectraModelConfig, num_labels: int):
        super().__init__()
        self.config = cfg
        self.electra = ElectraModel(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)
        init_weights(self, cfg.initializer_range)
        _glorot(self.classifier)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(hidden))


class ElectraForSequenceClassification(_LinearHead):
    def forward(
        self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, cls_index=None
    ) -> torch.Tensor:
        """Logits [B, num_labels], from the final [CLS] vector: at position 0 of each row, or for
        packed rows (electra.finetuning.packing) at `cls_index` [B] of the flattened [rows * T] states."""
        if cls_index is None:
            b, t = input_ids.shape
            cls_index = torch.arange(b, device=input_ids.device) * t
        # The encoder's last layer runs at the [CLS] positions alone (keys and values apart),
        # since the head reads no other: the same logits as from every position's states.
        cls = self.electra(input_ids, token_type_ids, attention_mask, position_ids, cls_index)
        return self.logits(cls)


class ElectraForTokenClassification(_LinearHead):
    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        """Logits [B, T, num_labels]."""
        return self.logits(self.electra(input_ids, token_type_ids, attention_mask))


class ElectraForQuestionAnswering(nn.Module):
    """Span extraction over segment 1 (the context) with an answerability classifier.

    The answer mask is the real context tokens (final [SEP] included) plus position 0, which stands
    for "no answer in this window". The end network sees [h_start; h_j] through a GELU layer; its
    first matrix is applied to the two halves separately, so scoring k starts against T positions
    costs k + T projections rather than k * T.
    """

    base_model_prefix = "electra"

    def __init__(self, cfg: ElectraModelConfig):
        super().__init__()
        self.config = cfg
        h = cfg.hidden_size
        self.electra = ElectraModel(cfg)
        self.start_logits = nn.Linear(h, 1)
        self.end_hidden = nn.Linear(2 * h, QA_HIDDEN)
        self.end_logits = nn.Linear(QA_HIDDEN, 1)
        self.answerable_hidden = nn.Linear(2 * h, QA_HIDDEN)
        self.answerable_logit = nn.Linear(QA_HIDDEN, 1)
        self.activation = activation("gelu")
        init_weights(self, cfg.initializer_range)
        _glorot(
            self.start_logits,
            self.end_hidden,
            self.end_logits,
            self.answerable_hidden,
            self.answerable_logit,
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        start_positions: torch.Tensor | None = None,
        n_top: int = 20,
    ) -> dict[str, torch.Tensor]:
        """With `start_positions` (training, teacher-forced): start and end logits [B, T] and the
        answerability logit [B]. Without: the top `n_top` starts and, for each, the top `n_top`
        ends, as log-probabilities and indices."""
        hidden = self.electra(input_ids, token_type_ids, attention_mask)
        answer_mask = (token_type_ids == 1) & attention_mask.bool()
        answer_mask[:, 0] = True
        start = self.start_logits(hidden).squeeze(-1).masked_fill(~answer_mask, MASKED_LOGIT)
        pooled = torch.einsum("bt,bth->bh", start.softmax(-1), hidden)
        answerable = self.answerable_logit(
            self.activation(self.answerable_hidden(torch.cat([hidden[:, 0], pooled], -1)))
        ).squeeze(-1)
        if start_positions is not None:
            end = self._end_logits(hidden, start_positions[:, None], answer_mask)[:, 0]
            return {"start_logits": start, "end_logits": end, "answerable_logit": answerable}
        k = min(n_top, start.shape[1])
        start_log_probs, start_index = start.log_softmax(-1).topk(k, dim=-1)
        end_log_probs, end_index = (
            self._end_logits(hidden, start_index, answer_mask).log_softmax(-1).topk(k, dim=-1)
        )
        return {
            "start_log_probs": start_log_probs,  # [B, k]
            "start_index": start_index,
            "end_log_probs": end_log_probs,  # [B, k, k]: the top ends for each top start
            "end_index": end_index,
            "answerable_logit": answerable,
        }

    def _end_logits(self, hidden, starts, answer_mask) -> torch.Tensor:
        """End logits [B, k, T] for k candidate starts [B, k]."""
        h = hidden.shape[-1]
        w_start, w_token = self.end_hidden.weight[:, :h], self.end_hidden.weight[:, h:]
        at_start = hidden.gather(1, starts[..., None].expand(-1, -1, h))  # [B, k, H]
        z = (
            F.linear(at_start, w_start)[:, :, None]
            + F.linear(hidden, w_token, self.end_hidden.bias)[:, None]
        )
        end = self.end_logits(self.activation(z)).squeeze(-1)
        return end.masked_fill(~answer_mask[:, None], MASKED_LOGIT)


class ElectraForSpanQuestionAnswering(nn.Module):
    """Start and end logits from one linear layer on every token, as Hugging Face's
    `ElectraForQuestionAnswering` (same module names, so the weights map one to one).

    Nothing is masked in the model, as in HF: a window's "no answer" is start and end at position
    0 ([CLS]), and decoding skips positions outside the context.
    """

    base_model_prefix = "electra"

    def __init__(self, cfg: ElectraModelConfig):
        super().__init__()
        self.config = cfg
        self.electra = ElectraModel(cfg)
        self.qa_outputs = nn.Linear(cfg.hidden_size, 2)
        init_weights(self, cfg.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Start and end logits [B, T]."""
        hidden = self.electra(input_ids, token_type_ids, attention_mask)
        start, end = self.qa_outputs(hidden).unbind(-1)
        return {"start_logits": start, "end_logits": end}


class ElectraClassificationHead(nn.Module):
    """HF's `ElectraClassificationHead` on the [CLS] vector: dropout, `dense` H->H, exact GELU
    (as HF's, whatever `hidden_act` says), dropout, `out_proj` H->labels."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = activation("gelu")
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(hidden_size, num_labels)

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        x = self.activation(self.dense(self.dropout(cls)))
        return self.out_proj(self.dropout(x))


class ElectraForSequenceClassificationHF(nn.Module):
    """The encoder and HF's two-layer classification head, with the weights' names of
    `transformers`' `ElectraForSequenceClassification`, and the inputs of ours."""

    base_model_prefix = "electra"

    def __init__(
        self, cfg: ElectraModelConfig, num_labels: int, classifier_dropout: float | None = None
    ):
        super().__init__()
        self.config = cfg
        self.electra = ElectraModel(cfg)
        dropout = cfg.hidden_dropout_prob if classifier_dropout is None else classifier_dropout
        self.classifier = ElectraClassificationHead(cfg.hidden_size, num_labels, dropout)
        init_weights(self, cfg.initializer_range)

    def forward(
        self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, cls_index=None
    ) -> torch.Tensor:
        """Logits [B, num_labels] from the final [CLS] vector, found as
        `ElectraForSequenceClassification.forward` finds it."""
        if cls_index is None:
            b, t = input_ids.shape
            cls_index = torch.arange(b, device=input_ids.device) * t
        cls = self.electra(input_ids, token_type_ids, attention_mask, position_ids, cls_index)
        return self.classifier(cls)
