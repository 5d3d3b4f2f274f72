"""Building a generator beside the network it trains, with the weight sharing `objective.sharing`
names (docs/specification.md §Weight sharing; §3.2 of the paper), for every architecture family
(`electra.model.registry`):

- `none`: two separate networks.
- `embeddings` (the official code): the embedding module is one; for ELECTRA, the word, position
  and token-type tables and the embedding LayerNorm, each network keeping its own
  `embeddings_project`; for the modern family, the token table and its norm.
- `all`: one encoder serves both (the paper's "all weights"; only for equal sizes).
- `gdes` (DeBERTa-v3's gradient-disentangled sharing): the discriminator's word (and, for
  ELECTRA, position) tables are stop_gradient(generator's) + a zero-initialised residual, so the
  discriminator's loss reaches only the residual and the generator's tables learn from the MLM
  loss alone. A model folder holds the sum (`plain`), so an exported discriminator is an ordinary
  model of its family.

The modern family has no embedding projection, so a generator that shares its table
(`embeddings`, `gdes`, `all`) has the discriminator's width; a narrower one needs `none`
(`check_generator_fits`, called by the objectives' `check` before anything is written).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import (
    AnyModelConfig,
    ModelConfig,
    ModernConfig,
    ObjectiveConfig,
    RunConfig,
    generator_config,
)
from electra.errors import ElectraError
from electra.model.electra import ElectraEmbeddings, positions_of
from electra.model.modernbert import ModernBertEmbeddings, layer_norm
from electra.model.registry import encoder_of, family_of


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


def disentangled(cfg: AnyModelConfig, source: nn.Module) -> nn.Module:
    """The GDES embeddings of `cfg`'s family over the generator's embeddings `source`."""
    if isinstance(cfg, ModernConfig):
        return ModernDisentangledEmbeddings(cfg, source)
    return DisentangledEmbeddings(cfg, source)


def plain(model: nn.Module) -> nn.Module:
    """`model` as an ordinary network of its family: a GDES discriminator gets its residual folded
    into a copy with plain embeddings; any other model is returned as it is."""
    embeddings = encoder_of(model).embeddings
    if not isinstance(embeddings, DisentangledEmbeddings | ModernDisentangledEmbeddings):
        return model
    prefix = f"{model.base_model_prefix}.embeddings."
    state = {k: v for k, v in model.state_dict().items() if "_delta" not in k}
    state.update({prefix + k: v for k, v in embeddings.folded().items()})
    with torch.device(next(embeddings.parameters()).device):
        folded = type(model)(model.config)
    folded.load_state_dict(state, strict=True)
    return folded.train(model.training)


def check_generator_fits(run: RunConfig) -> None:
    """Refuses a generator whose sizes make no valid encoder (`generator_config` names the
    `objective.generator_*` settings), and one the sharing cannot serve: in the modern family,
    which has no embedding projection, a generator that shares the table (`embeddings`, `gdes`,
    `all`) must have the discriminator's width."""
    sharing = run.objective.sharing
    hidden = generator_config(run.model, run.objective).hidden_size
    if not isinstance(run.model, ModernConfig) or sharing == "none":
        return
    if hidden != run.model.hidden_size:
        raise ElectraError(
            f"objective.sharing={sharing} with model.arch=modernbert needs a generator of the "
            f"discriminator's width (model.hidden_size={run.model.hidden_size}), not {hidden}: "
            "the modern family has no embedding projection to narrow a shared table; set "
            "objective.generator_hidden_fraction=1 (make it smaller with "
            "objective.generator_layers_fraction), or set objective.sharing=none"
        )


def generator_width_settings(run: RunConfig) -> dict[str, tuple[float, str]]:
    """The generator shape a modern run takes where the user set none and its sharing needs the
    discriminator's width (a switch of `model.arch` on an ELECTRA preset, whose generator is
    narrow): full width and, unless one encoder serves both, a third of the depth, the modern
    presets' shape."""
    o = run.objective
    if not isinstance(run.model, ModernConfig) or o.sharing == "none" or o.generator_hidden_size:
        return {}
    if generator_config(run.model, o).hidden_size == run.model.hidden_size:
        return {}
    why = "the modern family shares its token table at full width"
    settings = {"generator_hidden_fraction": (1.0, why)}
    if o.sharing != "all":
        settings["generator_layers_fraction"] = (1 / 3, "a third of the depth instead")
    return settings


def build_pair(
    model_cfg: AnyModelConfig,
    cfg: ObjectiveConfig,
    main: str = "pretraining",
) -> tuple[nn.Module, nn.Module]:
    """The generator (its family's masked LM) and the `main` network (the family's `pretraining`
    discriminator, or its `masked_lm` for a full-size MLM model), freshly initialised, sharing as
    `cfg.sharing` says."""
    family = family_of(model_cfg)
    masked_lm, network_class = family.masked_lm, getattr(family, main)
    gen_cfg = generator_config(model_cfg, cfg)
    if cfg.sharing == "all":
        if gen_cfg != model_cfg:
            raise ElectraError(
                "objective.sharing=all needs a generator of the discriminator's size: set "
                "objective.generator_hidden_fraction=1 and objective.generator_layers_fraction=1"
            )
        network = network_class(model_cfg)
        generator = masked_lm(gen_cfg)
        setattr(generator, generator.base_model_prefix, encoder_of(network))
        generator.tie_weights()
        return generator, network
    if cfg.sharing == "gdes":
        generator = masked_lm(gen_cfg)
        embeddings = disentangled(model_cfg, encoder_of(generator).embeddings)
        return generator, network_class(model_cfg, embeddings)
    network = network_class(model_cfg)
    shared = encoder_of(network).embeddings if cfg.sharing == "embeddings" else None
    return masked_lm(gen_cfg, shared), network
