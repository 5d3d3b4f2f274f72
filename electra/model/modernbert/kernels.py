"""CPU kernels of the modern family (`electra.model.modernbert.modeling`), put into a built model by
`electra.model.kernels.use_kernels` as that module's are (the `kernels` setting; a class swap that
keeps parameters, names and ties). They compute what the stock layers compute, rearranged so that
a CPU makes fewer passes over memory; in bf16, on GPU and under torch.compile (which fuses the
stock ops itself) the stock forward runs.

`RotaryAttention`: the stock layer turns q and k each with four elementwise passes and a
concatenation (rotate-half), autograd adds as many backward, and a stack and a copy put the three
heads' gradients back into one tensor. Here one autograd function turns q and k together in three
passes (no concatenation: each half of a head is updated from the other in place), hands v
through as a view, and writes the gradients of q, k and v straight into one [B, T, 3, heads, d]
buffer, the layout the q/k/v product's backward reads.

On rows of up to `EXPLICIT_MAX_LEN` keys (pretraining's 128) and without attention dropout, its
attention is `_Attention`: the scores of every head in one batched product, kept for backward,
where SDPA's flash kernel recomputes them there; a row's scores then fit in cache and this is
1.2-1.4x faster. The heads come out contiguous for it (v copied), and longer rows keep the flash
kernel.

`GegluMLP`: autograd's chunk of the widened product into value and gate concatenates their two
gradients backward; `_Geglu` writes them into the halves of one buffer instead (the GELU's and
the product's arithmetic are torch's own, so outputs and gradients are the stock layer's bits).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from electra.model.modernbert.modeling import ModernBertAttention, ModernBertMLP


def eager_cpu(t: torch.Tensor) -> bool:
    """Whether the kernels here serve: an fp32 CPU tensor, no autocast (in bf16 the stock layers'
    round trip through fp32 is the arithmetic to keep), outside torch.compile."""
    return (
        t.device.type == "cpu"
        and t.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
    )


def turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor, sign: float):
    """out = x * cos + sign * rotate_half(x) * sin, where rotate_half(x) = (-x2, x1) for the two
    halves of x's last dimension. `cos` spans the whole head; `sin` one half (rotary's two halves
    turn by the same angles). sign = -1 is the transpose: the gradient of a turn."""
    half = x.shape[-1] // 2
    torch.mul(x, cos, out=out)
    out[..., :half].addcmul_(x[..., half:], sin, value=-sign)
    out[..., half:].addcmul_(x[..., :half], sin, value=sign)
    return out


class _RotaryHeads(torch.autograd.Function):
    """q, k, v [B, heads, T, d] of a fused projection qkv [B, T, 3, heads, d], q and k turned by
    the angles' cos [T, 1, d] and half-sin [T, 1, d / 2] into one buffer, each contiguous
    (`_Attention` batches heads in place); v as a view of qkv, or with `copy_v` a contiguous copy."""

    @staticmethod
    def forward(ctx, qkv, cos, sin, copy_v):
        b, t, _, heads, d = qkv.shape
        out = qkv.new_empty(3 if copy_v else 2, b, heads, t, d)
        turn(qkv[:, :, :2], cos[:, None], sin[:, None], out[:2].permute(1, 3, 0, 2, 4), 1.0)
        v = qkv[:, :, 2].transpose(1, 2)
        if copy_v:
            v = out[2].copy_(v)
        ctx.save_for_backward(cos, sin)
        return out[0], out[1], v

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_q, grad_k, grad_v):
        cos, sin = ctx.saved_tensors
        b, heads, t, d = grad_q.shape
        grad = grad_q.new_empty(b, t, 3, heads, d)
        turn(grad_q.transpose(1, 2), cos, sin, grad[:, :, 0], -1.0)
        turn(grad_k.transpose(1, 2), cos, sin, grad[:, :, 1], -1.0)
        grad[:, :, 2].copy_(grad_v.transpose(1, 2))
        return grad, None, None, None


# Rows up to this long attend through `_Attention`: on this box's 2 cores it ran a modern-small
# layer's attention (batch 32, 4 heads of 64) 1.2-1.4x faster than SDPA's flash kernel from 64 to
# 160 tokens, level at 192 and 1.6-2x slower from 256 (benchmarks/RESULTS.md, issue 39 item 3).
EXPLICIT_MAX_LEN = 128


class _Attention(torch.autograd.Function):
    """softmax(q k^T / sqrt(d), masked) v over q [B, heads, N, d] and k, v [B, heads, T, d] in
    batched products over every head at once, the probabilities kept for backward. Where a row's
    [N, T] scores stay in cache this beats the flash kernel, which recomputes them backward; the
    values are SDPA's to rounding."""

    @staticmethod
    def forward(ctx, q, k, v, mask):
        b, heads, n, d = q.shape
        q3, k3, v3 = (x.reshape(b * heads, -1, d) for x in (q, k, v))
        scale = d**-0.5
        scores = torch.baddbmm(q3.new_empty(()), q3, k3.transpose(1, 2), beta=0, alpha=scale)
        if mask is not None:  # [B or 1, 1, N, T], True where a query sees a key
            scores.view(b, heads, n, -1).masked_fill_(~mask, float("-inf"))
        probs = scores.softmax(-1)
        ctx.scale = scale
        ctx.save_for_backward(q3, k3, v3, probs)
        return torch.bmm(probs, v3).view(b, heads, n, d)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q3, k3, v3, probs = ctx.saved_tensors
        b, heads, n, d = grad.shape
        g = grad.reshape(b * heads, n, d)
        grad_v = torch.bmm(probs.transpose(1, 2), g)
        grad_scores = torch._softmax_backward_data(
            torch.bmm(g, v3.transpose(1, 2)), probs, -1, probs.dtype
        )
        empty = g.new_empty(())
        grad_q = torch.baddbmm(empty, grad_scores, k3, beta=0, alpha=ctx.scale)
        grad_k = torch.baddbmm(empty, grad_scores.transpose(1, 2), q3, beta=0, alpha=ctx.scale)
        shape = (b, heads, -1, d)
        return grad_q.view(shape), grad_k.view(shape), grad_v.view(shape), None


def explicit(keys: int, mask: torch.Tensor | None, dropout_p: float) -> bool:
    """Whether `_Attention` serves (on an fp32 CPU tensor): rows of up to `EXPLICIT_MAX_LEN` keys,
    no dropout (SDPA's own draws stay), a boolean mask or none."""
    boolean = mask is None or (isinstance(mask, torch.Tensor) and mask.dtype == torch.bool)
    return keys <= EXPLICIT_MAX_LEN and dropout_p == 0 and boolean


class RotaryAttention(ModernBertAttention):
    """`ModernBertAttention` (the same parameters) whose heads come from `_RotaryHeads` and, on
    short rows, whose attention is `_Attention`, on CPU in fp32."""

    def heads(
        self, x: torch.Tensor, rope: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not eager_cpu(x):
            return super().heads(x, rope)
        b, t, h = x.shape
        d = h // self.num_heads
        qkv = self.Wqkv(x).view(b, t, 3, self.num_heads, d)
        copy_v = explicit(t, None, self.dropout_now())  # `_Attention` batches v in place too
        return _RotaryHeads.apply(qkv, rope[0][:, None], rope[1][:, None, : d // 2], copy_v)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        if not (eager_cpu(q) and explicit(k.shape[2], mask, self.dropout_now())):
            return super().attend(q, k, v, mask)
        return _Attention.apply(q, k, v, mask)


class _Geglu(torch.autograd.Function):
    """act(value) * gate of h = (value, gate) [..., 2I], the gradient written into one [..., 2I]
    tensor (autograd's chunk would concatenate the two halves' gradients)."""

    @staticmethod
    def forward(ctx, h, approximate):
        value, gate = h.chunk(2, dim=-1)
        act = F.gelu(value, approximate=approximate)
        ctx.save_for_backward(h, act)
        ctx.approximate = approximate
        return act * gate

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        h, act = ctx.saved_tensors
        value, gate = h.chunk(2, dim=-1)
        out = torch.empty_like(h)
        grad_value, grad_gate = out.chunk(2, dim=-1)
        torch.mul(grad, act, out=grad_gate)
        torch.ops.aten.gelu_backward.grad_input(
            grad * gate, value, approximate=ctx.approximate, grad_input=grad_value
        )
        return out, None


class GegluMLP(ModernBertMLP):
    """`ModernBertMLP` (the same parameters) whose GeGLU is `_Geglu` on CPU in fp32, where its
    activation is a GELU and no dropout runs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dropped = self.training and self.drop.p > 0
        if not eager_cpu(x) or dropped or not isinstance(self.act, nn.GELU):
            return super().forward(x)
        return self.Wo(_Geglu.apply(self.Wi(x), self.act.approximate))


# What `use_kernels` swaps: {stock class: its kernel subclass}.
KERNELS = {ModernBertAttention: RotaryAttention, ModernBertMLP: GegluMLP}
