"""The DeBERTa-v3 family's CPU attention kernel with dropout (electra/model/deberta/kernels.py):
its output and gradients equal plain autograd over the same per-head dropout masks, which it draws
again in backward from each head's seed rather than keeping them."""

from __future__ import annotations

import pytest
import torch

from electra.model.deberta.kernels import DisentangledAttention
from electra.model.deberta.relative import RelativeRows
from electra.model.kernels import draw_seed, keep_mask, padding_bias

from ...numerics import assert_same_computation, assert_same_gradients

pytestmark = pytest.mark.numeric

B, T, HEADS, D, P = 2, 150, 2, 8, 0.25


def reference(qkv, pos, bias, index, seeds):
    """softmax(q k^T + c2p + p2c + bias) * keep @ v per head, by autograd."""
    h = HEADS * D
    q, k, v = qkv.split(h, -1)
    pq, pk = pos.split(h, -1)
    outs = []
    for i in range(HEADS):
        part = slice(i * D, (i + 1) * D)
        qi, ki, vi, pqi, pki = q[..., part], k[..., part], v[..., part], pq[:, part], pk[:, part]
        score = qi @ ki.transpose(1, 2) + bias
        score = score + (qi @ pki.t()).gather(2, index.expand(B, T, T))
        score = score + (ki @ pqi.t()).gather(2, index.t().expand(B, T, T)).transpose(1, 2)
        prob = score.softmax(-1)
        outs.append((prob * keep_mask(prob.detach(), P, seeds[i])) @ vi)
    return torch.cat(outs, -1)


def test_kernel_with_dropout_equals_autograd_over_the_same_masks():
    g = torch.Generator().manual_seed(0)
    rows = RelativeRows.of(T, 256, 512, torch.device("cpu"))
    qkv = torch.randn(B, T, 3 * HEADS * D, generator=g, requires_grad=True)
    pos = torch.randn(rows.rows, 2 * HEADS * D, generator=g, requires_grad=True)
    mask = torch.ones(B, 1, 1, T, dtype=torch.bool)
    mask[1, ..., 100:] = False
    bias = padding_bias(mask, qkv)
    torch.manual_seed(7)
    out = DisentangledAttention.apply(qkv, pos, bias, rows.index, HEADS, P)
    torch.manual_seed(7)
    seeds = [draw_seed() for _ in range(HEADS)]
    expected = reference(qkv, pos, bias, rows.index, seeds)
    assert_same_computation(out, expected, terms=T, depth=4)
    weight = torch.randn(out.shape, generator=g)
    got = torch.autograd.grad((out * weight).sum(), (qkv, pos))
    want = torch.autograd.grad((expected * weight).sum(), (qkv, pos))
    assert_same_gradients(got, want, terms=B * T, depth=8, names=("qkv", "pos"))
    # Dropout acted: about P of the probabilities were dropped.
    assert 0.15 < float((keep_mask(torch.empty(B, T, T), P, seeds[0]) == 0).float().mean()) < 0.35
