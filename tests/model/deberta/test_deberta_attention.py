"""The DeBERTa-v3 family's disentangled attention equals `transformers`' DebertaV2 eager attention
(issue 49, item 3): on padded rows longer than 256 tokens, where the log buckets act, forward and
gradients within 1e-5 in fp32, on the stock SDPA path, the CPU kernel and the flex path; the
relative buckets are `transformers`' own; the last layer at a few positions, and the enhanced mask
decoder, equal the layer run with HF's `query_states`; and a pretraining step reads nothing back
to the host."""

from __future__ import annotations

import copy

import pytest
import torch

from electra.config import ObjectiveConfig, TrainConfig
from electra.engine.optim import build_optimizer, param_groups
from electra.engine.step import Window, train_step
from electra.model import kernels
from electra.model.deberta.config import DebertaV3Config
from electra.model.deberta.kernels import PerHeadDisentangledAttention
from electra.model.deberta.modeling import DebertaV2ForMaskedLM, DebertaV2Model
from electra.model.deberta.relative import RelativeRows
from electra.model.kernels import use_kernels
from electra.objectives import build_objective

from ...conftest import random_batch
from ...engine.test_host_syncs import HostReads

pytestmark = pytest.mark.numeric

transformers = pytest.importorskip(
    "transformers", reason="transformers (the hf extra) not installed"
)

V3 = {
    "relative_attention": True,
    "pos_att_type": ["p2c", "c2p"],
    "share_att_key": True,
    "norm_rel_ebd": "layer_norm",
    "position_biased_input": False,
    "max_relative_positions": -1,
    "type_vocab_size": 0,
}
SIZES = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
SIZES |= {"intermediate_size": 64, "max_position_embeddings": 512}
SIZES |= {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
TOL = 1e-5  # the bound, fp32; the largest gap seen is 20x under it


def pair(buckets: int = 256, seed: int = 0):
    """A random `transformers` DebertaV2Model with DeBERTa-v3's settings and ours with its weights."""
    torch.manual_seed(seed)
    hf = transformers.DebertaV2Model(
        transformers.DebertaV2Config(position_buckets=buckets, **SIZES, **V3)
    )
    ours = DebertaV2Model(DebertaV3Config(position_buckets=buckets, **SIZES))
    state = {k: v for k, v in hf.state_dict().items() if k != "embeddings.position_ids"}
    ours.load_state_dict(state, strict=True)
    return hf, ours


def padded(t: int = 300, seed: int = 1):
    """Three rows of t tokens: one full, two padded (at 200 and at 17)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 100, (3, t), generator=g)
    mask = torch.ones(3, t, dtype=torch.long)
    mask[1, 200:], mask[2, 17:] = 0, 0
    return ids * mask, mask


def compare(hf, ours, ids, mask, train: bool = False) -> None:
    """Outputs at the real tokens and every parameter's gradient of a loss over them."""
    hf.train(train), ours.train(train)
    real = mask.bool()[..., None]
    expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    actual = ours(ids, None, mask)
    torch.testing.assert_close(actual * real, expected * real, rtol=0.0, atol=TOL)
    weight = torch.randn(expected.shape, generator=torch.Generator().manual_seed(2))
    (expected * weight * real).sum().backward()
    (actual * weight * real).sum().backward()
    theirs = dict(hf.named_parameters())
    scale = max(float(p.grad.abs().max()) for p in theirs.values())
    for name, p in ours.named_parameters():
        gap = float((p.grad - theirs[name].grad).abs().max())
        assert gap <= TOL * scale, f"{name}: {gap} > {TOL} * {scale}"


@pytest.mark.parametrize("buckets", [256, 64])
def test_stock_attention_equals_transformers_on_long_padded_rows(buckets):
    hf, ours = pair(buckets)
    compare(hf, ours, *padded())


@pytest.mark.parametrize("t", [300, 100])
def test_cpu_kernel_equals_transformers_in_training(t):
    """The per-head kernel runs in training on CPU (dropout 0 here, so the two agree)."""
    hf, ours = pair()
    use_kernels(ours, "auto", torch.device("cpu"))
    assert isinstance(ours.encoder.layer[0].attention.self, PerHeadDisentangledAttention)
    compare(hf, ours, *padded(t), train=True)


def test_flex_path_equals_sdpa():
    """FlexAttention's score_mod adds the same terms (its eager forward, on CPU)."""
    _, ours = pair()
    flex = copy.deepcopy(ours)
    flex.attention_path = "flex"
    ids, mask = padded()
    real = mask.bool()[..., None]
    with torch.no_grad(), pytest.warns(UserWarning, match="without torch.compile"):
        got = flex(ids, None, mask)
    torch.testing.assert_close(got * real, ours(ids, None, mask).detach() * real, atol=TOL, rtol=0)


@pytest.mark.parametrize("t", [1, 2, 129, 130, 300, 700])
@pytest.mark.parametrize("buckets, reach", [(256, 512), (64, 512), (256, 1024)])
def test_relative_rows_are_transformers_buckets(t, buckets, reach):
    from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

    x = torch.zeros(1, t, 4)
    rel = build_relative_position(x, x, bucket_size=buckets, max_position=reach)[0]
    rows = RelativeRows.of(t, buckets, reach, torch.device("cpu"))
    expected = (rel + buckets).clamp(0, 2 * buckets - 1)  # the row HF's c2p reads
    assert torch.equal(rows.index + rows.lo, expected)
    assert rows.index.min() >= 0 and rows.index.max() < rows.rows
    # Only the rows the row's distances reach are read (one spare each side for rounding).
    assert rows.rows <= min(2 * buckets, 2 * t + 3)


def test_last_layer_at_positions_equals_the_whole_row():
    _, ours = pair()
    ids, mask = padded()
    positions = torch.tensor([[0, 5, 299], [3, 150, 199], [1, 2, 16]])
    whole = ours(ids, None, mask).gather(1, positions[..., None].expand(-1, -1, 32))
    torch.testing.assert_close(ours(ids, None, mask, positions), whole, atol=TOL, rtol=0)


def test_enhanced_mask_decoder_is_the_last_layer_run_twice_with_absolute_queries():
    """HF's DebertaV2Layer takes `query_states`: the reference runs its last layer twice with
    queries = the last layer's input + absolute position embeddings (the DeBERTa paper, §3.2)."""
    hf, _ = pair()
    torch.manual_seed(3)
    mlm = DebertaV2ForMaskedLM(DebertaV3Config(enhanced_mask_decoder=True, **SIZES)).eval()
    mlm.deberta.load_state_dict(
        {k: v for k, v in hf.state_dict().items() if k != "embeddings.position_ids"}
    )
    hf.eval()
    ids, mask = padded()
    out = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    below = out.hidden_states[-2]  # the last layer's input
    encoder = hf.encoder
    rel_pos = encoder.get_rel_pos(below)
    queries = below + mlm.position_embeddings.weight[: ids.shape[1]]
    for _ in range(2):
        queries = encoder.layer[-1](
            below,
            encoder.get_attention_mask(mask),
            query_states=queries,
            relative_pos=rel_pos,
            rel_embeddings=encoder.get_rel_embedding(),
        )[0]
    positions = torch.tensor([[0, 5, 299], [3, 150, 199], [1, 2, 16]])
    expected = queries.gather(1, positions[..., None].expand(-1, -1, 32))
    with torch.no_grad():
        got = mlm.hidden_at(ids, None, mask, positions)
    torch.testing.assert_close(got, expected.detach(), atol=TOL, rtol=0)


def test_a_step_reads_nothing_back(special, monkeypatch):
    """The recipe (GDES, the enhanced mask decoder, a generator of half the depth), on the path a
    GPU takes, padded rows and full ones (tests/engine/test_host_syncs.py's probe)."""
    monkeypatch.setattr(kernels, "stock_ops", lambda device: True)
    cfg = DebertaV3Config(enhanced_mask_decoder=True, **SIZES)
    objective_cfg = ObjectiveConfig(
        generator_hidden_fraction=1.0, generator_layers_fraction=0.5, sharing="gdes"
    )
    torch.manual_seed(0)
    objective = build_objective(cfg, objective_cfg, special, seq_len=40)
    train = TrainConfig(grad_accum=2)
    optimizer = build_optimizer(param_groups(objective, 0.01), train, torch.device("cpu"))
    params = [p for p in objective.parameters() if p.requires_grad]
    micro = []
    for full in (True, False):
        ids, types, attention = random_batch(special, b=4, t=40)
        attention = torch.ones_like(attention) if full else attention
        micro.append({"input_ids": ids, "token_type_ids": types, "attention_mask": attention})
    settings = {"precision": train.precision, "clip_norm": train.clip_norm}
    for _ in range(2):
        with HostReads(monkeypatch) as probe:
            train_step(objective, optimizer, params, micro, Window(), **settings)
        assert not probe.reads, dict(probe.reads)
