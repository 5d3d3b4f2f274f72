"""Building a generator beside the network it trains, with the weight sharing `objective.sharing`
names (docs/specification.md §Weight sharing; §3.2 of the paper), for every architecture family
(`electra.model.family`):

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

from typing import Any

import torch
from torch import nn

from electra.config import ObjectiveConfig, RunConfig, generator_config
from electra.errors import ElectraError
from electra.model.configs import AnyModelConfig
from electra.model.family import encoder_of, family_of

# GDES's piece of a family: its `Family` field, the setting that needs it, what it is, the remedy.
GDES = ("gdes_embeddings", "objective.sharing=gdes", "GDES embeddings")
GDES_INSTEAD = "use objective.sharing=embeddings or none"


def disentangled(cfg: AnyModelConfig, source: nn.Module) -> nn.Module:
    """The GDES embeddings of `cfg`'s family over the generator's embeddings `source`."""
    return family_piece(cfg, *GDES, GDES_INSTEAD)(cfg, source)


def family_piece(cfg: AnyModelConfig, piece: str, setting: str, what: str, instead: str) -> Any:
    """The `piece` of `cfg`'s family (the `Family` field of an objective's piece:
    `gdes_embeddings`, `copy_gate`, `cloze_towers`); `setting` refused where it has none."""
    family = family_of(cfg)
    if getattr(family, piece) is None:
        raise ElectraError(f"{setting}: the {family.title} family has no {what}; {instead}")
    return getattr(family, piece)


def check_family_piece(run: RunConfig, *piece: str) -> None:
    """`family_piece`'s refusal, made before anything is written."""
    family_piece(run.model, *piece)


def plain(model: nn.Module) -> nn.Module:
    """`model` as an ordinary network of its family: a GDES discriminator gets its residual folded
    into a copy with plain embeddings; any other model is returned as it is."""
    embeddings = encoder_of(model).embeddings
    if not hasattr(embeddings, "folded"):  # GDES embeddings fold into plain tables
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
    if sharing == "gdes":
        check_family_piece(run, *GDES, GDES_INSTEAD)
    hidden = generator_config(run.model, run.objective).hidden_size
    family = family_of(run.model)
    if not family.shares_at_full_width or sharing == "none":
        return
    if hidden != run.model.hidden_size:
        raise ElectraError(
            f"objective.sharing={sharing} with model.arch={run.model.arch} needs a generator of the "
            f"discriminator's width (model.hidden_size={run.model.hidden_size}), not {hidden}: "
            f"the {family.title} family has no embedding projection to narrow a shared table; set "
            "objective.generator_hidden_fraction=1 (make it smaller with "
            "objective.generator_layers_fraction), or set objective.sharing=none"
        )


def generator_width_settings(run: RunConfig) -> dict[str, tuple[float, str]]:
    """The generator shape a run of a family that `shares_at_full_width` takes where the user set
    none and its sharing needs the discriminator's width (a switch of `model.arch` on an ELECTRA
    preset, whose generator is narrow): full width and, unless one encoder serves both, the
    family's `generator_layers_fraction` of the depth (a third for the modern family, the modern
    presets' shape; half for the hf family, DeBERTa-v3's)."""
    o = run.objective
    if (
        not family_of(run.model).shares_at_full_width
        or o.sharing == "none"
        or o.generator_hidden_size
    ):
        return {}
    if generator_config(run.model, o).hidden_size == run.model.hidden_size:
        return {}
    family = family_of(run.model)
    why = f"the {family.title} family shares its token table at full width"
    settings = {"generator_hidden_fraction": (1.0, why)}
    if o.sharing != "all":
        fraction = family.generator_layers_fraction
        settings["generator_layers_fraction"] = (fraction, f"{fraction:.3g} of the depth instead")
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
