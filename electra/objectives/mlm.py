"""Masked-language-model objectives: BERT and Table 5's two steps from BERT towards ELECTRA.

- `mlm`: BERT, one full-size MLM model trained at the masked slots only.
- `replace_mlm`: MLM whose masked slots hold a small generator's samples instead of [MASK]
  (the generator trained jointly with its own MLM loss, as ELECTRA's); the full-size model
  predicts the original tokens at the slots only.
- `all_tokens_mlm`: Replace MLM predicting every real, non-special token, with the paper's copy
  mechanism: a sigmoid gate D(x, t) on the hidden state gives
  p(x_t) = D * [x_t is the token in the input] + (1 - D) * softmax(x_t).
  The gate's weights live in the run's checkpoints; the exported `mlm` folder is the encoder with
  its softmax head, which Hugging Face can load (the gate has no HF counterpart).

The full-size model is the family's masked LM (`ElectraForMaskedLM`, `ModernBertForMaskedLM`),
saved as the run's `mlm` folder.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ObjectiveConfig, RunConfig, generator_config
from electra.data.tokenizer import SpecialIds
from electra.model.configs import AnyModelConfig
from electra.model.family import family_of
from electra.model.flops import Network
from electra.objectives.base import Objective, StepOutput, register, slot_fraction
from electra.objectives.losses import argmax_hits, masked_lm_loss, token_nll, weighted_mean
from electra.objectives.masking import predictable
from electra.objectives.sharing import build_pair, check_family_piece, check_generator_fits


@register("mlm")
class MaskedLanguageModeling(Objective):
    """The BERT baseline: one full-size MLM model trained on the masked slots only."""

    sharings = ("none", "embeddings")  # there is no second network: the setting changes nothing
    has_generator = False
    mlm: nn.Module  # the family's masked LM

    @classmethod
    def build(
        cls, model_cfg: AnyModelConfig, cfg: ObjectiveConfig, special: SpecialIds, seq_len: int
    ) -> MaskedLanguageModeling:
        return cls(cfg, special, seq_len, mlm=family_of(model_cfg).masked_lm(model_cfg))

    def models(self) -> dict[str, nn.Module]:
        return {"mlm": self.mlm}

    @classmethod
    def step_networks(cls, run: RunConfig, step: int) -> list[Network]:
        """The full-size model with its vocabulary head at the slots."""
        return [Network(run.model, mlm_frac=slot_fraction(run))]

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> StepOutput:
        out = self.masked_lm_step(self.mlm, input_ids, token_type_ids, attention_mask)
        return StepOutput(out.loss, {"mlm_loss": out.loss.detach(), "mlm_acc": out.acc})


@register("replace_mlm")
class ReplaceMLM(Objective):
    """Table 5's Replace MLM: generator samples, not [MASK], fill the slots the model predicts."""

    generator: nn.Module  # the family's masked LMs
    mlm: nn.Module

    @classmethod
    def check(cls, run: RunConfig) -> None:
        super().check(run)
        check_generator_fits(run)

    @classmethod
    def build(
        cls, model_cfg: AnyModelConfig, cfg: ObjectiveConfig, special: SpecialIds, seq_len: int
    ) -> ReplaceMLM:
        generator, model = build_pair(model_cfg, cfg, main="masked_lm")
        return cls(cfg, special, seq_len, generator=generator, mlm=model)

    def models(self) -> dict[str, nn.Module]:
        return {"mlm": self.mlm, "generator": self.generator}

    @classmethod
    def step_networks(cls, run: RunConfig, step: int) -> list[Network]:
        """The generator and the full-size model, each with its vocabulary head at the slots."""
        frac = slot_fraction(run)
        return [
            Network(generator_config(run.model, run.objective), mlm_frac=frac),
            Network(run.model, mlm_frac=frac),
        ]

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> StepOutput:
        c = self.corrupt(self.generator, input_ids, token_type_ids, attention_mask)
        m = c.masked
        logits = self.mlm(c.corrupted, token_type_ids, attention_mask, m.positions)
        loss, acc, _ = masked_lm_loss(logits, m.targets, m.weights)
        stats = {
            "mlm_loss": c.gen.loss.detach(),
            "mlm_acc": c.gen.acc,
            "main_loss": loss.detach(),
            "main_acc": acc,
            "replaced_frac": weighted_mean(c.replaced.float(), attention_mask != 0),
        }
        return StepOutput(self.cfg.gen_weight * c.gen.loss + loss, stats)


@register("all_tokens_mlm")
class AllTokensMLM(ReplaceMLM):
    """Table 5's All-Tokens MLM: Replace MLM predicting every token, with a copy gate."""

    @classmethod
    def check(cls, run: RunConfig) -> None:
        super().check(run)
        check_family_piece(
            run,
            "copy_gate",
            "objective.name=all_tokens_mlm",
            "copy gate (All-Tokens MLM's per-token gate)",
            "choose another objective",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.copy_gate = family_of(self.mlm.config).copy_gate(self.mlm.config)

    @classmethod
    def step_networks(cls, run: RunConfig, step: int) -> list[Network]:
        """The generator, and the full-size model with its vocabulary head at every position and
        the copy gate (a per-token head like the discriminator's)."""
        generator = generator_config(run.model, run.objective)
        return [
            Network(generator, mlm_frac=slot_fraction(run)),
            Network(run.model, mlm_frac=1.0, rtd_head=True),
        ]

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> StepOutput:
        c = self.corrupt(self.generator, input_ids, token_type_ids, attention_mask)
        # Its final states at every position, as its masked LM computes them (DeBERTa-v3's
        # enhanced mask decoder, where it has one, included).
        every = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        hidden = self.mlm.hidden_at(c.corrupted, token_type_ids, attention_mask, every)
        logits = self.mlm.logits(hidden)
        gate = self.copy_gate(hidden).float()  # the logit of D
        nll, probs = token_nll(logits, input_ids)
        log_p = copy_mixture_log_prob(gate, -nll, c.corrupted == input_ids)
        where = predictable(input_ids, attention_mask, self.special)
        loss = weighted_mean(-log_p, where)
        stats = {
            "mlm_loss": c.gen.loss.detach(),
            "mlm_acc": c.gen.acc,
            "main_loss": loss.detach(),
            "main_acc": weighted_mean(argmax_hits(probs, input_ids), where),  # the softmax's
            "copy_gate": weighted_mean(torch.sigmoid(gate.detach()), where),
            "replaced_frac": weighted_mean(c.replaced.float(), attention_mask != 0),
        }
        return StepOutput(self.cfg.gen_weight * c.gen.loss + loss, stats)


def copy_mixture_log_prob(
    gate_logit: torch.Tensor, softmax_log_prob: torch.Tensor, is_copy: torch.Tensor
) -> torch.Tensor:
    """log(D * copy + (1 - D) * p) of the original token, with D = sigmoid(gate_logit), p its
    softmax probability and copy 1 where the input shows it; stable for any logit."""
    from_softmax = F.logsigmoid(-gate_logit) + softmax_log_prob
    return torch.where(
        is_copy, torch.logaddexp(F.logsigmoid(gate_logit), from_softmax), from_softmax
    )
