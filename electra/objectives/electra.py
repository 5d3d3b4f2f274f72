"""Replaced token detection (docs/specification.md §Replaced token detection) and Table 5's
ELECTRA 15%.

- `electra`: a small generator fills the masked slots with its samples, the discriminator labels
  every real token original or replaced; loss = gen_weight * MLM + disc_weight * RTD (1 and 50).
- `electra15`: the same, with the discriminator's loss (and its AUC) only at the positions that
  were masked out, the ~15% a BERT would learn from.
"""

from __future__ import annotations

import torch
from torch import nn

from electra.config import ObjectiveConfig, RunConfig, generator_config
from electra.data.tokenizer import SpecialIds
from electra.model.configs import AnyModelConfig
from electra.model.flops import Network
from electra.objectives.base import (
    Corruption,
    Detection,
    Objective,
    StepOutput,
    binary_loss,
    register,
    slot_fraction,
)
from electra.objectives.masking import selected_positions
from electra.objectives.metrics import detection_metrics
from electra.objectives.sharing import build_pair, check_generator_fits, plain


@register("electra")
class ReplacedTokenDetection(Objective):
    """ELECTRA: generator MLM loss + disc_weight * discriminator loss over all real tokens."""

    sharings = ("none", "embeddings", "all", "gdes")
    generator: nn.Module  # the family's masked LM (`electra.model.family`)
    discriminator: nn.Module  # the family's pretraining (replaced-token) model

    @classmethod
    def check(cls, run: RunConfig) -> None:
        super().check(run)
        check_generator_fits(run)

    @classmethod
    def build(
        cls, model_cfg: AnyModelConfig, cfg: ObjectiveConfig, special: SpecialIds, seq_len: int
    ) -> ReplacedTokenDetection:
        generator, discriminator = build_pair(model_cfg, cfg)
        return cls(cfg, special, seq_len, generator=generator, discriminator=discriminator)

    def models(self) -> dict[str, nn.Module]:
        return {"discriminator": plain(self.discriminator), "generator": self.generator}

    @classmethod
    def step_networks(cls, run: RunConfig, step: int) -> list[Network]:
        """The generator with its vocabulary head at the slots, and the discriminator."""
        generator = generator_config(run.model, run.objective)
        return [
            Network(generator, mlm_frac=slot_fraction(run)),
            Network(run.model, rtd_head=True),
        ]

    shown = {"auc": "disc_auc"}

    def metrics(self, sums: dict[str, torch.Tensor], counts: dict[str, int]) -> dict[str, float]:
        return detection_metrics(sums, counts)  # the means and the discriminator's AUC

    def loss_positions(self, c: Corruption, attention_mask: torch.Tensor) -> torch.Tensor:
        """Where the discriminator's loss is taken: every real token."""
        return attention_mask.bool()

    def discriminate(
        self, c: Corruption, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> Detection:
        """The discriminator's verdict on a corrupted batch, where its loss is taken."""
        logits = self.discriminator(c.corrupted, token_type_ids, attention_mask).float()
        return Detection(logits, c.replaced, self.loss_positions(c, attention_mask))

    def detect(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[Corruption, Detection]:
        """The generator's corruption of a batch and the discriminator's verdict on it."""
        c = self.corrupt(self.generator, input_ids, token_type_ids, attention_mask)
        return c, self.discriminate(c, token_type_ids, attention_mask)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> StepOutput:
        c, d = self.detect(input_ids, token_type_ids, attention_mask)
        disc_loss, stats = binary_loss(d)
        stats.update(mlm_loss=c.gen.loss.detach(), mlm_acc=c.gen.acc)
        loss = self.cfg.gen_weight * c.gen.loss + self.cfg.disc_weight * disc_loss
        return StepOutput(loss, stats)


@register("electra15")
class Electra15(ReplacedTokenDetection):
    """Table 5's ELECTRA 15%: the discriminator learns only from the masked-out positions."""

    def loss_positions(self, c: Corruption, attention_mask: torch.Tensor) -> torch.Tensor:
        return selected_positions(attention_mask, c.masked.positions, c.masked.writes)
