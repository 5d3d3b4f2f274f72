"""Bounds for comparing two floating-point computations of one quantity, derived from the dtype
and the reductions between inputs and outputs, never from what one CPU happened to produce.

Two orders of summing n terms differ by at most about 2·n·u·Σ|terms| (Higham, *Accuracy and
Stability of Numerical Algorithms*, §3.1 and §4.2), u being the unit roundoff, half of
`torch.finfo(dtype).eps`. Kernels for another instruction set (AVX2 or AVX-512), another thread
count or another blocking sum in another order, so two paths that are equal in exact arithmetic
differ by up to that much at each reduction, and a chain of `depth` reductions (the layers of an
encoder) adds one such gap per link. The bound is a worst case, so it holds on every CPU; a real
bug (a wrong mask, a missing term, a shifted index) moves outputs by a fraction of their own size,
orders of magnitude above it at the sizes the tests use.

`scale` stands for Σ|terms|, what a result would measure if none of its terms cancelled: by
default the largest magnitude in the expected tensor. Where terms do cancel, that underestimates
Σ|terms|; the `depth` the tests count (every reduction of a layer, forward and backward) leaves
the margin: the largest gap seen, over every comparison under AVX2, AVX-512 and one thread, was a
fifth of its bound, most a thousandth.
"""

from __future__ import annotations

import math

import torch


def unit_roundoff(dtype: torch.dtype) -> float:
    """u: the largest relative error of one rounding in `dtype`."""
    return torch.finfo(dtype).eps / 2


def rounding_bound(dtype: torch.dtype, terms: int, depth: int = 1, scale: float = 1.0) -> float:
    """The largest gap between two summation orders of `terms` terms whose magnitudes add up to
    `scale`, over a chain of `depth` such reductions."""
    return 2.0 * depth * terms * unit_roundoff(dtype) * scale


def assert_same_computation(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    terms: int,
    depth: int = 1,
    scale: float | None = None,
    dtype: torch.dtype | None = None,
    msg: str | None = None,
) -> None:
    """`actual` equals `expected` up to the rounding of `depth` chained reductions of `terms`
    terms each, in `dtype` (by default `expected`'s; pass the lower one where a result is
    compared with a float64 reference) (`rounding_bound`)."""
    if scale is None:
        scale = largest(expected)
    atol = rounding_bound(dtype or expected.dtype, terms, depth, scale)
    torch.testing.assert_close(actual, expected, rtol=0.0, atol=atol, msg=msg)


def largest(*tensors: torch.Tensor) -> float:
    """The largest magnitude in `tensors`, 1 where all are zero (the terms' size is unknown)."""
    found = max((float(t.detach().abs().max()) for t in tensors if t.numel()), default=0.0)
    return found or 1.0


def assert_same_gradients(actual, expected, *, terms: int, depth: int, names=None) -> None:
    """Each gradient of `actual` equals `expected`'s up to `rounding_bound` at one scale, the
    largest gradient of them all: every gradient sums terms of the back-propagated signal's size,
    some to near zero (a key bias's, which softmax ignores), whose own size says nothing of them."""
    actual, expected = list(actual), list(expected)
    assert len(actual) == len(expected)
    scale = largest(*expected)
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        name = names[i] if names is not None else str(i)
        assert_same_computation(a, e, terms=terms, depth=depth, scale=scale, msg=name)


# The chained reductions of one encoder layer's forward (either family): the query/key/value
# projection, the attention scores, the softmax's normaliser, the probabilities times the
# values, the output projection, the MLP's two products, and two LayerNorms' mean and variance.
LAYER_DEPTH = 11


def encoder_depth(layers: int, extra: int = 0, backward: bool = False) -> int:
    """Chained reductions through `layers` encoder layers and `extra` more (embeddings, a head);
    with `backward`, of the gradients: the forward chain, then each of its reductions once for
    the input's gradient and once for the weight's (a sum over the tokens)."""
    forward = LAYER_DEPTH * layers + extra
    return 3 * forward if backward else forward


def binomial_bound(p: float, n: int, deviations: float = 5.0) -> float:
    """`deviations` standard deviations of a frequency of probability `p` over `n` independent
    draws: a seeded draw outside it is a wrong rate, not chance (5: about 6e-7 two-sided)."""
    return deviations * math.sqrt(p * (1 - p) / n)
