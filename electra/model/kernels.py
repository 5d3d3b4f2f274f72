"""Kernels faster than torch's stock ones on CPU, and `use_kernels`, which puts them into a built
model. Each family's `modeling.py` is written with stock layers (`nn.Linear`, `nn.Dropout`, SDPA); the
`kernels` setting (auto or stock) chooses whether a run swaps these in, as Hugging Face chooses an
attention implementation by name. The swap changes module classes only: parameters, their names
and ties stay as they are, so state dicts, optimizers and data parallelism see the same model.

Linear layers: torch's fp32 products on CPU go to MKL's sgemm, which on CPUs not made by Intel keeps
to AVX2 code: on an AMD EPYC with AVX-512 it runs a 4096² product at 0.19 TFLOP/s where oneDNN,
also inside torch, runs it at 0.40 (benchmarks/RESULTS.md). On such CPUs `OneDnnLinear` and
`linear` run the forward and the input gradient through oneDNN's linear (its bias added in the same
pass, where `addmm` first copies the bias into the output) and the weight gradient through oneDNN
in whichever orientation runs faster. On Intel CPUs, on AVX2-only CPUs (where MKL's kernels are the
faster), on GPU, in bf16 autocast (already oneDNN) and under torch.compile the stock `F.linear`
runs. `ELECTRA_CPU_LINEAR=onednn` or `=stock` overrides the choice.

On CPU, drawing the random numbers costs more than the dropout itself: `bernoulli_` spends about
10 ns per element, and a pretraining step of the `small` preset draws some 60M (attention
probabilities alone are [B, heads, T, T] per layer). `CheapDropout` takes four 16-bit draws from
each random 64-bit word, which is about 8x cheaper, and keeps an element when its 16 bits clear a
threshold: the drop rate is round(p * 65536) / 65536 (p = 0.1 gives 0.1000061).
The kept/dropped mask is saved for backward in the activations' dtype rather than as booleans.
SDPA with dropout on CPU falls back to an unfused path anyway, so `PerHeadSelfAttention` writes
attention with dropout in training out with that dropout, one head at a time to spare the
head-layout copies. On GPU, under torch.compile (which may wrap a model after the swap: the check
is made at each call), in eval and at p = 0 the stock dropout and SDPA run instead.

Each family's own kernels (the ELECTRA family's per-head attention, the modern family's fused
rotary heads, short-row attention and GeGLU) are in its folder's `kernels.py`, named by its record's
`kernels`; `use_kernels` swaps them in with these.

The malloc setting that also speeds CPU training (`electra.engine.host_memory`) is not here: it is a
setting of the whole process, not of a model, and `electra.engine.runtime.configure_process` applies it.
"""

from __future__ import annotations

import functools
import math
import os
import platform

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.utils import flop_counter

from electra.errors import ElectraError
from electra.model.configs import KERNELS
from electra.model.family import families


def use_kernels(model: nn.Module, choice: str, device: torch.device) -> nn.Module:
    """`model`, in place, with the kernels `choice` names: on a CPU `device`, "auto" turns its
    stock linear layers (where `onednn_linear_enabled`), dropouts and self-attentions into the
    CPU kernels' classes; "stock", or another device, leaves it as built. Only exact stock classes
    are swapped, so a layer a caller specialised keeps its own forward. Call it before data
    parallelism and torch.compile wrap the model."""
    if choice not in KERNELS:
        raise ElectraError(f"kernels={choice!r}: use {' or '.join(KERNELS)}")
    if choice == "stock" or device.type != "cpu":
        return model
    swaps: dict[type, type] = {nn.Dropout: CheapDropout}
    for family in families().values():  # each family's own (`electra/model/<family>/kernels.py`)
        swaps.update(family.kernels or {})
    if onednn_linear_enabled():
        swaps[nn.Linear] = OneDnnLinear
    for module in model.modules():
        swapped = swaps.get(type(module))
        if swapped is not None:
            # Subclasses that add no state: the parameters stay the very same tensors.
            module.__class__ = swapped
    return model


def cpu_info(field: str) -> str:
    """The first CPU's `field` in /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":")[1].strip() for line in f if line.startswith(field)), "")
    except OSError:
        return ""


@functools.cache
def onednn_linear_enabled() -> bool:
    """oneDNN for fp32 linear layers on CPU where torch's products would take MKL's slow path (an
    AVX-512 CPU not made by Intel); `ELECTRA_CPU_LINEAR` (onednn, stock or auto) overrides. Read on
    first use, so that a bad value is an error the CLI reports, not a failed import."""
    choice = os.environ.get("ELECTRA_CPU_LINEAR", "auto")
    if choice not in ("auto", "onednn", "stock"):
        raise ElectraError(
            f"environment variable ELECTRA_CPU_LINEAR={choice!r}: use auto, onednn or stock"
        )
    if choice == "stock" or not torch.backends.mkldnn.is_available():
        return False
    if choice == "onednn":
        return True
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return x86 and torch.backends.mkl.is_available() and mkl_slow_path(cpu_info)


def mkl_slow_path(cpuinfo) -> bool:
    """Whether MKL's products run below oneDNN's here: on a CPU with AVX-512 not made by Intel MKL
    keeps to its AVX2 kernels while oneDNN uses AVX-512. On an AVX2-only CPU both have AVX2 and
    MKL's are the faster (benchmarks/RESULTS.md, issue 15: 576 against 350 tokens/s)."""
    vendor, flags = cpuinfo("vendor_id"), cpuinfo("flags").split()
    return vendor not in ("", "GenuineIntel") and "avx512f" in flags


if torch.backends.mkldnn.is_available() and (
    torch.ops.mkldnn._linear_pointwise not in flop_counter.flop_registry
):

    @flop_counter.register_flop_formula(torch.ops.mkldnn._linear_pointwise)
    def _linear_flops(x_shape, w_shape, *args, **kwargs) -> int:
        """So that torch.utils.flop_counter counts our products as it counts F.linear's."""
        return 2 * math.prod(x_shape) * w_shape[0]


def onednn_mm(a: torch.Tensor, b_t: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """a @ b_t.T (+ bias) by oneDNN's linear: a [..., K], b_t [N, K]."""
    return torch.ops.mkldnn._linear_pointwise(a, b_t, bias, "none", [], "")


class _OneDnnLinear(torch.autograd.Function):
    """F.linear with oneDNN's products forward and backward (fp32, CPU)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return onednn_mm(x, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = onednn_mm(g, weight.t()).view(x.shape)
        if ctx.needs_input_grad[1]:
            x2 = x.reshape(-1, x.shape[-1])
            # A product over all M rows: oneDNN runs it faster when the larger of the weight's two
            # dimensions is the output's column dimension (on the AMD box of RESULTS.md: 0.30-0.37
            # against 0.09-0.24 TFLOP/s for the small preset's shapes and its vocabulary head).
            if weight.shape[0] >= weight.shape[1]:
                grad_w = onednn_mm(x2.t(), g.t()).t()
            else:
                grad_w = onednn_mm(g.t(), x2.t())
        if ctx.needs_input_grad[2]:  # False where there is no bias
            grad_b = g.sum(0)
        return grad_x, grad_w, grad_b


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear`, through oneDNN where that is faster (see the module's docstring)."""
    if (
        x.dtype == torch.float32
        and not stock_ops(x.device)
        and not torch.is_autocast_enabled("cpu")
        and onednn_linear_enabled()
    ):
        return _OneDnnLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


class OneDnnLinear(nn.Linear):
    """`nn.Linear` (the same parameters and names) whose product is `linear` above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def random_int16(n: int, seed: int | None = None) -> torch.Tensor:
    """n uniform 16-bit integers on CPU, four from each random 64-bit word. The words come from
    numpy's SFC64, about twice as fast as torch's CPU generator (a Mersenne twister), seeded by a
    draw from torch's generator (`draw_seed`) so that torch.manual_seed and checkpointed RNG state
    reproduce them; given `seed`, the same integers again (a kernel that redraws its dropout in
    backward rather than keep it)."""
    seed = draw_seed() if seed is None else seed
    bits = np.random.SFC64(seed).random_raw((n + 3) // 4).view(np.int64)
    return torch.from_numpy(bits).view(torch.int16)[:n]


def draw_seed() -> int:
    """A seed for `random_int16`, drawn from torch's CPU generator."""
    return int(torch.randint(2**63 - 1, ()))


def keep_mask(x: torch.Tensor, p: float, seed: int | None = None) -> torch.Tensor:
    """A mask like CPU tensor `x` (same shape and dtype): 1 with probability
    1 - round(p * 65536) / 65536, else 0 (the same mask again for the same `seed`). It is written
    straight in x's dtype, as multiplying by a float mask is several times cheaper on CPU than
    `where` on a boolean one."""
    chunks = random_int16(x.numel(), seed).view(x.shape)
    return torch.ge(chunks, round(p * 65536) - 32768, out=torch.empty_like(x))


def stock_ops(device: torch.device) -> bool:
    """Whether the stock dropout and SDPA serve best: on GPU their kernels are fused, and under
    torch.compile inductor fuses them (and cannot trace the random draws here)."""
    return device.type != "cpu" or torch.compiler.is_compiling()


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if stock_ops(x.device):
        return F.dropout(x, p, True)
    return x * keep_mask(x, p).mul_(1.0 / (1.0 - p))


class CheapDropout(nn.Dropout):
    """`nn.Dropout` with CPU-cheap random bits (`dropout` above); `inplace` is not honoured."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


def dropped_attention(
    x: torch.Tensor,
    weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    biases: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    heads: int,
    mask: torch.Tensor | None,
    dropout_p: float,
) -> torch.Tensor:
    """Multi-head self-attention of CPU tensor x [B, T, H] to [B, T, H] with dropout p > 0: q, k
    and v projected by `weights` and `biases` (HF's query, key and value layers) in one product,
    then softmax(q k^T / sqrt(d), masked), dropped out by `keep_mask`, times v. `mask` is boolean,
    True where a key may be attended to, shaped [B, 1, 1 or T, T] (the same for every head)."""
    (wq, wk, wv), (bq, bk, bv) = weights, biases
    # The 1/sqrt(d) and 1/(1 - p) scales go into the q and v projections ([H, H] products), so
    # that no [B, T, T] product or gradient needs a pass of its own for them.
    sq, sv = (x.shape[-1] // heads) ** -0.5, 1.0 / (1.0 - dropout_p)
    qkv = linear(x, torch.cat([wq * sq, wk, wv * sv]), torch.cat([bq * sq, bk, bv * sv]))
    return _DroppedAttention.apply(qkv, padding_bias(mask, qkv), heads, dropout_p)


def padding_bias(mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """The additive bias (0 or -inf, `like`'s dtype) of a boolean [B, 1, 1 or T, T] key mask, as
    [B, 1 or T, T]; [1, 1, 1] for none. Broadcast by baddbmm, it is cheaper than a masked_fill
    over every [B, T, T] score."""
    if mask is None:
        return like.new_zeros(1, 1, 1)
    bias = torch.zeros(mask.shape, dtype=like.dtype, device=like.device)
    return bias.masked_fill_(~mask, float("-inf")).squeeze(1)


class _DroppedAttention(torch.autograd.Function):
    """softmax(q k^T + bias) · keep_mask · v for each head of a fused projection qkv [B, T, 3H]
    (scales already folded in), one head at a time: a head's q, k and v are strided [B, T, d] views
    that bmm reads in place, where a [B, heads, T, d] batch needs a copy of each. Written by hand so
    that every product reads its operands in place, the gradient lands in one [B, T, 3H] buffer,
    and each head keeps two [B, T, T] tensors for backward (the softmax and the keep mask) where
    autograd keeps three (the dropped product as well)."""

    @staticmethod
    def forward(ctx, qkv, bias, heads, p):
        probs, keeps, outs = [], [], []
        for q, k, v in _head_views(qkv, heads):
            prob = torch.baddbmm(bias, q, k.transpose(1, 2)).softmax(-1)
            keep = keep_mask(prob, p)
            outs.append(torch.bmm(prob * keep, v))
            probs.append(prob)
            keeps.append(keep)
        ctx.heads = heads
        ctx.save_for_backward(qkv, *probs, *keeps)
        return torch.cat(outs, -1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        qkv, *saved = ctx.saved_tensors
        heads = ctx.heads
        grad_qkv = torch.empty_like(qkv)
        grads = _head_views(grad_qkv, heads)
        outs = grad.chunk(heads, -1)
        for i, (q, k, v) in enumerate(_head_views(qkv, heads)):
            prob, keep, (grad_q, grad_k, grad_v) = saved[i], saved[heads + i], grads[i]
            grad_v.copy_(torch.bmm((prob * keep).transpose(1, 2), outs[i]))
            grad_prob = torch.bmm(outs[i], v.transpose(1, 2)).mul_(keep)
            grad_score = torch._softmax_backward_data(grad_prob, prob, -1, prob.dtype)
            grad_q.copy_(torch.bmm(grad_score, k))
            grad_k.copy_(torch.bmm(grad_score.transpose(1, 2), q))
        return grad_qkv, None, None, None


def _head_views(qkv: torch.Tensor, heads: int) -> list[tuple[torch.Tensor, ...]]:
    """(q, k, v) of each head of a fused projection [B, T, 3H], as strided [B, T, d] views."""
    b, t, three_h = qkv.shape
    parts = qkv.view(b, t, 3 * heads, three_h // (3 * heads)).unbind(2)
    return [(parts[i], parts[heads + i], parts[2 * heads + i]) for i in range(heads)]
