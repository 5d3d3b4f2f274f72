"""Pretraining objectives: masking, generator sampling, labels and losses (ELECTRA.md §2.3).

An objective is an `nn.Module` that owns the networks it trains and maps a batch to a loss plus
detached statistics. The encoders in `model.py` know nothing of this. Two objectives ship:

- `ReplacedTokenDetection` (ELECTRA): a small generator fills masked slots with its samples,
  the discriminator labels every real token as original or replaced; loss = MLM + 50 * RTD.
- `MaskedLanguageModeling`: the BERT baseline, one full-size MLM model.

Every tensor shape is static: each row gets exactly `num_slots` prediction slots, and rows that need
fewer carry zero-weight slots, so the step compiles once and never syncs with the host.

Positions are drawn as the official `PH.mask` draws them: uniformly *with replacement* among the
real, non-special tokens, so a row's k used slots may hold a position twice (about 7% of slots at
seq len 128). Such a position is masked if any of its slots drew [MASK], written once, and counts
once per slot in the MLM loss, as there.
`objective.distinct_positions` draws without replacement instead (k distinct positions per row).
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

    positions: torch.Tensor  # [B, N] token positions per row
    weights: torch.Tensor  # [B, N] 1.0 for a used slot, 0.0 for a padding slot
    writes: torch.Tensor  # [B, N] bool: a used slot whose position no earlier used slot holds
    targets: torch.Tensor  # [B, N] original ids at `positions`
    input_ids: torch.Tensor  # [B, T] with the used slots set to [MASK], kept, or a random token


def select_positions(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special: SpecialIds,
    mask_prob: float,
    num_slots: int,
    distinct: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chooses round(real_tokens * mask_prob) positions per row (at least 1, at most `num_slots`),
    never a special token or padding: uniform draws with replacement (the official code), or
    `distinct` ones. Returns positions [B, N] and slot weights [B, N]."""
    candidate = attention_mask.bool()
    for token in (special.cls, special.sep, special.mask, special.pad):
        candidate &= input_ids != token
    num_real = attention_mask.sum(1)
    count = torch.round(num_real * mask_prob).long().clamp(1, num_slots)
    count = torch.where(candidate.any(1), count, 0)  # a row with no candidate uses no slot
    if distinct:
        # Uniform scores on candidates and -1 elsewhere: the top k are k uniformly chosen candidates.
        scores = torch.rand(input_ids.shape, device=input_ids.device).masked_fill(~candidate, -1.0)
        positions = scores.topk(num_slots, dim=1, sorted=True).indices
        count = torch.minimum(count, candidate.sum(1))
    else:
        # A row with no candidate draws from all its positions, so that every row has a
        # distribution; none of its slots is used.
        weights = candidate | ~candidate.any(1, keepdim=True)
        positions = torch.multinomial(weights.float(), num_slots, replacement=True)
    weights = torch.arange(num_slots, device=input_ids.device)[None, :] < count[:, None]
    return positions, weights.float()


def first_writes(positions: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """True at each used slot whose position no earlier used slot of its row holds: the slots that
    write into the sequence, one per distinct position."""
    used = weights.bool()
    n = positions.shape[1]
    earlier = torch.ones(n, n, dtype=torch.bool, device=positions.device).tril(-1)  # [i, j]: j < i
    repeat = (positions[:, :, None] == positions[:, None, :]) & earlier & used[:, None, :]
    return used & ~repeat.any(-1)


def write_slots(
    input_ids: torch.Tensor, positions: torch.Tensor, values: torch.Tensor, writes: torch.Tensor
) -> torch.Tensor:
    """input_ids with values[b, i] at positions[b, i] where writes[b, i]. The writing slots hold
    distinct positions, so adding their changes is exact whatever other slots hold."""
    delta = torch.where(writes, values - input_ids.gather(1, positions), 0)
    return input_ids.scatter_add(1, positions, delta)


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
        input_ids, attention_mask, special, cfg.mask_prob, num_slots, cfg.distinct_positions
    )
    writes = first_writes(positions, weights)
    targets = input_ids.gather(1, positions)
    u = torch.rand(positions.shape, device=input_ids.device)
    random_ids = torch.randint_like(targets, vocab_size)
    # As in the official code, a position held by several used slots becomes [MASK] if any of them
    # drew [MASK]; otherwise its first slot's draw (keep, or a random token) stands.
    draws_mask = (u < cfg.mask_frac) & weights.bool()
    any_mask = torch.zeros_like(input_ids).scatter_add(1, positions, draws_mask.long())
    replacement = torch.where(
        any_mask.gather(1, positions) > 0,
        torch.full_like(targets, special.mask),
        torch.where(u < cfg.mask_frac + cfg.keep_frac, targets, random_ids),
    )
    masked = write_slots(input_ids, positions, replacement, writes)
    return Masked(positions, weights, writes, targets, masked)


def sample_tokens(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """An exact categorical sample from softmax(logits / T), in fp32, with no gradient."""
    with torch.no_grad():
        return sample_categorical(torch.softmax(logits.float() / temperature, dim=-1))


def sample_categorical(probs: torch.Tensor, block: int = 256) -> torch.Tensor:
    """One draw per row of `probs` [..., V] (rows summing to 1, or to any positive total).

    Departure from the official code, for speed only: it inverts the CDF with one uniform per row
    where `PH.sample_from_softmax` takes Gumbel-max (a uniform and two logs per vocabulary entry).
    Both draw from the same distribution. The CDF is taken in two levels, over sums of `block`
    entries and then within the chosen block, because a full cumsum over the vocabulary is a
    sequential pass that costs more than the softmax. A token of probability zero is never drawn."""
    with torch.no_grad():
        shape, v = probs.shape[:-1], probs.shape[-1]
        p = probs.reshape(-1, v)
        full = v // block * block
        sums = p[:, :full].view(p.shape[0], v // block, block).sum(-1)
        if full < v:
            sums = torch.cat([sums, p[:, full:].sum(-1, keepdim=True)], 1)
        cdf = sums.cumsum(-1)
        u = torch.rand(p.shape[0], 1, device=p.device, dtype=cdf.dtype) * cdf[:, -1:]
        j = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[1] - 1)
        start = j * block  # [rows, 1]
        idx = start + torch.arange(block, device=p.device)
        inside = p.gather(1, idx.clamp(max=v - 1)).masked_fill_(idx >= v, 0.0).cumsum_(-1)
        # What is left of u inside block j, kept within [0, the block's mass) against rounding so
        # that the draw lands on a token of non-zero probability.
        rest = (u - (cdf.gather(1, j) - sums.gather(1, j))).clamp_(min=0.0)
        rest = torch.minimum(rest, inside[:, -1:] * (1.0 - 1e-6))
        k = torch.searchsorted(inside, rest, right=True)
        return (start + k).clamp_(max=v - 1).view(shape)


def replace_tokens(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, m: Masked, sampled: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input and labels: samples written into every used slot (the kept ones
    too; a position held by two slots takes the first one's sample; unused slots change nothing),
    and "replaced" only where the token now differs, so a sample equal to the original is labelled
    original."""
    corrupted = write_slots(input_ids, m.positions, sampled, m.writes)
    return corrupted, (corrupted != input_ids) & attention_mask.bool()


class _MaskedCrossEntropy(torch.autograd.Function):
    """Σ w·nll / Σ w over rows of fp32 logits [N, V], and softmax(logits) as a second, constant
    output. The vocabulary-wide work is done once: the backward is (softmax - onehot) · w / Σ w
    from the same softmax, which the sampler and the accuracy read too. Autograd's own
    cross-entropy backward zero-fills and rewrites an [N, V] gradient on top of that."""

    @staticmethod
    def forward(ctx, logits, targets, weights):
        logp = torch.log_softmax(logits, -1)
        nll = logp.gather(-1, targets[:, None]).squeeze(-1).neg_()
        probs = logp.exp_()
        denom = weights.sum().clamp(min=1.0)
        ctx.save_for_backward(probs, targets, weights / denom)
        ctx.mark_non_differentiable(probs)
        ctx.set_materialize_grads(False)
        return (nll * weights).sum() / denom, probs

    @staticmethod
    def backward(ctx, grad_loss, _grad_probs):
        probs, targets, scale = ctx.saved_tensors
        g = (grad_loss * scale)[:, None]
        # In place in eager: a fresh [N, V] buffer costs ten times the multiply on CPU, and nothing
        # reads the softmax after the backward. Not under compile: inductor refuses a saved tensor
        # mutated in backward.
        grad = probs * g if torch.compiler.is_compiling() else probs.mul_(g)
        grad.scatter_add_(-1, targets[:, None], -g)
        return grad, None, None


def masked_lm_loss(
    logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over used slots (Σ w·nll / Σ w), the accuracy there (the target has the
    highest probability), and the softmax [..., V] with no gradient; all in fp32."""
    v = logits.shape[-1]
    loss, probs = _MaskedCrossEntropy.apply(
        logits.float().reshape(-1, v), targets.reshape(-1), weights.reshape(-1).float()
    )
    with torch.no_grad():
        best = probs.gather(-1, targets.reshape(-1, 1)).squeeze(-1) >= probs.amax(-1)
        acc = (best.float() * weights.reshape(-1)).sum() / weights.sum().clamp(min=1.0)
    return loss, acc, probs.view(logits.shape)


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
    ) -> tuple[Masked, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The masking, the logits and softmax at the slots, the loss and the accuracy."""
        vocab = model.config.vocab_size
        m = mask_tokens(input_ids, attention_mask, self.special, self.cfg, self.num_slots, vocab)
        logits = model(m.input_ids, token_type_ids, attention_mask, m.positions)
        loss, acc, probs = masked_lm_loss(logits, m.targets, m.weights)
        return m, logits, probs, loss, acc


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
        m, gen_logits, gen_probs, mlm_loss, mlm_acc = self.masked_lm_step(
            self.generator, input_ids, token_type_ids, attention_mask
        )

        if self.cfg.temperature == 1.0:
            sampled = sample_categorical(gen_probs)  # the softmax the loss already took
        else:
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
        _, _, _, loss, acc = self.masked_lm_step(
            self.mlm, input_ids, token_type_ids, attention_mask
        )
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
