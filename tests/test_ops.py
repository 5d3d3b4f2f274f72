import pytest
import torch
import torch.nn.functional as F

from electra.ops import Dropout, attention, dropout, keep_mask


def test_keep_mask_drops_at_the_quantised_rate():
    torch.manual_seed(0)
    x = torch.empty(64, 128, 512, dtype=torch.bfloat16)
    keep = keep_mask(x, 0.1)
    assert keep.dtype == torch.bfloat16 and keep.shape == x.shape
    assert set(keep.unique().tolist()) == {0.0, 1.0}
    assert 1 - keep.float().mean().item() == pytest.approx(6554 / 65536, abs=5e-4)
    odd = keep_mask(torch.empty(100_001), 0.5)  # the last 64-bit word is only partly used
    assert 1 - odd.mean() == pytest.approx(0.5, abs=0.01)


def test_dropout_scales_kept_values_and_routes_the_gradient_through_them():
    x = torch.randn(32, 64, requires_grad=True)
    torch.manual_seed(1)
    y = dropout(x, 0.25, training=True)
    kept = y != 0
    assert 0.65 < kept.float().mean() < 0.85
    assert torch.allclose(y[kept], x[kept] / 0.75)
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad, kept.float() / 0.75)
    torch.manual_seed(1)
    assert torch.equal(dropout(x, 0.25, training=True), y)  # torch's generator: seeds reproduce it


def test_dropout_is_the_identity_in_eval_or_at_zero():
    x = torch.randn(4, 8)
    module = Dropout(0.1).eval()
    assert module(x) is x
    assert dropout(x, 0.0, training=True) is x


def test_attention_with_dropout_drops_probabilities_of_the_masked_softmax():
    torch.manual_seed(2)
    b, h, t, d = 2, 3, 5, 4
    q, k, v = (torch.randn(b, h, t, d) for _ in range(3))
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[1, ..., 3:] = False  # the second row has two padding keys
    torch.manual_seed(3)
    out = attention(q, k, v, mask, 0.5)
    torch.manual_seed(3)
    keep = keep_mask(torch.empty(b, h, t, t), 0.5)
    scores = (q @ k.transpose(-1, -2) / d**0.5).masked_fill(~mask, float("-inf"))
    expected = (scores.softmax(-1) * keep * 2.0) @ v
    assert torch.allclose(out, expected, atol=1e-6)
    # without dropout it is SDPA, and padding keys never contribute
    plain = attention(q, k, v, mask, 0.0)
    assert torch.allclose(plain, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    v2 = v.clone()
    v2[1, :, 3:] = 100.0
    assert torch.allclose(attention(q, k, v2, mask, 0.0), plain, atol=1e-5)
