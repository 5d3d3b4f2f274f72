import pytest
import torch
import torch.nn.functional as F

from electra import ops
from electra.errors import ElectraError
from electra.ops import Dropout, Linear, dropout, keep_mask, linear, self_attention


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


needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN"
)


@needs_onednn
@pytest.mark.parametrize("shape", [(4, 7, 16), (9, 16)])
@pytest.mark.parametrize("out_features", [1, 8, 48])
@pytest.mark.parametrize("with_bias", [True, False])
def test_onednn_linear_matches_float64_values_and_gradients(
    monkeypatch, shape, out_features, with_bias
):
    """Both orientations of the weight gradient (out_features below and above in_features), a
    single output, 3-D inputs and no bias, against F.linear in float64."""
    monkeypatch.setattr(ops, "onednn_linear_enabled", lambda: True)
    torch.manual_seed(4)
    x = torch.randn(*shape, requires_grad=True)
    w = torch.randn(out_features, shape[-1], requires_grad=True)
    b = torch.randn(out_features, requires_grad=True) if with_bias else None
    inputs = [t for t in (x, w, b) if t is not None]
    y = linear(x, w, b)
    assert y.grad_fn.name() == "_OneDnnLinearBackward"
    grad = torch.randn_like(y)
    y64 = F.linear(*(t.double() for t in inputs))
    assert torch.allclose(y.double(), y64, atol=1e-5)
    got = torch.autograd.grad(y, inputs, grad)
    want = torch.autograd.grad(y64, inputs, grad.double())
    for g, r in zip(got, want, strict=True):
        assert g.shape == r.shape and torch.allclose(g, r, atol=1e-4)


@needs_onednn
def test_linear_takes_the_stock_path_in_bf16_autocast_and_when_told(monkeypatch):
    layer = Linear(8, 4)
    x = torch.randn(3, 8, requires_grad=True)
    monkeypatch.setattr(ops, "onednn_linear_enabled", lambda: True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).grad_fn.name() != "_OneDnnLinearBackward"  # autocast already uses oneDNN
    monkeypatch.setattr(ops, "onednn_linear_enabled", lambda: False)
    assert layer(x).grad_fn.name() == "AddmmBackward0"
    assert list(dict(layer.named_parameters())) == ["weight", "bias"]  # nn.Linear's names


def test_cpu_linear_setting_rejects_an_unknown_value(monkeypatch):
    read = ops.onednn_linear_enabled.__wrapped__  # the uncached reading of the environment
    monkeypatch.setenv("ELECTRA_CPU_LINEAR", "mkl")
    with pytest.raises(ElectraError, match="ELECTRA_CPU_LINEAR='mkl': use auto, onednn or stock"):
        read()
    monkeypatch.setenv("ELECTRA_CPU_LINEAR", "stock")
    assert read() is False
    monkeypatch.setenv("ELECTRA_CPU_LINEAR", "onednn")
    assert read() is torch.backends.mkldnn.is_available()


@pytest.mark.parametrize(
    ("vendor", "flags", "onednn"),
    [
        ("AuthenticAMD", "fpu avx2 avx512f avx512bw", True),
        ("AuthenticAMD", "fpu avx2", False),  # MKL's AVX2 kernels beat oneDNN's there
        ("GenuineIntel", "fpu avx2 avx512f", False),
        ("", "", False),
    ],
)
def test_onednn_linear_only_where_mkl_takes_its_slow_path(vendor, flags, onednn):
    info = {"vendor_id": vendor, "flags": flags}
    assert ops.mkl_slow_path(lambda field: info[field]) is onednn


def reference_attention(x, weights, biases, heads, mask, keep, p):
    """Textbook multi-head attention with a given keep mask [B, heads, T, T]."""
    b, t, h = x.shape
    q, k, v = (
        F.linear(x, w, bias).view(b, t, heads, -1).transpose(1, 2)
        for w, bias in zip(weights, biases, strict=True)
    )
    scores = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
    return ((scores.softmax(-1) * keep / (1 - p)) @ v).transpose(1, 2).reshape(b, t, h)


def test_self_attention_with_dropout_drops_probabilities_of_the_masked_softmax():
    torch.manual_seed(2)
    b, heads, t, h = 2, 3, 5, 12
    x = torch.randn(b, t, h, requires_grad=True)
    weights = tuple(torch.randn(h, h, requires_grad=True) for _ in range(3))
    biases = tuple(torch.randn(h, requires_grad=True) for _ in range(3))
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[1, ..., 3:] = False  # the second row has two padding keys
    torch.manual_seed(3)
    out = self_attention(x, weights, biases, heads, mask, 0.5)
    assert out.shape == (b, t, h)
    torch.manual_seed(3)  # the heads draw their masks in order, each [B, T, T]
    keep = torch.stack([keep_mask(torch.empty(b, t, t), 0.5) for _ in range(heads)], 1)
    expected = reference_attention(x, weights, biases, heads, mask, keep, 0.5)
    assert torch.allclose(out, expected, atol=1e-5)
    # the gradients (with the scales folded into the projection) match the textbook ones
    inputs = (x, *weights, *biases)
    got = torch.autograd.grad(out.pow(2).sum(), inputs)
    want = torch.autograd.grad(expected.pow(2).sum(), inputs)
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, rtol=1e-4, atol=1e-4)
    # without dropout it is SDPA, and padding keys never contribute
    plain = self_attention(x, weights, biases, heads, mask, 0.0)
    ones = torch.ones(b, heads, t, t)
    assert torch.allclose(
        plain, reference_attention(x, weights, biases, heads, mask, ones, 0.0), atol=1e-5
    )
    x2 = x.detach().clone()
    x2[1, 3:] = 100.0  # the padding positions' inputs: their keys and values
    assert torch.allclose(
        self_attention(x2, weights, biases, heads, mask, 0.0)[1, :3], plain[1, :3], atol=1e-4
    )
    torch.manual_seed(3)
    assert torch.allclose(
        self_attention(x2, weights, biases, heads, mask, 0.5)[1, :3], out[1, :3], atol=1e-4
    )
    torch.manual_seed(3)
    no_mask = self_attention(x, weights, biases, heads, None, 0.5)
    torch.manual_seed(3)
    assert torch.allclose(
        no_mask, self_attention(x, weights, biases, heads, torch.ones_like(mask), 0.5)
    )


def test_self_attention_with_dropout_in_bf16_autocast_follows_the_fp32_gradients():
    torch.manual_seed(6)
    b, heads, t, h = 3, 2, 16, 32
    x = torch.randn(b, t, h, requires_grad=True)
    weights = tuple((0.2 * torch.randn(h, h)).requires_grad_() for _ in range(3))
    biases = tuple(torch.randn(h, requires_grad=True) for _ in range(3))
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[0, ..., 10:] = False
    inputs = (x, *weights, *biases)
    results = []
    for precision in ("bf16", "fp32"):
        torch.manual_seed(7)  # the same keep masks
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = self_attention(x, weights, biases, heads, mask, 0.1)
        assert out.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
        results.append((out.float(), torch.autograd.grad(out.float().pow(2).sum(), inputs)))
    (low, low_grads), (full, full_grads) = results
    assert (low - full).norm() / full.norm() < 2e-2
    # the key bias is left out: softmax ignores what it adds (the same for every key), so its
    # gradient is zero up to rounding, which bf16 makes large relative to zero
    for i, (g, r) in enumerate(zip(low_grads, full_grads, strict=True)):
        assert g.dtype == torch.float32
        assert i == 5 or (g - r).norm() / r.norm() < 5e-2


def test_under_compile_dropout_and_attention_trace_into_one_graph():
    # numpy's generator and random_ with bounds break a graph: compiled code takes the stock ops
    torch.manual_seed(4)
    b, heads, t, h = 2, 3, 5, 12
    weights = tuple(torch.randn(h, h) for _ in range(3))
    biases = tuple(torch.randn(h) for _ in range(3))
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)

    def layer(x):
        return dropout(self_attention(x, weights, biases, heads, mask, 0.1), 0.5, True)

    y = torch.compile(layer, fullgraph=True)(torch.randn(b, t, h))
    assert y.shape == (b, t, h)
    assert 0.3 < (y == 0).float().mean() < 0.7
