"""Electric (docs/specification.md §Electric; Clark et al. 2020, "Pre-Training Transformers as
Energy-Based Cloze Models"): the discriminator's raw output s_t is an energy E(x)_t, trained by
noise-contrastive estimation against a two-tower cloze noise model q.

- q(x_t | x_\\t): two causal towers of the generator's size read the *unmasked* input, one left to
  right, one right to left, sharing embeddings; position t concatenates the left tower's state at
  t-1 and the right tower's at t+1, so it never sees its own token, and a tied softmax head turns
  that into cloze logits at every position. It learns by maximum likelihood over all real,
  non-special tokens (the official `_get_cloze_outputs`).
- Noise: the usual masking draws the positions (with replacement, round(15%) per row), and each
  is replaced by a sample from q there. Every written position is labelled noise, even a sample
  equal to the original (the official labels).
- The discriminator's logit for "noise" is s_t + stop_gradient(log q(x̃_t | x_\\t)) +
  log(mask_prob / (1 - mask_prob)), log q taken at the token actually present, exactly as the
  official `_get_discriminator_output` computes it; sigmoid cross-entropy over all real tokens.

The run's `discriminator` folder is the energy model (the family's pretraining model, e.g.
`ElectraForPreTraining`, whose logit is E(x)_t, not a probability of replacement); `electra
score-text` turns it into pseudo-log-likelihoods. The two towers have no Hugging Face counterpart
and stay in the run's checkpoints. In the modern family the towers are its encoders (their causal
masks are the boolean [B, 1, T, T] masks its encoder takes) and the cloze head has its heads' shape:
dense (2H -> H) -> act -> norm, then the decoder tied to the shared token table.
One departure: the towers' edges see zeros where the official code's roll wraps around
(position 0 and the last position, never predicted: [CLS] and [SEP] or padding).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from electra.config import ObjectiveConfig, RunConfig, generator_config
from electra.data.tokenizer import SpecialIds
from electra.model.configs import AnyModelConfig
from electra.model.family import encoder_of, family_of
from electra.model.flops import Network
from electra.objectives.base import Detection, Objective, StepOutput, binary_loss, register
from electra.objectives.losses import argmax_hits, token_nll, weighted_mean
from electra.objectives.masking import (
    first_writes,
    predictable,
    select_positions,
    selected_positions,
    write_slots,
)
from electra.objectives.metrics import detection_metrics
from electra.objectives.sampling import sample_categorical, sample_tokens
from electra.objectives.sharing import check_family_piece, check_generator_fits


@register("electric")
class Electric(Objective):
    continues = False  # its generator is two cloze towers, not a masked LM: no folder starts it
    generator: nn.Module  # the family's `cloze_towers` (`electra.model.cloze.ClozeTowers`)
    discriminator: nn.Module  # the family's pretraining model: the energy model

    @classmethod
    def check(cls, run: RunConfig) -> None:
        super().check(run)
        check_generator_fits(run)  # the towers read the discriminator's table when shared
        check_family_piece(
            run,
            "cloze_towers",
            "objective.name=electric",
            "cloze towers (Electric's two-tower generator)",
            "choose another objective",
        )

    @classmethod
    def build(
        cls, model_cfg: AnyModelConfig, cfg: ObjectiveConfig, special: SpecialIds, seq_len: int
    ) -> Electric:
        discriminator = family_of(model_cfg).pretraining(model_cfg)
        shared = encoder_of(discriminator).embeddings if cfg.sharing == "embeddings" else None
        towers = family_of(model_cfg).cloze_towers
        generator = towers(generator_config(model_cfg, cfg), shared)
        return cls(cfg, special, seq_len, generator=generator, discriminator=discriminator)

    def models(self) -> dict[str, nn.Module]:
        return {"discriminator": self.discriminator}

    @classmethod
    def step_networks(cls, run: RunConfig, step: int) -> list[Network]:
        """The two towers, priced as one encoder without a head and one with the cloze head at
        every position, and the energy model with its per-token head."""
        towers = generator_config(run.model, run.objective)
        return [Network(towers), Network(towers, mlm_frac=1.0), Network(run.model, rtd_head=True)]

    shown = {"auc": "disc_auc"}

    def metrics(self, sums: dict[str, torch.Tensor], counts: dict[str, int]) -> dict[str, float]:
        return detection_metrics(sums, counts)  # the means and the AUC of the noise verdicts

    def detect(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Detection]:
        """The cloze model's loss and accuracy over every predictable token, and the energy
        model's NCE verdict on the noised batch, over every real token."""
        logits = self.generator(input_ids, token_type_ids, attention_mask)
        nll, probs = token_nll(logits, input_ids)
        targets = predictable(input_ids, attention_mask, self.special)
        cloze_loss = weighted_mean(nll, targets)
        cloze_acc = weighted_mean(argmax_hits(probs, input_ids), targets)

        positions, weights = select_positions(
            input_ids,
            attention_mask,
            self.special,
            self.cfg.mask_prob,
            self.num_slots,
            self.cfg.distinct_positions,
        )
        writes = first_writes(positions, weights)
        index = positions[..., None].expand(-1, -1, probs.shape[-1])
        if self.cfg.temperature == 1.0:
            sampled = sample_categorical(probs.gather(1, index))
        else:
            sampled = sample_tokens(logits.gather(1, index), self.cfg.temperature)
        noised = write_slots(input_ids, positions, sampled, writes)
        noise = selected_positions(input_ids, positions, writes)

        energy = self.discriminator(noised, token_type_ids, attention_mask).float()
        with torch.no_grad():  # log q of the token present, a constant of the NCE logit
            log_q = probs.gather(-1, noised[..., None]).squeeze(-1).clamp(min=1e-30).log()
        logit = energy + log_q + math.log(self.cfg.mask_prob / (1 - self.cfg.mask_prob))
        return cloze_loss, cloze_acc, Detection(logit, noise, attention_mask != 0)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> StepOutput:
        cloze_loss, cloze_acc, d = self.detect(input_ids, token_type_ids, attention_mask)
        disc_loss, stats = binary_loss(d)
        stats.update(mlm_loss=cloze_loss.detach(), mlm_acc=cloze_acc)
        loss = self.cfg.gen_weight * cloze_loss + self.cfg.disc_weight * disc_loss
        return StepOutput(loss, stats)
