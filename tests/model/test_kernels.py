import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ObjectiveConfig
from electra.data.tokenizer import SpecialIds
from electra.errors import ElectraError
from electra.model import kernels
from electra.model.electra.kernels import PerHeadSelfAttention
from electra.model.electra.modeling import ElectraForPreTraining, ElectraSelfAttention
from electra.model.kernels import (
    CheapDropout,
    OneDnnLinear,
    dropout,
    dropped_attention,
    keep_mask,
    linear,
    use_kernels,
)
from electra.objectives import build_objective

from ..conftest import tiny_model_config
from ..numerics import (
    assert_same_computation,
    assert_same_gradients,
    binomial_bound,
    encoder_depth,
    rounding_bound,
)

pytestmark = pytest.mark.numeric

CPU = torch.device("cpu")
SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)


def test_keep_mask_drops_at_the_quantised_rate():
    torch.manual_seed(0)
    x = torch.empty(64, 128, 512, dtype=torch.bfloat16)
    keep = keep_mask(x, 0.1)
    assert keep.dtype == torch.bfloat16 and keep.shape == x.shape
    assert set(keep.unique().tolist()) == {0.0, 1.0}
    rate = 6554 / 65536
    assert 1 - keep.float().mean().item() == pytest.approx(
        rate, abs=binomial_bound(rate, x.numel())
    )
    odd = keep_mask(torch.empty(100_001), 0.5)  # the last 64-bit word is only partly used
    assert 1 - odd.mean().item() == pytest.approx(0.5, abs=binomial_bound(0.5, odd.numel()))


def test_dropout_scales_kept_values_and_routes_the_gradient_through_them():
    x = torch.randn(32, 64, requires_grad=True)
    torch.manual_seed(1)
    y = dropout(x, 0.25, training=True)
    kept = y != 0
    assert 0.65 < kept.float().mean() < 0.85
    assert_same_computation(y[kept], x[kept] / 0.75, terms=1, depth=2)  # a scale, a division
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad, kept.float() / 0.75)
    torch.manual_seed(1)
    assert torch.equal(dropout(x, 0.25, training=True), y)  # torch's generator: seeds reproduce it


def test_dropout_is_the_identity_in_eval_or_at_zero():
    x = torch.randn(4, 8)
    module = CheapDropout(0.1).eval()
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
    monkeypatch.setattr(kernels, "onednn_linear_enabled", lambda: True)
    torch.manual_seed(4)
    x = torch.randn(*shape, requires_grad=True)
    w = torch.randn(out_features, shape[-1], requires_grad=True)
    b = torch.randn(out_features, requires_grad=True) if with_bias else None
    inputs = [t for t in (x, w, b) if t is not None]
    y = linear(x, w, b)
    assert y.grad_fn.name() == "_OneDnnLinearBackward"
    grad = torch.randn_like(y)
    y64 = F.linear(*(t.double() for t in inputs))
    assert_same_computation(y.double(), y64, terms=shape[-1], depth=1, dtype=torch.float32)
    got = torch.autograd.grad(y, inputs, grad)
    want = torch.autograd.grad(y64, inputs, grad.double())
    # x's gradient sums over the outputs, the weight's and the bias's over the rows; the float64
    # gradients come back rounded to the leaves' float32 (depth 2)
    rows = math.prod(shape[:-1])
    for g, r in zip(got, want, strict=True):
        assert g.shape == r.shape
        assert_same_computation(g, r, terms=max(out_features, rows), depth=2)


@needs_onednn
def test_linear_takes_the_stock_path_in_bf16_autocast_and_when_told(monkeypatch):
    layer = OneDnnLinear(8, 4)
    x = torch.randn(3, 8, requires_grad=True)
    monkeypatch.setattr(kernels, "onednn_linear_enabled", lambda: True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).grad_fn.name() != "_OneDnnLinearBackward"  # autocast already uses oneDNN
    monkeypatch.setattr(kernels, "onednn_linear_enabled", lambda: False)
    assert layer(x).grad_fn.name() == "AddmmBackward0"
    assert list(dict(layer.named_parameters())) == ["weight", "bias"]  # nn.Linear's names


def test_cpu_linear_setting_rejects_an_unknown_value(monkeypatch):
    read = kernels.onednn_linear_enabled.__wrapped__  # the uncached reading of the environment
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
    assert kernels.mkl_slow_path(lambda field: info[field]) is onednn


def reference_attention(x, weights, biases, heads, mask, keep, p):
    """Textbook multi-head attention with a given keep mask [B, heads, T, T]."""
    b, t, h = x.shape
    q, k, v = (
        F.linear(x, w, bias).view(b, t, heads, -1).transpose(1, 2)
        for w, bias in zip(weights, biases, strict=True)
    )
    scores = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
    return ((scores.softmax(-1) * keep / (1 - p)) @ v).transpose(1, 2).reshape(b, t, h)


def attention_module(weights, biases, heads, p):
    """An `ElectraSelfAttention` holding `weights` and `biases` (query, key, value)."""
    h = weights[0].shape[0]
    cfg = tiny_model_config(
        hidden_size=h, num_attention_heads=heads, attention_probs_dropout_prob=p
    )
    module = ElectraSelfAttention(cfg)
    with torch.no_grad():
        for layer, w, b in zip(
            (module.query, module.key, module.value), weights, biases, strict=True
        ):
            layer.weight.copy_(w)
            layer.bias.copy_(b)
    return module


def test_dropped_attention_drops_probabilities_of_the_masked_softmax():
    torch.manual_seed(2)
    b, heads, t, h = 2, 3, 5, 12
    x = torch.randn(b, t, h, requires_grad=True)
    weights = tuple(torch.randn(h, h, requires_grad=True) for _ in range(3))
    biases = tuple(torch.randn(h, requires_grad=True) for _ in range(3))
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[1, ..., 3:] = False  # the second row has two padding keys
    torch.manual_seed(3)
    out = dropped_attention(x, weights, biases, heads, mask, 0.5)
    assert out.shape == (b, t, h)
    torch.manual_seed(3)  # the heads draw their masks in order, each [B, T, T]
    keep = torch.stack([keep_mask(torch.empty(b, t, t), 0.5) for _ in range(heads)], 1)
    expected = reference_attention(x, weights, biases, heads, mask, keep, 0.5)
    # projections (12 terms), scores, the softmax's normaliser, the sum over 5 keys, the scale
    assert_same_computation(out, expected, terms=h, depth=5)
    # the gradients (with the scales folded into the projection) match the textbook ones: that
    # chain, back through it and the sums over the 10 tokens
    inputs = (x, *weights, *biases)
    got = torch.autograd.grad(out.pow(2).sum(), inputs)
    want = torch.autograd.grad(expected.pow(2).sum(), inputs)
    assert_same_gradients(got, want, terms=h, depth=3 * 5)
    x2 = x.detach().clone()
    x2[1, 3:] = 100.0  # the padding positions' inputs: their keys and values
    torch.manual_seed(3)
    padded = dropped_attention(x2, weights, biases, heads, mask, 0.5)[1, :3]
    assert_same_computation(padded, out[1, :3], terms=h, depth=5)
    torch.manual_seed(3)
    no_mask = dropped_attention(x, weights, biases, heads, None, 0.5)
    torch.manual_seed(3)
    ones = dropped_attention(x, weights, biases, heads, torch.ones_like(mask), 0.5)
    assert_same_computation(no_mask, ones, terms=h, depth=5)


@pytest.mark.parametrize("choice", ["stock", "auto"])
def test_the_attention_module_is_the_textbook_one_in_either_kernel(choice):
    """In eval, SDPA (stock) or the oneDNN products (auto); in training with dropout, the per-head
    kernel where chosen; padding keys never contribute."""
    torch.manual_seed(2)
    b, heads, t, h = 2, 3, 5, 12
    x = torch.randn(b, t, h)
    weights = tuple(torch.randn(h, h) for _ in range(3))
    biases = tuple(torch.randn(h) for _ in range(3))
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[1, ..., 3:] = False
    module = use_kernels(attention_module(weights, biases, heads, 0.5), choice, CPU).eval()
    assert type(module) is (PerHeadSelfAttention if choice == "auto" else ElectraSelfAttention)
    plain = module(x, mask)
    ones = torch.ones(b, heads, t, t)
    reference = reference_attention(x, weights, biases, heads, mask, ones, 0.0)
    # projections (12 terms), scores, the softmax's normaliser and the sum over 5 keys
    assert_same_computation(plain, reference, terms=h, depth=4)
    x2 = x.clone()
    x2[1, 3:] = 100.0
    assert_same_computation(module(x2, mask)[1, :3], plain[1, :3], terms=h, depth=4)
    module.train()
    torch.manual_seed(3)
    trained = module(x, mask)
    if choice == "auto":  # the per-head kernel, the same draws as called directly
        torch.manual_seed(3)
        assert torch.equal(trained, dropped_attention(x, weights, biases, heads, mask, 0.5))


def test_dropped_attention_in_bf16_autocast_follows_the_fp32_gradients():
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
            out = dropped_attention(x, weights, biases, heads, mask, 0.1)
        assert out.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
        results.append((out.float(), torch.autograd.grad(out.float().pow(2).sum(), inputs)))
    (low, low_grads), (full, full_grads) = results
    # Autocast's bf16 products accumulate in fp32: bf16 rounds each operand and result once, not
    # each term (terms=1), at the inputs and the projections, the scores, the probabilities and
    # their product with the values (5 on the way out, 3 times 5 back), relative to the size.
    assert (low - full).norm() / full.norm() < rounding_bound(torch.bfloat16, 1, 5)
    # the key bias is left out: softmax ignores what it adds (the same for every key), so its
    # gradient is zero up to rounding, which bf16 makes large relative to zero
    for i, (g, r) in enumerate(zip(low_grads, full_grads, strict=True)):
        assert g.dtype == torch.float32
        assert i == 5 or (g - r).norm() / r.norm() < rounding_bound(torch.bfloat16, 1, 3 * 5)


def test_under_compile_dropout_and_attention_trace_into_one_graph():
    # numpy's generator and random_ with bounds break a graph: compiled code takes the stock ops,
    # though the kernels were swapped in before torch.compile wrapped the model
    torch.manual_seed(4)
    b, heads, t, h = 2, 3, 5, 12
    weights = tuple(torch.randn(h, h) for _ in range(3))
    biases = tuple(torch.randn(h) for _ in range(3))
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    layer = nn.ModuleDict(
        {"attention": attention_module(weights, biases, heads, 0.1), "dropout": nn.Dropout(0.5)}
    )
    use_kernels(layer, "auto", CPU)
    assert isinstance(layer["dropout"], CheapDropout)

    def forward(x):
        return layer["dropout"](layer["attention"](x, mask))

    y = torch.compile(forward, fullgraph=True)(torch.randn(b, t, h))
    assert y.shape == (b, t, h)
    assert 0.3 < (y == 0).float().mean() < 0.7


# --- use_kernels: the step that puts the kernels into a built model --------------------------


def pair(objective_cfg=None):
    """An ELECTRA generator and discriminator sharing embeddings, the generator's head tied."""
    torch.manual_seed(0)
    cfg = objective_cfg or ObjectiveConfig(generator_hidden_fraction=0.5)
    return build_objective(tiny_model_config(), cfg, SPECIAL, 16)


def test_a_bad_kernels_setting_is_one_line():
    with pytest.raises(ElectraError, match=r"^kernels='fast': use auto or stock$"):
        use_kernels(nn.Linear(2, 2), "fast", CPU)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_stock_or_a_gpu_leaves_every_module_as_built(device):
    objective = pair()
    built = {name: type(m) for name, m in objective.named_modules()}
    choice = "stock" if device == "cpu" else "auto"
    assert use_kernels(objective, choice, torch.device(device)) is objective
    assert {name: type(m) for name, m in objective.named_modules()} == built


@pytest.mark.parametrize("onednn", [True, False])
def test_auto_swaps_classes_and_keeps_every_parameter_and_tie(monkeypatch, onednn):
    monkeypatch.setattr(kernels, "onednn_linear_enabled", lambda: onednn)
    objective = pair()
    params = dict(objective.named_parameters(remove_duplicate=False))
    keys = list(objective.state_dict())
    optimizer = torch.optim.SGD(objective.parameters(), lr=0.1)
    use_kernels(objective, "auto", CPU)
    generator, discriminator = objective.generator, objective.discriminator
    assert generator.generator_lm_head.weight is generator.electra.embeddings.word_embeddings.weight
    assert generator.electra.embeddings is discriminator.electra.embeddings
    after = dict(objective.named_parameters(remove_duplicate=False))
    assert after.keys() == params.keys() and all(after[k] is params[k] for k in params)
    assert list(objective.state_dict()) == keys
    assert all(
        p is q
        for p, q in zip(optimizer.param_groups[0]["params"], objective.parameters(), strict=True)
    )
    classes = {type(m) for m in objective.modules()}
    assert nn.Dropout not in classes and ElectraSelfAttention not in classes
    assert (OneDnnLinear in classes) is onednn and (nn.Linear in classes) is not onednn


def compare(monkeypatch, train: bool):
    """Losses and gradients of a discriminator stock and with the CPU kernels."""
    if torch.backends.mkldnn.is_available():  # the oneDNN layers too, on any CPU
        monkeypatch.setattr(kernels, "onednn_linear_enabled", lambda: True)
    torch.manual_seed(0)
    stock = ElectraForPreTraining(tiny_model_config())
    ours = use_kernels(copy.deepcopy(stock), "auto", CPU)
    ids = torch.randint(5, 100, (4, 12))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    results = []
    for model in (stock, ours):
        model.train(train)
        torch.manual_seed(1)
        logits = model(ids, None, mask)
        grads = torch.autograd.grad(logits.pow(2).sum(), list(model.parameters()))
        results.append((logits.detach(), grads))
    return results


def test_the_kernels_give_the_stock_model_outputs_and_gradients(monkeypatch):
    (want, want_grads), (got, got_grads) = compare(monkeypatch, train=False)
    # The longest reduction: the intermediate size (64), above the 48 tokens a weight's gradient
    # sums over, the hidden size (32) and the 12 keys. The chain: 2 layers, the embeddings'
    # projection and LayerNorm (3) and the head's two products (2).
    cfg = tiny_model_config()
    depth = encoder_depth(cfg.num_hidden_layers, extra=5)
    assert_same_computation(got, want, terms=cfg.intermediate_size, depth=depth)
    backward = encoder_depth(cfg.num_hidden_layers, extra=5, backward=True)
    assert_same_gradients(got_grads, want_grads, terms=cfg.intermediate_size, depth=backward)


def test_the_kernels_drop_out_as_the_stock_layers_do():
    """The same rate and scale as nn.Dropout; attention with dropout has the stock attention's
    mean (the eval output) and spread."""
    x = torch.ones(1000, 1000)
    torch.manual_seed(0)
    stock, cheap = nn.Dropout(0.1)(x), use_kernels(nn.Dropout(0.1), "auto", CPU)(x)
    for y in (stock, cheap):
        assert (y == 0).float().mean().item() == pytest.approx(
            0.1, abs=binomial_bound(0.1, x.numel())
        )
        kept = y[y != 0]
        assert_same_computation(kept, torch.full_like(kept, 1 / 0.9), terms=1, depth=2)
    torch.manual_seed(2)
    b, heads, t, h = 2, 2, 6, 8
    x = torch.randn(b, t, h)
    weights = tuple(torch.randn(h, h) for _ in range(3))
    biases = tuple(torch.randn(h) for _ in range(3))
    spreads = []
    for choice in ("stock", "auto"):
        module = use_kernels(attention_module(weights, biases, heads, 0.3), choice, CPU)
        expected = module.eval()(x, None)
        n = 2000
        with torch.no_grad():
            draws = torch.stack([module.train()(x, None) for _ in range(n)])
        # each output's mean over n draws: within 5 standard errors of its eval value (and the
        # rounding of a sum of n terms)
        sampling = 5 * draws.std(0) / math.sqrt(n)
        rounding = rounding_bound(torch.float32, n, 1, expected.abs().max().item())
        assert ((draws.mean(0) - expected).abs() <= sampling + rounding).all()
        spreads.append(draws.std(0).mean().item())
    # two independent standard deviations from n draws, each of relative standard error
    # 1 / sqrt(2 (n - 1)) for normal draws: their difference within 5 of its standard errors,
    # 5 / sqrt(n - 1), taking the outputs' estimates as one (fully correlated, the worst case)
    assert spreads[1] == pytest.approx(spreads[0], rel=5 / math.sqrt(n - 1))
