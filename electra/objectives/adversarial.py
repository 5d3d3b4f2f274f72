"""Adversarial ELECTRA (the paper's §3.2 and Appendix F): the generator is trained to fool the
discriminator by REINFORCE instead of by maximum likelihood.

Each slot whose sample is in the input earns the reward R = the discriminator's cross-entropy at
that token (-log D(real) when the sample equals the original, -log(1 - D(real)) when it does not),
under the appendix's assumption that D's verdict on a token does not depend on the other samples.
The generator's loss is -mean over those slots of log p_G(sample) * (R - b), with the baseline
b = -log sigmoid(w . h_G) from a linear head on the generator's hidden state at the slot: the
appendix's variance reduction. The appendix trains b with a cross-entropy whose exact target it does
not give; we fit b to R by squared error, a choice of ours. For the first
`objective.adversarial_mlm_steps` steps the generator learns by maximum likelihood (a warm start:
REINFORCE from a random generator gets almost no signal); the discriminator is ELECTRA's throughout.
The paper found this worse than MLE: 58% against 65% MLM accuracy and low-entropy samples.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import RunConfig
from electra.errors import ElectraError
from electra.objectives.base import UNSET, StepOutput, binary_loss, register
from electra.objectives.electra import ReplacedTokenDetection
from electra.objectives.losses import token_nll, weighted_mean


@register("adversarial")
class Adversarial(ReplacedTokenDetection):
    sharings = ("none", "embeddings")

    @classmethod
    def check(cls, run: RunConfig) -> None:
        super().check(run)
        steps = run.objective.adversarial_mlm_steps
        if steps is None:
            raise ElectraError(UNSET.format("adversarial_mlm_steps"))
        if not 0 <= steps < run.train.steps:
            raise ElectraError(
                f"objective.adversarial_mlm_steps={run.objective.adversarial_mlm_steps} must be "
                f"at least 0 and below train.steps={run.train.steps}, or the generator is never "
                "trained adversarially"
            )

    @classmethod
    def implied_settings(cls, run: RunConfig) -> dict[str, tuple[Any, str]]:
        # REINFORCE from a random generator gets almost no signal: warm it up by MLE first.
        return {"adversarial_mlm_steps": (run.train.steps // 10, "a tenth of train.steps")}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.value_head = nn.Linear(self.generator.config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)
        self.adversarial = True

    def begin_step(self, step: int) -> None:
        self.adversarial = step >= self.cfg.adversarial_mlm_steps

    def graph_key(self) -> bool:
        return self.adversarial

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> StepOutput:
        c, d = self.detect(input_ids, token_type_ids, attention_mask)
        disc_loss, stats = binary_loss(d)
        m = c.masked
        with torch.no_grad():
            per_token = F.binary_cross_entropy_with_logits(
                d.logits, c.replaced.float(), reduction="none"
            )
            reward = per_token.gather(1, m.positions)  # [B, N]
        # b = -log sigmoid(z) >= 0, as the reward is. It reads the generator's states without
        # sending its fitting error back into them: the generator learns from the reward only.
        baseline = -F.logsigmoid(self.value_head(c.gen.hidden.detach().float()).squeeze(-1))
        value_loss = weighted_mean((baseline - reward) ** 2, m.writes)
        if self.adversarial:
            gen_loss = reinforce_loss(c.gen.logits, c.sampled, reward, baseline, m.writes)
        else:
            gen_loss = c.gen.loss
        loss = self.cfg.gen_weight * gen_loss + self.cfg.disc_weight * disc_loss + value_loss
        with torch.no_grad():
            probs = c.gen.probs
            entropy = -(probs * probs.clamp(min=1e-30).log()).sum(-1)
        stats.update(
            mlm_loss=c.gen.loss.detach(),
            mlm_acc=c.gen.acc,
            reward=weighted_mean(reward, m.writes),
            value_loss=value_loss.detach(),
            gen_entropy=weighted_mean(entropy, m.weights),
        )
        return StepOutput(loss, stats)


def reinforce_loss(
    logits: torch.Tensor,
    sampled: torch.Tensor,
    reward: torch.Tensor,
    baseline: torch.Tensor,
    weights: torch.Tensor,
) -> torch.Tensor:
    """REINFORCE with a baseline: the mean over weighted slots of -log p(sample) * (R - b), whose
    gradient is the policy gradient ascending the reward; the advantage is a constant."""
    sample_nll, _ = token_nll(logits, sampled)
    return weighted_mean(sample_nll * (reward - baseline).detach(), weights)
