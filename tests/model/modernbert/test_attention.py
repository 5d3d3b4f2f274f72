"""The modern encoder's attention paths (electra.model.attention): flex and varlen equal the plain
masked SDPA on rows packing several documents with padding, global and local layers alike; the
varlen sequence boundaries exactly, built without a host read; and the `attention` setting's bad
values and impossible devices are one clear error, with nothing written.

varlen_attn is flash attention, CUDA only: on CPU its name in electra.model.attention is replaced
by `reference_varlen` (SDPA over each sequence of cu_seqlens under the window), so that everything
around the kernel (packing, boundaries, windows, layouts) is checked here; FlexAttention runs its
forward on CPU (it has no backward there), so flex is checked as it is."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from electra.config import InferenceRuntime, RuntimeConfig, TrainConfig
from electra.engine.runtime import Runtime
from electra.errors import ElectraError
from electra.model import attention
from electra.model.attention import flex_masks, use_attention, varlen_sequences
from electra.model.configs import GLOBAL, LOCAL
from electra.model.electra.modeling import ElectraForPreTraining
from electra.model.modernbert.modeling import ModernBertModel
from electra.tasks.finetune_config import FinetuneConfig
from tests.engine.test_host_syncs import HostReads

from ...conftest import (
    WORDS,
    assert_one_line_error,
    run_cli,
    tiny_model_config,
    tiny_modern_config,
)
from ...numerics import (
    assert_same_computation,
    assert_same_gradients,
    encoder_depth,
    largest,
    rounding_bound,
)

pytestmark = pytest.mark.numeric

T = 24  # local layers see 4 keys each side: the window matters inside the documents
# The tiny modern encoder's chain: 3 layers, the embeddings' and final LayerNorms (4); the longest
# reduction of its outputs the intermediate size (48, above T keys and the hidden size 32), of its
# weights' gradients the 3 rows of T tokens they sum over (72).
ENCODER = encoder_depth(tiny_modern_config().num_hidden_layers, extra=4)
BACKWARD = encoder_depth(tiny_modern_config().num_hidden_layers, extra=4, backward=True)
TERMS, GRAD_TERMS = tiny_modern_config().intermediate_size, 3 * T


def packed_rows() -> torch.Tensor:
    """Document numbers [3, T]: three documents and padding; two and padding; one, unpadded."""
    rows = [
        [1] * 9 + [2] * 7 + [3] * 5 + [0] * 3,
        [1] * 13 + [2] * 6 + [0] * 5,
        [1] * T,
    ]
    return torch.tensor(rows)


def encoder(path: str, seed: int = 0, **cfg) -> ModernBertModel:
    torch.manual_seed(seed)
    model = ModernBertModel(tiny_modern_config(**cfg)).eval()
    return use_attention(model, path)


def reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, window_size=(-1, -1), **kwargs):
    """varlen_attn's contract on CPU: SDPA within each sequence of cu_seqlens, a key within
    window_size (left, right) of its query; checks the arguments flash would get."""
    assert cu_q is cu_k and cu_q.dtype == torch.int32 and cu_q.shape == (q.shape[0] + 1,)
    assert isinstance(max_q, int) and max_q == max_k and q.dim() == 3 and not kwargs
    bounds = cu_q.tolist()
    assert bounds == sorted(bounds) and bounds[0] == 0 and bounds[-1] == q.shape[0]
    assert max(b - a for a, b in zip(bounds, bounds[1:], strict=False)) <= max_q
    out = torch.zeros_like(q)
    left, right = window_size
    for start, end in zip(bounds, bounds[1:], strict=False):
        if end == start:
            continue
        pos = torch.arange(end - start)
        gap = pos[None, :] - pos[:, None]  # key - query
        mask = torch.ones(end - start, end - start, dtype=torch.bool)
        mask &= (gap >= -left) if left >= 0 else mask
        mask &= (gap <= right) if right >= 0 else mask
        seq = [x[start:end].transpose(0, 1) for x in (q, k, v)]  # heads, tokens, d
        out[start:end] = F.scaled_dot_product_attention(*seq, attn_mask=mask).transpose(0, 1)
    return out


@pytest.fixture
def reference_kernel(monkeypatch):
    monkeypatch.setattr(attention, "varlen_attn", reference_varlen)


@pytest.fixture(autouse=True)
def quiet_eager_flex():
    """FlexAttention warns that eager is slow: on CPU it is only checked here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention.*")
        yield


def test_varlen_sequences_are_every_document_run_then_the_total():
    docs = torch.tensor([[1, 1, 2, 2, 2, 0, 0], [1] * 7, [1, 2, 3, 0, 0, 0, 0]])
    expected = [0, 2, 5, 7, 14, 15, 16, 17, 21] + [21] * 13  # 8 sequences, 22 = 3 * 7 + 1
    cu = varlen_sequences(docs)
    assert cu.dtype == torch.int32 and cu.tolist() == expected
    assert varlen_sequences(torch.ones(2, 3, dtype=torch.long)).tolist() == [0, 3, 6, 6, 6, 6, 6]


@pytest.mark.parametrize("path", ["flex", "varlen"])
@pytest.mark.parametrize("mask", ["documents", "none", "padding"])
def test_each_path_equals_masked_sdpa(path, mask, reference_kernel):
    """Outputs at real positions to fp32 rounding (tests/numerics.py), on global and local layers (the tiny
    config's layers 0 and 2 are global, 1 local): rows of several documents and padding, no
    mask at all, and an ordinary 0/1 padding mask. flex agrees at padded positions too."""
    docs = packed_rows()
    given = {"documents": docs, "none": None, "padding": (docs != 0).long()}[mask]
    ids = torch.randint(5, 100, docs.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = encoder("sdpa")(ids, attention_mask=given)
        got = encoder(path)(ids, attention_mask=given)
    real = docs != 0 if given is not None else torch.ones_like(docs, dtype=torch.bool)
    assert_same_computation(got[real], want[real], terms=TERMS, depth=ENCODER)
    if path == "flex":
        assert_same_computation(got, want, terms=TERMS, depth=ENCODER)


@pytest.mark.parametrize("path", ["flex", "varlen"])
def test_each_path_gives_the_masked_slots_the_narrowed_sdpa_gives(path, reference_kernel):
    """The generator's encoder asked for a few positions (`positions=`): SDPA narrows its last
    layer to them, flex and varlen run it whole and gather; the same values."""
    docs = packed_rows()
    ids = torch.randint(5, 100, docs.shape, generator=torch.Generator().manual_seed(3))
    positions = torch.tensor([[0, 4, 20], [2, 13, 18], [5, 5, 23]])
    with torch.no_grad():
        want = encoder("sdpa")(ids, attention_mask=docs, positions=positions)
        got = encoder(path)(ids, attention_mask=docs, positions=positions)
    assert got.shape == (3, 3, 32)
    assert_same_computation(got, want, terms=TERMS, depth=ENCODER)


def test_the_window_and_the_documents_matter_in_the_comparison():
    """Guards the test above: a wrong window or no document mask would be seen."""
    docs = packed_rows()
    ids = torch.randint(5, 100, docs.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = encoder("sdpa")(ids, attention_mask=docs)
        wide = encoder("sdpa", local_attention=64)(ids, attention_mask=docs)
        mixed = encoder("sdpa")(ids, attention_mask=(docs != 0).long())
    real = docs != 0
    allowed = rounding_bound(torch.float32, TERMS, ENCODER, largest(want[real]))
    assert (wide - want)[real].abs().max() > allowed
    assert (mixed - want)[real].abs().max() > allowed


def test_varlen_gradients_equal_masked_sdpa(reference_kernel):
    """Training through varlen: the gradient of a loss over the real positions equals SDPA's."""
    docs = packed_rows()
    ids = torch.randint(5, 100, docs.shape, generator=torch.Generator().manual_seed(2))
    weights = torch.randn(*docs.shape, 32, generator=torch.Generator().manual_seed(3))
    grads = []
    for path in ("sdpa", "varlen"):
        model = encoder(path).train()  # the tiny config has no dropout
        loss = (model(ids, attention_mask=docs) * weights)[docs != 0].sum()
        loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert grads[1].keys() == grads[0].keys()
    assert_same_gradients(
        grads[1].values(),
        grads[0].values(),
        terms=GRAD_TERMS,
        depth=BACKWARD,
        names=list(grads[0]),
    )


@pytest.mark.parametrize("path", ["flex", "varlen"])
def test_a_four_dimensional_mask_is_honoured(path, reference_kernel):
    """Electric's causal towers give a boolean [B, 1, T, T]: flex builds its blocks from it;
    varlen, whose sequences cannot express it, falls back to SDPA."""
    docs = packed_rows()
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    keys = (docs[:, None, :, None] == docs[:, None, None, :]) & (docs[:, None, None, :] != 0)
    towers = keys & causal
    ids = torch.randint(5, 100, docs.shape, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = encoder("sdpa")(ids, attention_mask=towers)
        got = encoder(path)(ids, attention_mask=towers)
    assert_same_computation(got, want, terms=TERMS, depth=ENCODER)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["flex", "varlen"])
def test_the_real_kernels_equal_masked_sdpa_on_a_gpu(path):
    """On a GPU, the kernels themselves: flex (compiled) in fp32, outputs and gradients;
    varlen (flash, bf16 only) against SDPA under the same bf16 autocast, to bf16's rounding."""
    cuda = torch.device("cuda")
    docs = packed_rows().to(cuda)
    ids = torch.randint(5, 100, docs.shape, generator=torch.Generator().manual_seed(5)).to(cuda)
    dtype = torch.bfloat16 if path == "varlen" else torch.float32
    outs, grads = [], []
    for p in ("sdpa", path):
        model = encoder(p).to(cuda).train()
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            out = model(ids, attention_mask=docs).float()
        out[docs != 0].square().sum().backward()
        outs.append(out[docs != 0].detach())
        grads.append(model.layers[1].attn.Wqkv.weight.grad)  # a local layer's
    if path == "varlen":
        # Not derived: bf16's worst case over the encoder's chain (2 * 37 * 2^-8, a third of the
        # outputs' size) would pass nearly anything. The tolerance measured on a GPU.
        assert (outs[1] - outs[0]).abs().max() < 5e-2
        assert torch.allclose(grads[1], grads[0], atol=5e-2, rtol=5e-2)
        return
    out_bound = rounding_bound(torch.float32, TERMS, ENCODER, largest(outs[0]))
    grad_bound = rounding_bound(torch.float32, GRAD_TERMS, BACKWARD, largest(grads[0]))
    assert (outs[1] - outs[0]).abs().max() <= out_bound
    assert (grads[1] - grads[0]).abs().max() <= grad_bound


def test_flex_has_no_backward_on_cpu():
    """Why flex cannot train on CPU (the runtime refuses it there): PyTorch's own error today.
    Should a release add the backward, this fails, and CPU training with flex can be allowed."""
    model = encoder("flex").train()
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        model(torch.randint(5, 100, (1, 8)))


def test_varlen_builds_its_sequences_without_a_host_read(monkeypatch):
    """The encoder's varlen forward and backward (the kernel's arguments, the packing, the
    sequence boundaries) read nothing back to the host, so a step stays capturable; the kernel
    itself is stubbed (the reference reads its boundaries, flash does not)."""
    monkeypatch.setattr(attention, "varlen_attn", lambda q, k, v, *args, **kwargs: q * v)
    model = encoder("varlen").train()
    docs = packed_rows()
    with HostReads(monkeypatch) as probe:
        model(torch.randint(5, 100, docs.shape), attention_mask=docs).sum().backward()
    assert not probe.reads, dict(probe.reads)


def test_flex_builds_its_block_masks_without_a_host_read(monkeypatch):
    """The BlockMasks of a batch of documents come from its mask without a host read (the
    kernel itself is a higher-order op the probe cannot see through)."""
    kinds = {GLOBAL, LOCAL}
    with HostReads(monkeypatch) as probe:
        masks = flex_masks(packed_rows(), T, 4, torch.device("cpu"), kinds)
    assert not probe.reads, dict(probe.reads)
    assert set(masks) == kinds


def test_the_setting_is_checked():
    assert TrainConfig().attention == FinetuneConfig().attention == "sdpa"
    with pytest.raises(ElectraError, match=r"^train\.attention='flash': use sdpa, flex, varlen$"):
        TrainConfig(attention="flash")
    with pytest.raises(ElectraError, match=r"^attention='flash': use sdpa, flex, varlen$"):
        FinetuneConfig(attention="flash")
    # Prediction attends through SDPA whatever path fine-tuned the model.
    assert InferenceRuntime().over(FinetuneConfig(attention="varlen")).attention == "sdpa"


def test_a_path_the_device_or_model_cannot_run_is_refused():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU
    with pytest.raises(ElectraError, match=r"^train\.attention=varlen runs on CUDA only .*sdpa"):
        Runtime.of(TrainConfig(attention="varlen"), cpu)
    with pytest.raises(ElectraError, match=r"^attention=flex trains on CUDA only .*no backward"):
        Runtime(cpu, RuntimeConfig(attention="flex"))
    with pytest.raises(ElectraError, match=r"^attention=varlen .* bf16 but not fp32"):
        Runtime(cuda, RuntimeConfig(precision="fp32", attention="varlen"))
    runtime = Runtime(cuda, TrainConfig(attention="varlen"))  # bf16 on a GPU
    with pytest.raises(ElectraError, match=r"^train\.attention=varlen is an attention path of"):
        runtime.check_model(tiny_model_config())
    with pytest.raises(
        ElectraError,
        match=r"^attention=flex is an attention path of the family model.arch=deberta-v3 or modernbert only",
    ):
        use_attention(ElectraForPreTraining(tiny_model_config()), "flex")
    use_attention(ElectraForPreTraining(tiny_model_config()), "sdpa")  # the electra family's
    with pytest.raises(
        ElectraError, match=r"attention_dropout is 0\.1: set model\.attention_dropout=0"
    ):
        use_attention(ModernBertModel(tiny_modern_config(attention_dropout=0.1)), "varlen")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny prepared data folder."""
    from electra.cli.main import main

    root = tmp_path_factory.mktemp("attention_data")
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) for i in range(200)]
    (root / "c.txt").write_text("\n".join(lines) + "\n")
    argv = ["tokenizer", "train", str(root / "c.txt"), "--vocab-size", "120"]
    assert main([*argv, "--out", str(root / "tok")]) == 0
    argv = ["prepare", str(root / "c.txt"), "--tokenizer", str(root / "tok"), "--seq-len", "32"]
    assert main([*argv, "--out", str(root / "data"), "--workers", "1"]) == 0
    return root / "data"


def test_varlen_on_cpu_is_one_error_line_and_writes_nothing(data, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["pretrain", "--preset", "modern-tiny", "--data", data, "--out", run]
    argv += ["--steps", "2", "--batch-size", "4", "--device", "cpu"]
    code, _, err = run_cli(capsys, *argv, "--attention", "varlen")
    assert_one_line_error(code, err, "train.attention=varlen runs on CUDA only", "=sdpa")
    code, _, err = run_cli(capsys, *argv, "--train.attention", "flex")
    assert_one_line_error(code, err, "train.attention=flex trains on CUDA only")
    code, _, err = run_cli(capsys, *argv, "--attention", "paged")
    assert_one_line_error(code, err, "train.attention='paged': use sdpa, flex, varlen")
    assert not run.exists()


def test_finetune_takes_the_flag(tiny_pretrained, tmp_path, capsys):
    out = tmp_path / "ft"
    argv = ["finetune", "--model", tiny_pretrained, "--task", "sst2", "--data", tmp_path]
    code, _, err = run_cli(capsys, *argv, "--out", out, "--device", "cpu", "--attention", "varlen")
    assert_one_line_error(code, err, "attention=varlen runs on CUDA only")
    assert not out.exists()
