"""What the objectives build of the ELECTRA family beyond its three networks (its record's
`gdes_embeddings`, `copy_gate` and `cloze_towers`): GDES's discriminator embeddings, All-Tokens
MLM's copy gate and Electric's two-tower cloze generator (docs/objectives.md)."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from electra.model.cloze import ClozeTowers
from electra.model.electra.config import ElectraModelConfig
from electra.model.electra.modeling import (
    ElectraDiscriminatorPredictions,
    ElectraEmbeddings,
    ElectraGeneratorPredictions,
    ElectraModel,
    init_weights,
    positions_of,
)


class DisentangledEmbeddings(nn.Module):
    """The discriminator's embeddings under GDES. The generator's `ElectraEmbeddings` is read, not
    owned (it is no submodule here), so its tables get no gradient from this module; the token-type
    table and the LayerNorm are the discriminator's own."""

    def __init__(self, cfg: ElectraModelConfig, source: ElectraEmbeddings):
        super().__init__()
        self._source = (source,)  # a tuple keeps nn.Module from registering it
        self.word_embeddings_delta = nn.Parameter(torch.zeros_like(source.word_embeddings.weight))
        self.position_embeddings_delta = nn.Parameter(
            torch.zeros_like(source.position_embeddings.weight)
        )
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.embedding_size)
        self.LayerNorm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    @property
    def source(self) -> ElectraEmbeddings:
        return self._source[0]

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        src = self.source
        positions = positions_of(input_ids, position_ids)
        x = (
            F.embedding(input_ids, src.word_embeddings.weight.detach())
            + F.embedding(input_ids, self.word_embeddings_delta)
            + src.position_embeddings.weight.detach()[positions]
            + self.position_embeddings_delta[positions]
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))

    def folded(self) -> dict[str, torch.Tensor]:
        """The tables an ordinary `ElectraEmbeddings` would hold: generator's + residual."""
        with torch.no_grad():
            return {
                "word_embeddings.weight": self.source.word_embeddings.weight
                + self.word_embeddings_delta,
                "position_embeddings.weight": self.source.position_embeddings.weight
                + self.position_embeddings_delta,
            }


def copy_gate(cfg: ElectraModelConfig) -> nn.Module:
    """All-Tokens MLM's gate D(x, t): a per-token head like the discriminator's."""
    gate = ElectraDiscriminatorPredictions(cfg)
    init_weights(gate, cfg.initializer_range)
    return gate


class TwoTowerClozeGenerator(ClozeTowers):
    """The two-tower cloze model in the ELECTRA family (the official one)."""

    def __init__(self, cfg: ElectraModelConfig, embeddings: ElectraEmbeddings | None = None):
        super().__init__()
        self.config = cfg
        shared = embeddings if embeddings is not None else ElectraEmbeddings(cfg)
        self.ltr = ElectraModel(cfg, shared)
        self.rtl = ElectraModel(cfg, shared)
        head = replace(cfg, hidden_size=2 * cfg.hidden_size)  # reads both towers' states
        self.generator_predictions = ElectraGeneratorPredictions(head)
        self.generator_lm_head = nn.Linear(cfg.embedding_size, cfg.vocab_size)
        init_weights(self, cfg.initializer_range, skip=embeddings)
        self.generator_lm_head.weight = shared.word_embeddings.weight

    def cloze_logits(self, both: torch.Tensor) -> torch.Tensor:
        return self.generator_lm_head(self.generator_predictions(both))
