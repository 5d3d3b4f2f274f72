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
    qkv = torch.randn(b, t, 3, h, d)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # [B, heads, T, d]
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[1, ..., 3:] = False  # the second row has two padding keys
    torch.manual_seed(3)
    out = attention(qkv, mask, 0.5)
    assert out.shape == (b, t, h * d)
    torch.manual_seed(3)  # the heads draw their masks in order, each [B, T, T]
    keep = torch.stack([keep_mask(torch.empty(b, t, t), 0.5) for _ in range(h)], 1)
    scores = (q @ k.transpose(-1, -2) / d**0.5).masked_fill(~mask, float("-inf"))
    expected = ((scores.softmax(-1) * keep * 2.0) @ v).transpose(1, 2).reshape(b, t, h * d)
    assert torch.allclose(out, expected, atol=1e-6)
    # the gradient reaches q, k and v through every head
    qkv.requires_grad_(True)
    torch.manual_seed(3)
    attention(qkv, mask, 0.5).pow(2).sum().backward()
    ref = qkv.detach().clone().requires_grad_(True)
    rq, rk, rv = ref.permute(2, 0, 3, 1, 4).unbind(0)
    rs = (rq @ rk.transpose(-1, -2) / d**0.5).masked_fill(~mask, float("-inf"))
    ((rs.softmax(-1) * keep * 2.0) @ rv).pow(2).sum().backward()
    assert torch.allclose(qkv.grad, ref.grad, atol=1e-5)
    # without dropout it is SDPA, and padding keys never contribute
    plain = attention(qkv.detach(), mask, 0.0)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(plain, sdpa.transpose(1, 2).reshape(b, t, h * d))
    qkv2 = qkv.detach().clone()
    qkv2[1, 3:, 2] = 100.0  # the padding keys' values
    assert torch.allclose(attention(qkv2, mask, 0.0), plain, atol=1e-5)
    torch.manual_seed(3)
    assert torch.allclose(attention(qkv2, mask, 0.5), out, atol=1e-5)  # with dropout too
    torch.manual_seed(3)
    no_mask = attention(qkv.detach(), None, 0.5)
    torch.manual_seed(3)
    assert torch.allclose(no_mask, attention(qkv.detach(), torch.ones_like(mask), 0.5))
