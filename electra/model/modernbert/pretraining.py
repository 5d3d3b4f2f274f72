"""What the objectives build of the modern family beyond its three networks (its record's
`gdes_embeddings`, `copy_gate` and `cloze_towers`): GDES's discriminator embeddings, All-Tokens
MLM's copy gate and Electric's two-tower cloze generator (docs/objectives.md)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.model.cloze import ClozeTowers
from electra.model.modernbert.config import ModernConfig
from electra.model.modernbert.modeling import (
    ModernBertEmbeddings,
    ModernBertModel,
    activation,
    head_and_linear,
    init_weight,
    layer_norm,
    out_std,
)


class ModernDisentangledEmbeddings(nn.Module):
    """GDES for the modern family: the token table is stop_gradient(generator's) + a residual
    (there are no position tables: positions are rotary); the norm is the discriminator's own, as
    ELECTRA's GDES keeps its LayerNorm."""

    def __init__(self, cfg: ModernConfig, source: ModernBertEmbeddings):
        super().__init__()
        self._source = (source,)  # a tuple keeps nn.Module from registering it
        self.padding_idx = cfg.pad_token_id
        self.tok_embeddings_delta = nn.Parameter(torch.zeros_like(source.tok_embeddings.weight))
        self.norm = layer_norm(cfg)
        self.drop = nn.Dropout(cfg.embedding_dropout)

    @property
    def source(self) -> ModernBertEmbeddings:
        return self._source[0]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        table = self.source.tok_embeddings.weight.detach()
        # The padding row learns nothing, as in the folded model's `nn.Embedding(padding_idx=)`.
        delta = F.embedding(input_ids, self.tok_embeddings_delta, padding_idx=self.padding_idx)
        return self.drop(self.norm(F.embedding(input_ids, table) + delta))

    def folded(self) -> dict[str, torch.Tensor]:
        """The table an ordinary `ModernBertEmbeddings` would hold: generator's + residual."""
        with torch.no_grad():
            return {
                "tok_embeddings.weight": self.source.tok_embeddings.weight
                + self.tok_embeddings_delta
            }


class ModernCopyGate(nn.Module):
    """The copy gate in the modern family's head shape: dense -> act -> norm -> one logit (the
    discriminator's shape, `ModernBertForPreTraining`), initialised as HF initialises it."""

    def __init__(self, cfg: ModernConfig):
        super().__init__()
        self.head, self.dense_prediction = head_and_linear(cfg, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.head(hidden)).squeeze(-1)


class ModernTwoTowerClozeGenerator(ClozeTowers):
    """The two-tower cloze model in the modern family: two `ModernBertModel` towers over one
    token table, and a head of the family's shape, dense (2H -> H, no bias) -> act -> norm, then a
    decoder (with a bias, as ModernBERT's) whose weight is the token table."""

    def __init__(self, cfg: ModernConfig, embeddings: ModernBertEmbeddings | None = None):
        super().__init__()
        self.config = cfg
        shared = embeddings
        if shared is None:  # the towers' own table, initialised as its owner would
            shared = ModernBertEmbeddings(cfg)
            init_weight(shared.tok_embeddings.weight, cfg.initializer_range, cfg)
        self.ltr = ModernBertModel(cfg, shared)
        self.rtl = ModernBertModel(cfg, shared)
        self.dense = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.act = activation(cfg.classifier_activation)
        self.norm = layer_norm(cfg)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size)
        init_weight(self.dense.weight, out_std(cfg), cfg)
        nn.init.zeros_(self.decoder.bias)
        self.decoder.weight = shared.tok_embeddings.weight

    def cloze_logits(self, both: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.act(self.dense(both))))
