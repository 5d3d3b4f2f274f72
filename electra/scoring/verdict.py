"""The held-out verdict on a pretraining run: `learned`, `not yet`, `collapsed` or `drifting`, from
its held-out measurements so far (`electra.scoring.health`) against its starting point, the first
of them (step 0: the untrained networks, or the checkpoint a continued run started from). Its job
is to say whether the discriminator's encoder will transfer worse than random weights, and it
remembers: a run that collapsed is called collapsed until its states have won back what they lost
(docs/pretraining.md §Held-out health, where the same rule is stated and the thresholds measured).

- **collapsed**: the final states have no spread, or use fewer than COLLAPSED_RANK_SHARE of the
  directions the starting point's used (effective rank), or, a discriminator's, point one way
  (mean cosine at least COLLAPSED_COSINE; a post-LayerNorm MLM model's states are that
  anisotropic and transfer as well as any). Once collapsed, a run is collapsed until the rank is
  back to RECOVERED_RANK_SHARE of the start's and the cosine under COLLAPSED_COSINE.
- **drifting** (a continued run only): its states have moved away from the checkpoint's: the rank
  under DRIFT_RANK_SHARE of the checkpoint's, or the mean cosine up by DRIFT_COSINE; or, a
  continued masked LM's, its held-out MLM loss above the checkpoint's own head's at step 0 by
  DRIFT_MLM_LOSS nats (continuing should never make the checkpoint's own task worse).
- **not yet**: a discriminator that ranks replacements by its own generator's samples under
  LEARNED_AUC, or does no better than the prior, or (where measured) tells the fixed corruption's
  replacements apart no better than LEARNED_FIXED_AUC: it judges tokens alone, not in context.
- **learned**: none of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from electra.scoring.health import Health

COLLAPSED_RMS = 1e-4
COLLAPSED_RANK_SHARE = 0.5
RECOVERED_RANK_SHARE = 0.7
COLLAPSED_COSINE = 0.8
DRIFT_RANK_SHARE = 0.9
DRIFT_COSINE = 0.2
DRIFT_MLM_LOSS = 0.1
LEARNED_AUC = 0.6
LEARNED_FIXED_AUC = 0.55


@dataclass(frozen=True)
class Verdict:
    """A verdict and the clause of history it rests on ("" when the start says nothing more)."""

    name: str
    history: str = ""


def collapsed(h: Health, start: Health, since: int | None = None) -> bool:
    """Whether `h` is collapsed against the starting point `start`; with `since`, the step of an
    earlier collapse, whether it has not yet recovered from it."""
    pointed = h.disc_auc is not None and h.mean_cosine >= COLLAPSED_COSINE  # a discriminator's
    if h.hidden_rms < COLLAPSED_RMS or pointed:
        return True
    share = RECOVERED_RANK_SHARE if since is not None else COLLAPSED_RANK_SHARE
    return start.effective_rank > 0 and h.effective_rank < share * start.effective_rank


def drifted(h: Health, start: Health) -> bool:
    """Whether a continued run's states have moved away from its checkpoint's."""
    fewer = h.effective_rank < DRIFT_RANK_SHARE * start.effective_rank
    worse_lm = h.disc_auc is None and None not in (h.mlm_loss, start.mlm_loss)
    worse_lm = worse_lm and h.mlm_loss > start.mlm_loss + DRIFT_MLM_LOSS
    return fewer or worse_lm or h.mean_cosine >= start.mean_cosine + DRIFT_COSINE


def judge(history: Sequence[tuple[int, Health]], continued: bool = False) -> Verdict:
    """The verdict on the newest of `history`'s (step, measurement) pairs, in step order, the
    first of them the starting point; `continued` for a run that started from a checkpoint."""
    start, (step, now) = history[0][1], history[-1]
    since = None  # the step of a collapse not yet recovered from
    for s, h in history:
        if not collapsed(h, start, since):
            since = None
        elif since is None:
            since = s
    first = next((s for s, h in history if collapsed(h, start)), None)
    shape = (
        f"effective rank {now.effective_rank:.0f} against {start.effective_rank:.0f} at step "
        f"{history[0][0]}, mean cosine {now.mean_cosine:.2f} against {start.mean_cosine:.2f}"
    )
    if since is not None:
        tail = ", not recovered" if since < step else ""
        return Verdict("collapsed", f"collapsed since step {since}{tail}: {shape}")
    recovered = f"collapsed at step {first}, recovered: {shape}" if first is not None else ""
    if continued and drifted(now, start):
        if now.disc_auc is None and None not in (now.mlm_loss, start.mlm_loss):
            shape += f", held-out MLM loss {now.mlm_loss:.2f} against {start.mlm_loss:.2f}"
        return Verdict("drifting", f"drifting from the checkpoint it continued: {shape}")
    if now.disc_auc is not None and not ranks(now):
        return Verdict("not yet", recovered)
    return Verdict("learned", recovered)


def ranks(h: Health) -> bool:
    """Whether a discriminator ranks replacements: by its own generator's and, where measured,
    the fixed corruption's."""
    own = (h.disc_auc or 0) >= LEARNED_AUC and (h.disc_prior_gain or 0) > 0
    fixed = h.disc_auc_fixed is None or h.disc_auc_fixed >= LEARNED_FIXED_AUC
    return own and fixed


def in_words(h: Health) -> str:
    """The verdict in words a newcomer reads, with the figures it rests on."""
    states = (
        f"its final states use {h.effective_rank:.0f} of {h.hidden_size} directions, mean cosine "
        f"between tokens {h.mean_cosine:.2f}"
    )
    ranks_ = ""
    if h.disc_auc is not None:
        fixed = (
            "" if h.disc_auc_fixed is None else f", {h.disc_auc_fixed:.3f} on the fixed corruption"
        )
        ranks_ = (
            f"held-out AUC {h.disc_auc:.3f} (chance 0.5){fixed}, {h.disc_prior_gain:+.3f} "
            "nats/token over always answering the replaced share; "
        )
    elif h.mlm_loss is not None:
        ranks_ = f"held-out MLM loss {h.mlm_loss:.2f}; "
    history = f" ({h.verdict_reason})" if h.verdict_reason else ""
    said = f"{h.verdict}: {ranks_}{states}{history}"
    return said + _advice(h)


def _advice(h: Health) -> str:
    """What to do about the verdict, where there is something to do."""
    if h.verdict == "collapsed":
        return (
            ". It has stopped reading its input (every token looks alike to it), and its features "
            "are likely to transfer worse than random weights'. Train again with a lower "
            "--train.lr (half, or a quarter) or a longer --train.warmup_steps"
        )
    if h.verdict == "drifting":
        return (
            ". The checkpoint's features are being worn away: lower --train.lr, or fine-tune the "
            "checkpoint as it was beside this one"
        )
    if h.verdict != "not yet":
        return ""
    if h.disc_auc_fixed is not None and (h.disc_auc or 0) >= LEARNED_AUC:
        return (
            ". It tells replacements by the tokens more than by their context (the fixed "
            "corruption's draws are as frequent as the words they replace). It needs more steps "
            "or data; a generator that learns faster makes harder replacements "
            "(--train.generator_lr_scale)"
        )
    return ". It needs more steps (or data) to learn"
