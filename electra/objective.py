"""Pretraining objectives: masking, generator sampling, labels and losses (ELECTRA.md §2.3).

An objective is an `nn.Module` that owns the networks it trains and maps a batch to a loss plus
detached statistics. The encoders in `model.py` know nothing of this. Two objectives ship:

- `ReplacedTokenDetection` (ELECTRA): a small generator fills masked slots with its samples,
  the discriminator labels every real token as original or replaced; loss = MLM + 50 * RTD.
- `MaskedLanguageModeling`: the BERT baseline, one full-size MLM model.

Every tensor shape is static: each row gets exactly `num_slots` prediction slots, and rows that need
fewer carry zero-weight slots, so the step compiles once and never syncs with the host.

Departure from the official code, on purpose: positions are drawn *without* replacement (top-k of
uniform scores over the candidates), so a row's k selected positions are k distinct tokens; the
official `PH.mask` draws with replacement and may select fewer distinct positions than its count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ModelConfig, ObjectiveConfig, generator_config
from electra.model import ElectraForMaskedLM, ElectraForPreTraining
from electra.tokenizer import SpecialIds


@dataclass
class Masked:
    """The result of masking one batch: which slots were chosen and the generator's input."""

    positions: torch.Tensor  # [B, N] distinct token positions per row
    weights: torch.Tensor  # [B, N] 1.0 for a used slot, 0.0 for a padding slot
    targets: torch.Tensor  # [B, N] original ids at `positions`
    input_ids: torch.Tensor  # [B, T] with the used slots set to [MASK], kept, or a random token


def select_positions(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special: SpecialIds,
    mask_prob: float,
    num_slots: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chooses round(real_tokens * mask_prob) positions per row (at least 1, at most `num_slots`),
    never a special token or padding. Returns positions [B, N] and slot weights [B, N]."""
    candidate = attention_mask.bool()
    for token in (special.cls, special.sep, special.mask, special.pad):
        candidate &= input_ids != token
    # Uniform scores on candidates and -1 elsewhere: the top k are k uniformly chosen candidates.
    scores = torch.rand(input_ids.shape, device=input_ids.device).masked_fill(~candidate, -1.0)
    positions = scores.topk(num_slots, dim=1, sorted=True).indices
    num_real = attention_mask.sum(1)
    count = torch.round(num_real * mask_prob).long().clamp(1, num_slots)
    count = torch.minimum(count, candidate.sum(1))
    weights = torch.arange(num_slots, device=input_ids.device)[None, :] < count[:, None]
    return positions, weights.float()


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special: SpecialIds,
    cfg: ObjectiveConfig,
    num_slots: int,
    vocab_size: int,
) -> Masked:
    """Dynamic masking, drawn anew at every step: chosen slots become [MASK] (mask_frac), stay as they
    are (keep_frac), or become a uniformly random vocabulary id (random_frac)."""
    positions, weights = select_positions(
        input_ids, attention_mask, special, cfg.mask_prob, num_slots
    )
    targets = input_ids.gather(1, positions)
    u = torch.rand(positions.shape, device=input_ids.device)
    random_ids = torch.randint_like(targets, vocab_size)
    replacement = torch.where(
        u < cfg.mask_frac,
        torch.full_like(targets, special.mask),
        torch.where(u < cfg.mask_frac + cfg.keep_frac, targets, random_ids),
    )
    replacement = torch.where(weights.bool(), replacement, targets)  # unused slots change nothing
    return Masked(positions, weights, targets, input_ids.scatter(1, positions, replacement))


def sample_tokens(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """An exact categorical sample from softmax(logits / T), in fp32, with no gradient.

    Departure from the official code, for speed only: it inverts the CDF (one softmax, one cumsum
    and one uniform per row) where `PH.sample_from_softmax` takes Gumbel-max (a uniform and two
    logs per vocabulary entry). Both draw from the same distribution; this costs a quarter of
    Gumbel-max on CPU. Tokens whose probability underflows to zero are never drawn."""
    with torch.no_grad():
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        cdf = probs.cumsum_(-1)
        u = torch.rand(cdf.shape[:-1] + (1,), device=cdf.device) * cdf[..., -1:]
        return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)


def replace_tokens(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, m: Masked, sampled: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input and labels: samples written into every used slot (the kept ones
    too; unused slots keep the original), and "replaced" only where the token now differs, so a
    sample equal to the original is labelled original."""
    sampled = torch.where(m.weights.bool(), sampled, m.targets)
    corrupted = input_ids.scatter(1, m.positions, sampled)
    return corrupted, (corrupted != input_ids) & attention_mask.bool()


def masked_lm_loss(
    logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over used slots (Σ w·nll / Σ w) and the accuracy there, both in fp32."""
    nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    denom = weights.sum().clamp(min=1.0)
    loss = (nll * weights.flatten()).sum() / denom
    acc = ((logits.argmax(-1) == targets).float() * weights).sum() / denom
    return loss, acc.detach()


@dataclass
class StepOutput:
    loss: torch.Tensor
    stats: dict[
        str, torch.Tensor
    ]  # detached scalars, averaged by the trainer over a logging window
    disc_logits: torch.Tensor | None = None  # [B, T], detached: for the discriminator's AUC
    disc_labels: torch.Tensor | None = None
    real_mask: torch.Tensor | None = None


class Objective(nn.Module):
    """What every objective shares: its settings, the special ids, the static slot count, and the
    masked-LM step (mask the batch, run an MLM model at the masked slots only, score it)."""

    def __init__(self, cfg: ObjectiveConfig, special: SpecialIds, seq_len: int):
        super().__init__()
        self.cfg = cfg
        self.special = special
        self.num_slots = cfg.num_predictions(seq_len)

    def models(self) -> dict[str, nn.Module]:
        """The trained networks by role; each becomes a model folder at the end of pretraining."""
        raise NotImplementedError

    def masked_lm_step(
        self,
        model: ElectraForMaskedLM,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor,
    ) -> tuple[Masked, torch.Tensor, torch.Tensor, torch.Tensor]:
        vocab = model.config.vocab_size
        m = mask_tokens(input_ids, attention_mask, self.special, self.cfg, self.num_slots, vocab)
        logits = model(m.input_ids, token_type_ids, attention_mask, m.positions)
        loss, acc = masked_lm_loss(logits, m.targets, m.weights)
        return m, logits, loss, acc


class ReplacedTokenDetection(Objective):
    """ELECTRA: generator MLM loss + disc_weight * discriminator loss over all real tokens."""

    def __init__(
        self,
        generator: ElectraForMaskedLM,
        discriminator: ElectraForPreTraining,
        cfg: ObjectiveConfig,
        special: SpecialIds,
        seq_len: int,
    ):
        super().__init__(cfg, special, seq_len)
        self.generator = generator
        self.discriminator = discriminator

    def models(self) -> dict[str, nn.Module]:
        return {"discriminator": self.discriminator, "generator": self.generator}

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> StepOutput:
        m, gen_logits, mlm_loss, mlm_acc = self.masked_lm_step(
            self.generator, input_ids, token_type_ids, attention_mask
        )

        sampled = sample_tokens(gen_logits, self.cfg.temperature)
        corrupted, labels = replace_tokens(input_ids, attention_mask, m, sampled)
        real = attention_mask.bool()

        disc_logits = self.discriminator(corrupted, token_type_ids, attention_mask).float()
        per_token = F.binary_cross_entropy_with_logits(
            disc_logits, labels.float(), reduction="none"
        )
        real_f = real.float()
        n_real = real_f.sum()
        disc_loss = (per_token * real_f).sum() / n_real
        loss = self.cfg.gen_weight * mlm_loss + self.cfg.disc_weight * disc_loss

        with torch.no_grad():
            disc_acc = (((disc_logits > 0) == labels).float() * real_f).sum() / n_real
            stats = {
                "mlm_loss": mlm_loss.detach(),
                "disc_loss": disc_loss.detach(),
                "mlm_acc": mlm_acc,
                "disc_acc": disc_acc,
                "replaced_frac": labels.float().sum() / n_real,
            }
        return StepOutput(loss, stats, disc_logits.detach(), labels, real)


class MaskedLanguageModeling(Objective):
    """The BERT baseline: one full-size MLM model trained on the masked slots only."""

    def __init__(
        self, model: ElectraForMaskedLM, cfg: ObjectiveConfig, special: SpecialIds, seq_len: int
    ):
        super().__init__(cfg, special, seq_len)
        self.mlm = model

    def models(self) -> dict[str, nn.Module]:
        return {"mlm": self.mlm}

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> StepOutput:
        _, _, loss, acc = self.masked_lm_step(self.mlm, input_ids, token_type_ids, attention_mask)
        return StepOutput(loss, {"mlm_loss": loss.detach(), "mlm_acc": acc})


def build_objective(
    model_cfg: ModelConfig, cfg: ObjectiveConfig, special: SpecialIds, seq_len: int
) -> Objective:
    """Builds the networks the objective trains, freshly initialised, with ELECTRA's weight sharing."""
    if cfg.name == "mlm":
        return MaskedLanguageModeling(ElectraForMaskedLM(model_cfg), cfg, special, seq_len)
    discriminator = ElectraForPreTraining(model_cfg)
    # Sharing as the official code does: word, position and token-type tables and the embedding
    # LayerNorm are one module; each network keeps its own embeddings_project.
    shared = discriminator.electra.embeddings if cfg.tie_embeddings else None
    generator = ElectraForMaskedLM(generator_config(model_cfg, cfg), shared)
    return ReplacedTokenDetection(generator, discriminator, cfg, special, seq_len)
