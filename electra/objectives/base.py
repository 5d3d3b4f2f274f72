"""What every pretraining objective shares: the registry, the step output, and the masked-LM and
corruption steps the objectives are built from.

An objective is an `nn.Module` that owns the networks it trains and maps a batch to a loss plus
detached statistics; the encoders in `electra.model` know nothing of it, and the training step
(`electra.engine.step`) knows nothing of objectives. Each objective is one class registered under
its `objective.name`, and says, besides its step (docs/objectives.md, "Adding an objective"):
which networks it trains (`build`, `models`), what of its statistics a log shows (`metrics`), and
which networks a step runs (`step_networks`, `network_stages`), from which its FLOPs are counted
(`electra.objectives.flops`). The trainer builds it with `build_objective`, calls `begin_step`
before each optimizer step and the module itself on each micro-batch.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ObjectiveConfig, RunConfig
from electra.data.tokenizer import SpecialIds
from electra.errors import ElectraError
from electra.model.configs import AnyModelConfig
from electra.model.flops import Network
from electra.objectives.losses import masked_lm_loss, weighted_mean
from electra.objectives.masking import Masked, mask_tokens, replace_tokens
from electra.objectives.metrics import AUC_HISTOGRAMS, auc_stat, mean_stats
from electra.objectives.sampling import sample_categorical, sample_tokens
from electra.objectives.sharing import generator_width_settings

OBJECTIVES: dict[str, type[Objective]] = {}

# A setting an objective fills from the others was left unset: a config not resolved.
UNSET = (
    "objective.{0} is unset: the commands and electra.pretrain fill it from the other settings "
    "(electra.pretraining.resolve.resolve_run); resolve the config, or set it"
)


def register(name: str):
    """Class decorator: makes an objective available as `objective.name=<name>`."""

    def add(cls: type[Objective]) -> type[Objective]:
        cls.name = name
        OBJECTIVES[name] = cls
        return cls

    return add


def objective_class(name: str) -> type[Objective]:
    if name not in OBJECTIVES:
        raise ElectraError(
            f"objective.name={name!r} is unknown: choose one of {', '.join(OBJECTIVES)}"
        )
    return OBJECTIVES[name]


@dataclass
class StepOutput:
    """What a step function returns to the training step: the loss to minimise and its
    statistics, detached tensors that the trainer sums over a logging window (over the
    micro-batches that report them: an objective may report some only in part of its schedule)
    and hands back to `Objective.metrics` once per window."""

    loss: torch.Tensor
    stats: dict[str, torch.Tensor]


@dataclass
class Detection:
    """A discriminator's verdict on a corrupted batch: where its loss and its AUC are taken."""

    logits: torch.Tensor  # [B, T] fp32 logit of "replaced" (of "noise" for Electric)
    labels: torch.Tensor  # [B, T] bool
    where: torch.Tensor  # [B, T] the tokens judged


@dataclass
class MaskedLM:
    """A masked batch and an MLM model's outputs at its slots."""

    masked: Masked
    hidden: torch.Tensor  # [B, N, H] encoder states at the slots
    logits: torch.Tensor  # [B, N, V]
    probs: torch.Tensor  # [B, N, V] softmax, no gradient
    loss: torch.Tensor  # mean cross-entropy over the used slots
    acc: torch.Tensor


@dataclass
class Corruption:
    """A batch after masking and generator sampling (docs/specification.md §Masking)."""

    gen: MaskedLM  # the generator's step
    sampled: torch.Tensor  # [B, N] a sample per slot
    corrupted: torch.Tensor  # [B, T] the samples written into the input
    replaced: torch.Tensor  # [B, T] bool: real tokens that now differ from the original

    @property
    def masked(self) -> Masked:
        return self.gen.masked


class Objective(nn.Module):
    """Settings, special ids and the static slot count, plus the steps objectives share."""

    name: ClassVar[str] = ""
    # The `objective.sharing` values this objective can build
    # (docs/specification.md §Weight sharing).
    sharings: ClassVar[tuple[str, ...]] = ("none", "embeddings")
    # True when its networks start training at different steps: the optimizer then keeps a
    # step count per network (`electra.engine.optim.param_groups`).
    staged: ClassVar[bool] = False
    # False for an objective without a generator (the MLM baseline), whose generator settings
    # mean nothing.
    has_generator: ClassVar[bool] = True
    # Whether its networks start from model folders (`train.init_from`): a masked-LM generator,
    # if any, and a discriminator or an MLM model (Electric's cloze towers do not).
    continues: ClassVar[bool] = True

    def __init__(
        self, cfg: ObjectiveConfig, special: SpecialIds, seq_len: int, **networks: nn.Module
    ):
        """`networks` become submodules by role (generator=..., discriminator=...), registered in
        the order given, which fixes the names of shared tensors in checkpoints."""
        super().__init__()
        self.cfg = cfg
        self.special = special
        self.num_slots = cfg.num_predictions(seq_len)
        for role, network in networks.items():
            setattr(self, role, network)

    @classmethod
    def build(
        cls, model_cfg: AnyModelConfig, cfg: ObjectiveConfig, special: SpecialIds, seq_len: int
    ) -> Objective:
        """The objective with its networks freshly initialised, of the architecture family
        `model_cfg.arch` names (`electra.model.family.family_of`)."""
        raise NotImplementedError

    @classmethod
    def check(cls, run: RunConfig) -> None:
        """Refuses settings this objective cannot train, with one line naming the field."""
        if run.objective.sharing not in cls.sharings:
            raise ElectraError(
                f"objective.sharing={run.objective.sharing} is not available with "
                f"objective.name={cls.name}: choose one of {', '.join(cls.sharings)}"
            )

    @classmethod
    def implied_settings(cls, run: RunConfig) -> dict[str, tuple[Any, str]]:
        """The objective settings this objective needs or derives from the run, used where the
        user left them unset: {field: (value, how a run-dependent value was chosen, or "")}."""
        return {}

    def models(self) -> dict[str, nn.Module]:
        """The trained networks by role, as plain models of the run's family (its `pretraining` or
        `masked_lm` class, `electra.model.family`): each becomes a model folder."""
        raise NotImplementedError

    @classmethod
    def step_networks(cls, run: RunConfig, step: int) -> list[Network]:
        """The networks optimizer step `step` (0-based) runs, with their heads and whether each is
        trained: what a step's FLOPs are counted from (`electra.objectives.flops`). Each objective
        names its own; there is no default to fall back on."""
        raise ElectraError(
            f"objective.name={cls.name} does not say which networks its step runs, so its "
            f"FLOPs cannot be counted: give {cls.__name__} a step_networks method"
        )

    @classmethod
    def network_stages(cls, run: RunConfig, steps: int) -> list[tuple[int, int]]:
        """Ranges [start, end) of the first `steps` steps over which `step_networks` is constant."""
        return [(0, steps)]

    # The metrics the progress bar shows beside the loss, by their short names there.
    shown: ClassVar[dict[str, str]] = {}

    def metrics(self, sums: dict[str, torch.Tensor], counts: dict[str, int]) -> dict[str, float]:
        """A logging window's metrics from the sums of its steps' statistics over the `counts[k]`
        micro-batches (of all ranks) that reported each: by default each scalar's mean."""
        return mean_stats(sums, counts)

    def begin_step(self, step: int) -> None:
        """Called before optimizer step `step` (0-based); objectives that change with the
        schedule act here."""

    def graph_key(self) -> Hashable:
        """What of the state `begin_step` sets changes the step's computation: a step captured
        as a CUDA graph (`electra.engine.graphs`) is captured again when this changes."""
        return None

    def masked_lm_step(
        self,
        model: nn.Module,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor,
    ) -> MaskedLM:
        """Masks the batch and runs `model` (a family's masked LM) with its vocabulary head at the
        slots only (`hidden_at`: the modern family runs its last layer there only too)."""
        vocab = model.config.vocab_size
        m = mask_tokens(input_ids, attention_mask, self.special, self.cfg, self.num_slots, vocab)
        hidden = model.hidden_at(m.input_ids, token_type_ids, attention_mask, m.positions)
        logits = model.logits(hidden)
        loss, acc, probs = masked_lm_loss(logits, m.targets, m.weights)
        return MaskedLM(m, hidden, logits, probs, loss, acc)

    def corrupt(
        self,
        generator: nn.Module,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor,
    ) -> Corruption:
        """The generator's masked-LM step and a sample per slot written into the input (no
        gradient flows through the samples)."""
        g = self.masked_lm_step(generator, input_ids, token_type_ids, attention_mask)
        if self.cfg.temperature == 1.0:
            sampled = sample_categorical(g.probs)  # the softmax the loss already took
        else:
            sampled = sample_tokens(g.logits, self.cfg.temperature)
        corrupted, replaced = replace_tokens(input_ids, attention_mask, g.masked, sampled)
        return Corruption(g, sampled, corrupted, replaced)


def slot_fraction(run: RunConfig) -> float:
    """The fraction of positions a step's masked-LM head is run on: its slots per sequence."""
    return run.objective.num_predictions(run.data.seq_len) / run.data.seq_len


def binary_loss(d: Detection) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The discriminator's sigmoid cross-entropy as a token-level mean over `d.where`
    (docs/specification.md §Discriminator: all real tokens, [CLS] and [SEP] included), and its
    accuracy, positive rate and AUC histograms there (`electra.objectives.metrics`)."""
    logits, labels, where = d.logits, d.labels, d.where
    per_token = F.binary_cross_entropy_with_logits(logits, labels.float(), reduction="none")
    loss = weighted_mean(per_token, where)
    with torch.no_grad():
        stats = {
            "disc_loss": loss.detach(),
            "disc_acc": weighted_mean(((logits > 0) == labels).float(), where),
            "replaced_frac": weighted_mean(labels.float(), where),
            AUC_HISTOGRAMS: auc_stat(logits, labels, where),
        }
    return loss, stats


def build_objective(
    model_cfg: AnyModelConfig, cfg: ObjectiveConfig, special: SpecialIds, seq_len: int
) -> Objective:
    """The objective `cfg.name` names, its networks freshly initialised."""
    return objective_class(cfg.name).build(model_cfg, cfg, special, seq_len)


def fill_objective_settings(run: RunConfig, given: Collection[str]) -> tuple[RunConfig, str]:
    """`run` with the settings its objective implies wherever the user left them unset (`given`:
    the section.field keys they set), and a line naming those it changed ("" when none)."""
    cls = objective_class(run.objective.name)
    mine = cls.has_generator and "objective.generator_hidden_fraction" not in given
    implied = generator_width_settings(run) if mine else {}
    implied.update(cls.implied_settings(run))
    if "sharing" not in implied and run.objective.sharing not in cls.sharings:
        # A preset's sharing (DeBERTa-v3's gdes) that this objective has not: its own default.
        fallback = "embeddings" if "embeddings" in cls.sharings else cls.sharings[0]
        implied["sharing"] = (fallback, f"{run.objective.sharing} is not available with it")
    changes = {
        name: value
        for name, (value, _) in implied.items()
        if f"objective.{name}" not in given and getattr(run.objective, name) != value
    }
    if not changes:
        return run, ""
    named = ", ".join(
        f"objective.{name}={_shown(value)}" + (f" ({implied[name][1]})" if implied[name][1] else "")
        for name, value in changes.items()
    )
    them = "them" if len(changes) > 1 else "it"
    note = f"objective {run.objective.name}: set {named}; set {them} yourself to change this"
    return replace(run, objective=replace(run.objective, **changes)), note


def _shown(value: Any) -> str:
    """A value as the note names it: 1/3 as 0.3333, not 0.3333333333333333; 1.0 as 1.0."""
    return f"{value:.4g}" if isinstance(value, float) and not value.is_integer() else str(value)


def check_objective(run: RunConfig) -> None:
    """Refuses a run whose objective settings do not fit together, before anything is written."""
    objective_class(run.objective.name).check(run)
