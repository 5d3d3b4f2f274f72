"""CPU kernels of the modern family (`electra.model.modernbert`), put into a built model by
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

`GegluMLP`: autograd's chunk of the widened product into value and gate concatenates their two
gradients backward; `_Geglu` writes them into the halves of one buffer instead (the GELU's and
the product's arithmetic are torch's own, so outputs and gradients are the stock layer's bits).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from electra.model.modernbert import ModernBertAttention, ModernBertMLP


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
    the angles' cos [T, 1, d] and half-sin [T, 1, d / 2]."""

    @staticmethod
    def forward(ctx, qkv, cos, sin):
        turned = torch.empty_like(qkv[:, :, :2])
        turn(qkv[:, :, :2], cos[:, None], sin[:, None], turned, 1.0)
        ctx.save_for_backward(cos, sin)
        q, k = turned.permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, qkv[:, :, 2].transpose(1, 2)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_q, grad_k, grad_v):
        cos, sin = ctx.saved_tensors
        b, heads, t, d = grad_q.shape
        grad = grad_q.new_empty(b, t, 3, heads, d)
        turn(grad_q.transpose(1, 2), cos, sin, grad[:, :, 0], -1.0)
        turn(grad_k.transpose(1, 2), cos, sin, grad[:, :, 1], -1.0)
        grad[:, :, 2].copy_(grad_v.transpose(1, 2))
        return grad, None, None


class RotaryAttention(ModernBertAttention):
    """`ModernBertAttention` (the same parameters) whose heads come from `_RotaryHeads` on CPU in
    fp32."""

    def heads(
        self, x: torch.Tensor, rope: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not eager_cpu(x):
            return super().heads(x, rope)
        b, t, h = x.shape
        d = h // self.num_heads
        qkv = self.Wqkv(x).view(b, t, 3, self.num_heads, d)
        return _RotaryHeads.apply(qkv, rope[0][:, None], rope[1][:, None, : d // 2])


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
        h = self.Wi(x)
        dropped = self.training and self.drop.p > 0
        if not eager_cpu(h) or dropped or not isinstance(self.act, nn.GELU):
            return super().forward(x)
        return self.Wo(_Geglu.apply(h, self.act.approximate))
