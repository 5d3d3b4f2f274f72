"""Two-stage ELECTRA (the paper's §3.2 training alternative): train the generator alone with its
MLM loss for `objective.two_stage_steps` steps, copy its encoder into the discriminator, then train
the discriminator with the generator frozen (it still samples, with dropout on, as in ELECTRA).

The copy needs equal sizes and two separate networks (`sharing none`); the discriminator's head
starts fresh. Left unset, those settings and the switch (at half the steps) are filled in and
named (`fill_objective_settings`). One learning-rate schedule spans both stages. The paper found
this below joint training; it is here to reproduce that comparison.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from electra.config import RunConfig, generator_config
from electra.errors import ElectraError
from electra.model.family import encoder_of
from electra.model.flops import Network
from electra.objectives.base import UNSET, StepOutput, binary_loss, register, slot_fraction
from electra.objectives.electra import ReplacedTokenDetection


@register("two_stage")
class TwoStage(ReplacedTokenDetection):
    sharings = ("none",)
    staged = True

    @classmethod
    def check(cls, run: RunConfig) -> None:
        super().check(run)
        if generator_config(run.model, run.objective) != run.model:
            raise ElectraError(
                "objective.name=two_stage initialises the discriminator from the generator, so "
                "they need one size: set objective.generator_hidden_fraction=1 and "
                "objective.generator_layers_fraction=1"
            )
        if run.objective.two_stage_steps is None:
            raise ElectraError(UNSET.format("two_stage_steps"))
        if not 0 < run.objective.two_stage_steps < run.train.steps:
            raise ElectraError(
                f"objective.two_stage_steps={run.objective.two_stage_steps} must be above 0 and "
                f"below train.steps={run.train.steps}: the step at which the discriminator takes over"
            )

    @classmethod
    def implied_settings(cls, run: RunConfig) -> dict[str, tuple[Any, str]]:
        # The discriminator starts as a copy of the generator: two separate networks of one shape.
        # Switching at half the steps is the paper's n + n.
        return {
            "sharing": ("none", ""),
            "generator_hidden_fraction": (1.0, ""),
            "generator_layers_fraction": (1.0, ""),
            "two_stage_steps": (max(1, run.train.steps // 2), "half of train.steps"),
        }

    @classmethod
    def step_networks(cls, run: RunConfig, step: int) -> list[Network]:
        """The generator alone, then a frozen generator (forward only) and the discriminator."""
        generator = Network(generator_config(run.model, run.objective), mlm_frac=slot_fraction(run))
        if step < run.objective.two_stage_steps:
            return [generator]
        return [replace(generator, trained=False), Network(run.model, rtd_head=True)]

    @classmethod
    def network_stages(cls, run: RunConfig, steps: int) -> list[tuple[int, int]]:
        switch = run.objective.two_stage_steps
        return [(0, switch), (switch, steps)] if 0 < switch < steps else [(0, steps)]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.second_stage = False

    def begin_step(self, step: int) -> None:
        switch = self.cfg.two_stage_steps
        if step == switch:  # a run resumed later has the discriminator's weights in its checkpoint
            with torch.no_grad():
                encoder_of(self.discriminator).load_state_dict(
                    encoder_of(self.generator).state_dict()
                )
        self.second_stage = step >= switch

    def graph_key(self) -> bool:
        return self.second_stage

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> StepOutput:
        if not self.second_stage:
            out = self.masked_lm_step(self.generator, input_ids, token_type_ids, attention_mask)
            return StepOutput(out.loss, {"mlm_loss": out.loss.detach(), "mlm_acc": out.acc})
        with torch.no_grad():
            c = self.corrupt(self.generator, input_ids, token_type_ids, attention_mask)
        disc_loss, stats = binary_loss(self.discriminate(c, token_type_ids, attention_mask))
        stats.update(mlm_loss=c.gen.loss, mlm_acc=c.gen.acc)
        return StepOutput(self.cfg.disc_weight * disc_loss, stats)
