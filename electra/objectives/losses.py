"""Vocabulary-wide losses: the masked-LM cross-entropy and per-token log-likelihoods, in fp32."""

from __future__ import annotations

import torch


class _TargetNLL(torch.autograd.Function):
    """-log softmax(logits)[target] for each row of fp32 logits [N, V], and softmax(logits) as a
    second, constant output. The vocabulary-wide work is done once: the backward is
    (softmax - onehot) * grad from the same softmax, which a sampler and an accuracy read too.
    Autograd's own cross-entropy backward zero-fills and rewrites an [N, V] gradient on top."""

    @staticmethod
    def forward(ctx, logits, targets):
        logp = torch.log_softmax(logits, -1)
        nll = logp.gather(-1, targets[:, None]).squeeze(-1).neg_()
        probs = logp.exp_()
        ctx.save_for_backward(probs, targets)
        ctx.mark_non_differentiable(probs)
        ctx.set_materialize_grads(False)
        return nll, probs

    @staticmethod
    def backward(ctx, grad_nll, _grad_probs):
        probs, targets = ctx.saved_tensors
        g = grad_nll[:, None]
        # In place in eager: a fresh [N, V] buffer costs ten times the multiply on CPU, and nothing
        # reads the softmax after the backward. Not under compile: inductor refuses a saved tensor
        # mutated in backward.
        grad = probs * g if torch.compiler.is_compiling() else probs.mul_(g)
        grad.scatter_add_(-1, targets[:, None], -g)
        return grad, None


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token negative log-likelihood [...] of `targets` under softmax(logits [..., V]), and the
    softmax [..., V] with no gradient; in fp32."""
    v = logits.shape[-1]
    nll, probs = _TargetNLL.apply(logits.float().reshape(-1, v), targets.reshape(-1))
    return nll.view(targets.shape), probs.view(logits.shape)


def weighted_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ w·x / Σ w (0 when no weight), the official reduction of every loss here."""
    weights = weights.float()
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


def argmax_hits(probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """1.0 where the target has the highest probability, else 0.0 (no gradient)."""
    with torch.no_grad():
        return (probs.gather(-1, targets[..., None]).squeeze(-1) >= probs.amax(-1)).float()


def masked_lm_loss(
    logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over used slots (Σ w·nll / Σ w), the accuracy there (the target has the
    highest probability), and the softmax [..., V] with no gradient; all in fp32."""
    nll, probs = token_nll(logits, targets)
    return weighted_mean(nll, weights), weighted_mean(argmax_hits(probs, targets), weights), probs
