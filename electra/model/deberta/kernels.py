"""The DeBERTa-v3 family's CPU kernel, which `use_kernels` swaps in: its disentangled attention in
training run one head at a time (`DisentangledAttention`).

With dropout on the attention probabilities, SDPA on CPU falls back to its unfused path (and draws
its dropout with `bernoulli_`), and the two position terms are [B, heads, T, T] tensors built,
added and differentiated apart from it. Here each head's content scores, its c2p and p2c terms
(gathered from products against the relative rows the row reaches), the padding bias, the softmax
and the dropout (`electra.model.kernels.keep_mask`) are one [B, T, T] buffer at a time, which the
head's q, k and v read in place from the fused projection; backward is written by hand, the
position terms' gradients scattered back to the rows they came from. The 1/sqrt(3d) scale goes
into the query product and the 1/(1 - p) into the value product (`[H, H]` products), so no
[B, T, T] pass is spent on them.

On GPU, under torch.compile, at a few query positions (the generator's last layer, the enhanced
mask decoder) and with `kernels=stock`, the stock module runs.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from electra.model.deberta.modeling import Context, DisentangledSelfAttention
from electra.model.kernels import draw_seed, keep_mask, linear, padding_bias, stock_ops


class PerHeadDisentangledAttention(DisentangledSelfAttention):
    """`DisentangledSelfAttention` (the same parameters) whose full-row attention on CPU is
    `DisentangledAttention`, its products through `linear` (oneDNN where that is faster)."""

    def forward(self, x, ctx: Context, queries=None, positions=None) -> torch.Tensor:
        if queries is not None or positions is not None or stock_ops(x.device):
            return super().forward(x, ctx, queries, positions)
        if ctx.mask is not None and ctx.mask.shape[2] != 1:  # a [B, 1, T, T] mask: the stock path
            return super().forward(x, ctx, queries, positions)
        p = self.dropout_now()
        sq, sv = 1.0 / self.scale, 1.0 / (1.0 - p)
        wq, wk, wv = self.query_proj, self.key_proj, self.value_proj
        # The scaled query product serves the content and the relative rows alike: Pq's term is
        # k.Pq / s.
        q_weight, q_bias = wq.weight * sq, wq.bias * sq
        qkv = linear(
            x,
            torch.cat([q_weight, wk.weight, wv.weight * sv]),
            torch.cat([q_bias, wk.bias, wv.bias * sv]),
        )
        pos = linear(
            self.pos_dropout(ctx.rel),
            torch.cat([q_weight, wk.weight]),
            torch.cat([q_bias, wk.bias]),
        )
        bias = padding_bias(ctx.mask, qkv)
        return DisentangledAttention.apply(qkv, pos, bias, ctx.index, self.num_attention_heads, p)


class DisentangledAttention(torch.autograd.Function):
    """softmax(q k^T + c2p + p2c + bias) · keep · v for each head of a fused projection qkv
    [B, T, 3H] (scales folded in), the position terms from pos [W, 2H] (Pq then Pk, the relative
    rows' products) at the rows `index` [T, T] names: [B, T, H]."""

    @staticmethod
    def forward(ctx, qkv, pos, bias, index, heads, p):
        b, t, _ = qkv.shape
        rows = index.expand(b, t, t)
        cols = index.t().expand(b, t, t)
        # Each head's dropout is drawn from a seed of its own and drawn again in backward, so
        # that only the probabilities are kept (half the memory of keeping the mask too).
        seeds = [draw_seed() for _ in range(heads)] if p > 0 else [None] * heads
        probs, outs = [], []
        views = zip(_head_views(qkv, heads), _pos_views(pos, heads), seeds, strict=True)
        for (q, k, v), (pq, pk), seed in views:
            score = torch.baddbmm(bias, q, k.transpose(1, 2))
            score += torch.matmul(q, pk.t()).gather(2, rows)
            score += torch.matmul(k, pq.t()).gather(2, cols).transpose(1, 2)
            prob = score.softmax(-1)
            outs.append(torch.bmm(prob if seed is None else prob * keep_mask(prob, p, seed), v))
            probs.append(prob)
        ctx.heads, ctx.p, ctx.seeds = heads, p, seeds
        ctx.save_for_backward(qkv, pos, index, *probs)
        return torch.cat(outs, -1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        qkv, pos, index, *saved = ctx.saved_tensors
        heads = ctx.heads
        b, t, _ = qkv.shape
        rows, cols = index.expand(b, t, t), index.t().expand(b, t, t)
        grad_qkv, grad_pos = torch.empty_like(qkv), torch.empty_like(pos)
        outs = grad.chunk(heads, -1)
        views, pos_views = _head_views(qkv, heads), _pos_views(pos, heads)
        grads, pos_grads = _head_views(grad_qkv, heads), _pos_views(grad_pos, heads)
        for i in range(heads):
            (q, k, v), (pq, pk) = views[i], pos_views[i]
            (grad_q, grad_k, grad_v), (grad_pq, grad_pk) = grads[i], pos_grads[i]
            prob, seed = saved[i], ctx.seeds[i]
            keep = None if seed is None else keep_mask(prob, ctx.p, seed)
            dropped = prob if keep is None else prob * keep
            grad_v.copy_(torch.bmm(dropped.transpose(1, 2), outs[i]))
            grad_prob = torch.bmm(outs[i], v.transpose(1, 2))
            if keep is not None:
                grad_prob.mul_(keep)
            grad_score = torch._softmax_backward_data(grad_prob, prob, -1, prob.dtype)
            # Each term's gradient gathered back to the relative rows it read.
            w = pos.shape[0]
            grad_c2p = grad_score.new_zeros(b, t, w).scatter_add_(2, rows, grad_score)
            grad_p2c = grad_score.new_zeros(b, t, w).scatter_add_(
                2, cols, grad_score.transpose(1, 2)
            )
            grad_q.copy_(torch.baddbmm(torch.matmul(grad_c2p, pk), grad_score, k))
            grad_k.copy_(torch.baddbmm(torch.matmul(grad_p2c, pq), grad_score.transpose(1, 2), q))
            grad_pk.copy_(grad_c2p.flatten(0, 1).t() @ q.flatten(0, 1))
            grad_pq.copy_(grad_p2c.flatten(0, 1).t() @ k.flatten(0, 1))
        return grad_qkv, grad_pos, None, None, None, None


def _head_views(qkv: torch.Tensor, heads: int) -> list[tuple[torch.Tensor, ...]]:
    """(q, k, v) of each head of a fused projection [B, T, 3H], as strided [B, T, d] views."""
    b, t, three_h = qkv.shape
    parts = qkv.view(b, t, 3 * heads, three_h // (3 * heads)).unbind(2)
    return [(parts[i], parts[heads + i], parts[2 * heads + i]) for i in range(heads)]


def _pos_views(pos: torch.Tensor, heads: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(Pq, Pk) of each head of the relative rows' products [W, 2H], as strided [W, d] views."""
    w, two_h = pos.shape
    parts = pos.view(w, 2 * heads, two_h // (2 * heads)).unbind(1)
    return [(parts[i], parts[heads + i]) for i in range(heads)]


# What `use_kernels` swaps: {stock class: its kernel subclass}.
KERNELS = {DisentangledSelfAttention: PerHeadDisentangledAttention}
