"""The modern family's model FLOPs (electra.model.modernbert.flops): one global and one local layer
counted by hand, the local window's edges counted exactly, GeGLU's doubled `Wi`, the heads, the
total, and the count against torch's FlopCounterMode (whose SDPA count is the full s x s, masked
keys included, so the local layer's measured figure exceeds ours by exactly the masked pairs)."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from electra.errors import ElectraError
from electra.model.configs import GLOBAL, LOCAL
from electra.model.family import family
from electra.model.flops import Network
from electra.model.modernbert import flops as mf
from electra.model.modernbert.config import ModernConfig
from electra.model.modernbert.modeling import (
    ModernBertForMaskedLM,
    ModernBertForPreTraining,
    ModernBertModel,
    attention_masks,
)

# Layer 0 global, layer 1 local; a total window of 4 (|i - j| <= 2) matters at s = 10.
TINY = ModernConfig(
    vocab_size=64,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=24,
    pad_token_id=0,
    global_attn_every_n_layers=2,
    local_attention=4,
)
S = 10

# By hand, H=16, I=24, V=64, s=10:
WQKV = 2 * 10 * 16 * 48  # 15360
WO = 2 * 10 * 16 * 16  # 5120
WI = 2 * 10 * 16 * (2 * 24)  # GeGLU: value and gate, 15360
MLP_WO = 2 * 10 * 24 * 16  # 7680
GLOBAL_PAIRS = 10 * 10  # 100
# keys per query with |i - j| <= 2 in a row of 10: 3, 4, then six full windows of 5, then 4, 3
LOCAL_PAIRS = 3 + 4 + 6 * 5 + 4 + 3  # 44 (the bound min(s, 5) per query would say 50)
GLOBAL_LAYER = WQKV + WO + WI + MLP_WO + 2 * 2 * 16 * GLOBAL_PAIRS  # 43520 + 6400 = 49920
LOCAL_LAYER = WQKV + WO + WI + MLP_WO + 2 * 2 * 16 * LOCAL_PAIRS  # 43520 + 2816 = 46336
MLM_HEAD_30 = 3 * (2 * 16 * 16 + 2 * 16 * 64)  # 3 of 10 positions x 2560 = 7680
RTD_HEAD = 10 * (2 * 16 * 16 + 2 * 16)  # 5440


def test_one_global_and_one_local_layer_by_hand():
    assert GLOBAL_LAYER == 49920 and LOCAL_LAYER == 46336
    assert mf.layer_flops(TINY, GLOBAL, S) == GLOBAL_LAYER
    assert mf.layer_flops(TINY, LOCAL, S) == LOCAL_LAYER
    assert mf.attended_pairs(TINY, LOCAL, S) == LOCAL_PAIRS


@pytest.mark.parametrize("s", [1, 2, 3, 4, 5, 6, 9, 10, 31])
@pytest.mark.parametrize("local_attention", [1, 2, 4, 5, 8])
def test_local_pairs_are_the_models_mask_counted_exactly(s, local_attention):
    half = local_attention // 2
    mask = attention_masks(None, s, half, torch.device("cpu"))[LOCAL]
    assert mf.local_keys(s, half) == int(mask.sum())
    assert mf.local_keys(s, half) <= s * min(s, 2 * half + 1)  # the per-query bound


def test_geglu_doubles_wi():
    assert mf.mlp_flops(TINY, S) == WI + MLP_WO == 3 * (2 * S * 16 * 24)  # a plain MLP: 2 x


def test_heads():
    assert mf.mlm_head_flops(TINY, S, 0.3) == MLM_HEAD_30
    assert mf.rtd_head_flops(TINY, S) == RTD_HEAD


def test_total_is_the_layers_plus_the_heads():
    assert mf.modern_forward_flops(TINY, S) == GLOBAL_LAYER + LOCAL_LAYER
    total = mf.modern_forward_flops(TINY, S, mlm_frac=0.3, rtd=True)
    assert total == GLOBAL_LAYER + LOCAL_LAYER + MLM_HEAD_30 + RTD_HEAD
    with pytest.raises(ElectraError, match="mlm_frac=1.5"):
        mf.modern_forward_flops(TINY, S, mlm_frac=1.5)


def test_the_registry_adapter_prices_a_network_in_the_model_convention_only():
    modern = family("modernbert")
    assert modern.forward_flops is mf.forward_flops
    assert modern.pretraining is ModernBertForPreTraining
    n = Network(TINY, mlm_frac=0.3, rtd_head=True)
    assert mf.forward_flops(n, S, "model") == mf.modern_forward_flops(
        TINY, S, mlm_frac=0.3, rtd=True
    )
    with pytest.raises(ElectraError, match="official FLOP convention is ELECTRA's counter's"):
        mf.forward_flops(n, S, "official")


def measured(model, *args):
    """torch's count under the math SDPA, which shows the attention as two batched products
    over the full s x s (the CPU's fused kernel is not counted at all)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model.eval()(*args)
    return counter.get_total_flops()


def test_against_torchs_flop_counter():
    batch = 2
    ids = torch.randint(1, TINY.vocab_size, (batch, S))
    masked_out = 2 * 2 * 16 * (GLOBAL_PAIRS - LOCAL_PAIRS)  # one local layer's hidden pairs
    encoder = measured(ModernBertModel(TINY), ids)
    assert encoder == batch * (mf.encoder_flops(TINY, S) + masked_out)
    # the linear layers alone agree exactly, whatever the attention kernel counts
    linear = 2 * (mf.projection_flops(TINY, S) + mf.mlp_flops(TINY, S))
    assert encoder - batch * 2 * 2 * 16 * 2 * GLOBAL_PAIRS == batch * linear

    positions = torch.tensor([[0, 4, 7], [1, 2, 9]])  # 3 of 10: mlm_frac 0.3
    mlm = measured(ModernBertForMaskedLM(TINY), ids, None, None, positions)
    assert mlm == batch * (mf.modern_forward_flops(TINY, S, mlm_frac=0.3) + masked_out)
    rtd = measured(ModernBertForPreTraining(TINY), ids)
    assert rtd == batch * (mf.modern_forward_flops(TINY, S, rtd=True) + masked_out)
