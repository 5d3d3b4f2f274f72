"""Building a generator beside the network it trains, with the weight sharing `objective.sharing`
names (docs/specification.md §Weight sharing; §3.2 of the paper):

- `none`: two separate networks.
- `embeddings` (the official code): word, position and token-type tables and the embedding
  LayerNorm are one module; each network keeps its own `embeddings_project`.
- `all`: one encoder serves both (the paper's "all weights"; only for equal sizes).
- `gdes` (DeBERTa-v3's gradient-disentangled sharing): the discriminator's word and position
  tables are stop_gradient(generator's) + a zero-initialised residual, so the discriminator's loss
  reaches only the residual and the generator's tables learn from the MLM loss alone. A model
  folder holds the sum (`plain`), so an exported discriminator is an ordinary ELECTRA model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ModelConfig, ObjectiveConfig, generator_config
from electra.errors import ElectraError
from electra.model.electra import (
    ElectraEmbeddings,
    ElectraForMaskedLM,
    ElectraForPreTraining,
    positions_of,
)


class DisentangledEmbeddings(nn.Module):
    """The discriminator's embeddings under GDES. The generator's `ElectraEmbeddings` is read, not
    owned (it is no submodule here), so its tables get no gradient from this module; the token-type
    table and the LayerNorm are the discriminator's own."""

    def __init__(self, cfg: ModelConfig, source: ElectraEmbeddings):
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


def plain(model: nn.Module) -> nn.Module:
    """`model` as an ordinary ELECTRA network: a GDES discriminator gets its residual folded into
    a copy with plain embeddings; any other model is returned as it is."""
    embeddings = model.electra.embeddings
    if not isinstance(embeddings, DisentangledEmbeddings):
        return model
    state = {k: v for k, v in model.state_dict().items() if "_delta" not in k}
    state.update({f"electra.embeddings.{k}": v for k, v in embeddings.folded().items()})
    with torch.device(embeddings.word_embeddings_delta.device):
        folded = type(model)(model.config)
    folded.load_state_dict(state, strict=True)
    return folded.train(model.training)


def build_pair(
    model_cfg: ModelConfig,
    cfg: ObjectiveConfig,
    main: type[nn.Module] = ElectraForPreTraining,
) -> tuple[ElectraForMaskedLM, nn.Module]:
    """The generator and the `main` network (the discriminator, or a full-size MLM model),
    freshly initialised, sharing as `cfg.sharing` says."""
    gen_cfg = generator_config(model_cfg, cfg)
    if cfg.sharing == "all":
        if gen_cfg != model_cfg:
            raise ElectraError(
                "objective.sharing=all needs a generator of the discriminator's size: set "
                "objective.generator_hidden_fraction=1 and objective.generator_layers_fraction=1"
            )
        network = main(model_cfg)
        generator = ElectraForMaskedLM(gen_cfg)
        generator.electra = network.electra
        generator.generator_lm_head.weight = network.electra.embeddings.word_embeddings.weight
        return generator, network
    if cfg.sharing == "gdes":
        generator = ElectraForMaskedLM(gen_cfg)
        embeddings = DisentangledEmbeddings(model_cfg, generator.electra.embeddings)
        return generator, main(model_cfg, embeddings)
    network = main(model_cfg)
    shared = network.electra.embeddings if cfg.sharing == "embeddings" else None
    return ElectraForMaskedLM(gen_cfg, shared), network
