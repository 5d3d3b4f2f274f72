"""What the objectives build of the DeBERTa-v3 family beyond its three networks (its record's
`gdes_embeddings`, `copy_gate` and `cloze_towers`): GDES's discriminator embeddings (the
DeBERTa-v3 paper's own sharing), All-Tokens MLM's copy gate and Electric's two-tower cloze
generator (docs/objectives.md)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.model.cloze import ClozeTowers
from electra.model.deberta.config import DebertaV3Config
from electra.model.deberta.modeling import (
    DebertaV2Embeddings,
    DebertaV2Model,
    DebertaV2PredictionHeadTransform,
    init_weights,
    layer_norm,
    real_only,
)


class DebertaDisentangledEmbeddings(nn.Module):
    """GDES (the DeBERTa-v3 paper, §4): the discriminator's token table is
    stop_gradient(generator's) + a residual that starts at zero, so its loss reaches the residual
    only; the LayerNorm is the discriminator's own (there are no position or segment tables:
    positions are relative, in the attention). Called as `DebertaV2Embeddings` is."""

    def __init__(self, cfg: DebertaV3Config, source: DebertaV2Embeddings):
        super().__init__()
        self._source = (source,)  # a tuple keeps nn.Module from registering it
        self.padding_idx = cfg.pad_token_id
        self.word_embeddings_delta = nn.Parameter(torch.zeros_like(source.word_embeddings.weight))
        self.LayerNorm = layer_norm(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    @property
    def source(self) -> DebertaV2Embeddings:
        return self._source[0]

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        table = self.source.word_embeddings.weight.detach()
        # The padding row learns nothing, as in the folded model's `nn.Embedding(padding_idx=)`.
        delta = F.embedding(input_ids, self.word_embeddings_delta, padding_idx=self.padding_idx)
        x = self.LayerNorm(F.embedding(input_ids, table) + delta)
        return self.dropout(real_only(x, mask))

    def folded(self) -> dict[str, torch.Tensor]:
        """The table an ordinary `DebertaV2Embeddings` would hold: generator's + residual."""
        with torch.no_grad():
            return {
                "word_embeddings.weight": self.source.word_embeddings.weight
                + self.word_embeddings_delta
            }


class DebertaCopyGate(nn.Module):
    """The copy gate in the family's discriminator head shape (`DebertaV2ForPreTraining`, laid
    out as HF's `DebertaV2ForTokenClassification`: dropout and one linear logit), initialised as
    HF's DebertaV2 init does."""

    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, 1)
        init_weights(self, cfg.initializer_range)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(hidden)).squeeze(-1)


class DebertaTwoTowerClozeGenerator(ClozeTowers):
    """The two-tower cloze model in the DeBERTa-v3 family: two `DebertaV2Model` towers (each its
    own relative table) over one token table, and HF's legacy MLM head reading both states side
    by side: `transform` (dense 2H -> H, act, LayerNorm), then the token table as the output
    weight plus a `bias` of its own, as `DebertaV2ForMaskedLM.logits`. No enhanced mask decoder:
    the towers' states are already each position's context without the token itself."""

    def __init__(self, cfg: DebertaV3Config, embeddings: DebertaV2Embeddings | None = None):
        super().__init__()
        self.config = cfg
        shared = embeddings if embeddings is not None else DebertaV2Embeddings(cfg)
        self.ltr = DebertaV2Model(cfg, shared)
        self.rtl = DebertaV2Model(cfg, shared)
        self.transform = DebertaV2PredictionHeadTransform(cfg)
        self.transform.dense = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        # A table of the towers' own is initialised as its owner would; a shared one is left.
        init_weights(self, cfg.initializer_range, skip=embeddings)

    @property
    def table(self) -> torch.Tensor:
        return self.ltr.embeddings.word_embeddings.weight

    def cloze_logits(self, both: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transform(both), self.table, self.bias)
