"""The modern family's CPU kernels (electra.model.modernbert.kernels): `use_kernels` puts them in on
CPU; they give the stock layers' outputs and gradients (padded rows, packed documents, both layer
kinds), HF's hidden states to fp32 rounding (tests/numerics.py), and hand bf16, GPU-less fallbacks and torch.compile to
the stock code."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from electra.model.kernels import use_kernels
from electra.model.modernbert import kernels as modern_kernels
from electra.model.modernbert.kernels import GegluMLP, RotaryAttention
from electra.model.modernbert.modeling import (
    ModernBertAttention,
    ModernBertMLP,
    ModernBertModel,
    rotary,
)

from ...conftest import tiny_modern_config
from ...numerics import assert_same_computation, encoder_depth, rounding_bound

pytestmark = pytest.mark.numeric

CPU = torch.device("cpu")
TINY = tiny_modern_config()
# The longest reduction of the encoder on these batches: 72 tokens summed into each weight's
# gradient (3 rows of 24), above the intermediate size (48), hidden size (32) and 24 keys.
TERMS = 3 * 24


def stock_and_kernels(cfg=TINY) -> tuple[ModernBertModel, ModernBertModel]:
    torch.manual_seed(0)
    stock = ModernBertModel(cfg)
    return stock, use_kernels(copy.deepcopy(stock), "auto", CPU)


def documents_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows of 24 tokens: one document, two packed documents then padding, padding only
    after 5 tokens."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, TINY.vocab_size, (3, 24), generator=g)
    docs = torch.ones(3, 24, dtype=torch.long)
    docs[1, 10:20], docs[1, 20:] = 2, 0
    docs[2, 5:] = 0
    return ids, docs


def test_kernels_auto_swaps_the_modern_layers_on_cpu_only():
    _, swapped = stock_and_kernels()
    assert {type(m) for m in swapped.modules()} >= {RotaryAttention, GegluMLP}
    for choice, device in (("stock", CPU), ("auto", torch.device("meta"))):
        model = use_kernels(ModernBertModel(TINY), choice, device)
        kinds = {type(m) for m in model.modules()}
        assert ModernBertAttention in kinds and ModernBertMLP in kinds
        assert not kinds & {RotaryAttention, GegluMLP}


@pytest.mark.parametrize("gelu", ["gelu", "gelu_pytorch_tanh"])
def test_kernels_give_the_stock_outputs_and_gradients(gelu):
    """Against the stock model in float64: the kernels' outputs and every gradient are as close
    as the stock model's own fp32 ones (padded rows, two packed documents, both layer kinds)."""
    cfg = tiny_modern_config(hidden_activation=gelu)
    stock, swapped = stock_and_kernels(cfg)
    exact = copy.deepcopy(stock).double()
    ids, docs = documents_batch()
    weights = torch.randn(*ids.shape, cfg.hidden_size, generator=torch.Generator().manual_seed(9))
    results = []
    for model in (stock, swapped, exact):
        out = model(ids, attention_mask=docs)
        (out * weights.to(out.dtype)).sum().backward()
        grads = {name: p.grad.double() for name, p in model.named_parameters()}
        results.append((out.detach().double(), grads))
    (out_stock, stock_grads), (out_kernels, kernel_grads), (out_exact, exact_grads) = results
    # the embeddings' LayerNorm and the final one: 4 reductions beside the layers'
    depth = encoder_depth(cfg.num_hidden_layers, extra=4)
    assert_same_computation(out_kernels, out_stock, terms=TERMS, depth=depth, dtype=torch.float32)
    assert kernel_grads.keys() == exact_grads.keys()
    # Each fp32 gradient is within the rounding of the backward chain of the float64 one; the
    # kernels' no further from it than that (nor than 1.5 times the stock model's own error).
    size = max(g.abs().max().item() for g in exact_grads.values())
    backward = encoder_depth(cfg.num_hidden_layers, extra=4, backward=True)
    bound = rounding_bound(torch.float32, TERMS, backward, size)
    for name, exact_grad in exact_grads.items():
        stock_error = (stock_grads[name] - exact_grad).abs().max()
        kernel_error = (kernel_grads[name] - exact_grad).abs().max()
        assert kernel_error <= max(1.5 * stock_error, bound), name


def test_the_rotary_kernel_turns_as_the_stock_layer_at_every_length():
    """q, k, v and the gradients of x and Wqkv, at lengths where the rotary halves and both
    thetas differ."""
    torch.manual_seed(0)
    stock = ModernBertAttention(TINY)
    swapped = copy.deepcopy(stock)
    swapped.__class__ = RotaryAttention
    shape = (2, TINY.num_attention_heads)
    for t, theta in ((1, 10_000.0), (7, 160_000.0), (33, 10_000.0)):
        rope = rotary(t, TINY.head_dim, theta, CPU)
        x = torch.randn(2, t, TINY.hidden_size, requires_grad=True)
        weights = [torch.randn(*shape, t, TINY.head_dim) for _ in range(3)]
        results = []
        for layer in (stock, swapped):
            heads = layer.heads(x, rope)
            assert all(h.shape == (*shape, t, TINY.head_dim) for h in heads)
            total = sum((h * w).sum() for h, w in zip(heads, weights, strict=True))
            grads = torch.autograd.grad(total, (x, layer.Wqkv.weight))
            results.append((*heads, *grads))
        # Wqkv's product (hidden size 32) and the rotation: two roundings per output; x's and
        # Wqkv's gradients sum over 3 * 32 outputs and over 2 * t tokens (66 at t = 33)
        for a, b in zip(*results, strict=True):
            assert_same_computation(b, a, terms=max(3 * TINY.hidden_size, 2 * t), depth=3)


@pytest.mark.parametrize("mask_shape", [None, (1, 1, 20, 20), (3, 1, 20, 20), (3, 1, 6, 20)])
def test_the_short_row_attention_equals_sdpa(mask_shape):
    """`_Attention` (batched products, probabilities kept) against SDPA: outputs and the
    gradients of q, k and v, with no mask, one mask for every row, one per row, and a few
    queries' rows (the narrowed last layer)."""
    torch.manual_seed(0)
    n = 6 if mask_shape and mask_shape[2] == 6 else 20
    q = torch.randn(3, 2, n, 16, requires_grad=True)
    k, v = (torch.randn(3, 2, 20, 16, requires_grad=True) for _ in range(2))
    mask = None
    if mask_shape:
        mask = torch.rand(mask_shape) < 0.6
        mask[..., 0] = True  # every query sees a key
    weights = torch.randn(3, 2, n, 16)
    results = []
    for out in (
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        modern_kernels._Attention.apply(q, k, v, mask),
    ):
        results.append((out, *torch.autograd.grad((out * weights).sum(), (q, k, v))))
    # forward: the scores (16 terms), the softmax's normaliser and the sum over 20 keys (3);
    # backward: the probabilities' gradient, the softmax's, then q's, k's and v's (4 more)
    for a, b in zip(*results, strict=True):
        assert_same_computation(b, a, terms=20, depth=7)


def test_long_rows_dropout_and_float_masks_attend_through_sdpa(monkeypatch):
    """Past `EXPLICIT_MAX_LEN` keys, with attention dropout in training, or with an additive
    mask, the kernel hands attention to SDPA."""

    class Refused(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            raise AssertionError("the short-row attention ran")

    monkeypatch.setattr(modern_kernels, "_Attention", Refused)
    torch.manual_seed(0)
    layer = RotaryAttention(tiny_modern_config(attention_dropout=0.1))
    long = modern_kernels.EXPLICIT_MAX_LEN + 1
    rope = rotary(long, TINY.head_dim, 10_000.0, CPU)
    layer.eval()(torch.randn(1, long, TINY.hidden_size), None, rope)  # a long row
    short = rotary(8, TINY.head_dim, 10_000.0, CPU)
    layer.train()(torch.randn(1, 8, TINY.hidden_size), None, short)  # dropout
    q = torch.randn(1, 2, 8, 16)
    layer.eval().attend(q, q, q, torch.zeros(1, 1, 8, 8))  # an additive mask
    with pytest.raises(AssertionError, match="short-row"):
        layer.eval()(torch.randn(1, 8, TINY.hidden_size), None, short)


def test_kernels_keep_hf_parity():
    """The kernels on, our encoder still gives transformers' ModernBertModel's hidden states."""
    pytest.importorskip("transformers")
    from tests.model.modernbert.test_modeling import hf_model, ours_from, padded_batch

    hf = hf_model("sdpa")
    ours = use_kernels(ours_from(hf), "auto", CPU)
    assert isinstance(ours.layers[0].attn, RotaryAttention)
    ids, mask = padded_batch()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        mine = ours(ids, attention_mask=mask)
    real = mask.bool()
    # the reductions of test_modernbert's parity test: intermediate size 48, 3 layers and the
    # embeddings' and final LayerNorms
    depth = encoder_depth(TINY.num_hidden_layers, extra=4)
    assert_same_computation(mine[real], theirs[real], terms=TINY.intermediate_size, depth=depth)


def test_bf16_and_dropout_take_the_stock_path():
    """In bf16 the stock layers' fp32 rotary round trip is kept; with MLP dropout in training
    the stock GeGLU draws the same dropout."""
    stock, swapped = stock_and_kernels(tiny_modern_config(mlp_dropout=0.5))
    ids, docs = documents_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        assert torch.equal(
            swapped.eval()(ids, attention_mask=docs), stock.eval()(ids, attention_mask=docs)
        )
    torch.manual_seed(0)
    mlp = ModernBertMLP(tiny_modern_config(mlp_dropout=0.5))
    geglu = copy.deepcopy(mlp)
    geglu.__class__ = GegluMLP
    x = torch.randn(2, 5, TINY.hidden_size)
    torch.manual_seed(5)
    a = mlp(x)
    torch.manual_seed(5)
    assert torch.equal(geglu(x), a)


def test_a_compiled_model_with_kernels_traces_into_one_graph():
    """Under torch.compile the kernels hand over to the stock layers, which inductor fuses."""
    import torch._dynamo as dynamo

    _, swapped = stock_and_kernels()
    ids, docs = documents_batch()
    dynamo.reset()
    explained = dynamo.explain(swapped)(ids, attention_mask=docs)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
