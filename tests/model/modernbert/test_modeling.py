"""The ModernBERT-architecture encoder (electra.model.modernbert): the real `transformers`
ModernBertModel's weights load 1:1 and give its hidden states to fp32 rounding (padded batch,
`sdpa` and `eager`; bounds from tests/numerics.py); local layers see only their window; bad settings are one ElectraError. Its
heads: the MLM model loads HF's ModernBertForMaskedLM and gives its logits; the RTD model exports
to ModernBertForTokenClassification (two labels, rows [0; w]) with equal probabilities and loss."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from electra.errors import ElectraError
from electra.model.configs import GLOBAL, LOCAL
from electra.model.modernbert.config import ModernConfig
from electra.model.modernbert.modeling import (
    ModernBertForMaskedLM,
    ModernBertForPreTraining,
    ModernBertModel,
    attention_masks,
    rotary,
)

from ...conftest import tiny_modern_config
from ...numerics import (
    assert_same_computation,
    assert_same_gradients,
    encoder_depth,
    largest,
    rounding_bound,
)

pytestmark = pytest.mark.numeric

transformers = pytest.importorskip("transformers")

TINY = tiny_modern_config()  # windows matter at length 20
LENGTH = 20
# The longest reduction on every path compared here: the MLP's intermediate size (48), above the
# hidden size (32), the attention's 20 keys and the 40 tokens a weight's gradient sums over.
TERMS = max(TINY.intermediate_size, TINY.hidden_size, 2 * LENGTH)
# The encoder's chain: its layers, the embeddings' LayerNorm and the final one (2 each); the MLM
# head adds its dense layer, LayerNorm and decoder (4), the RTD head its dense layer, LayerNorm
# and one-logit classifier (4).
ENCODER = encoder_depth(TINY.num_hidden_layers, extra=4)
WITH_HEAD = encoder_depth(TINY.num_hidden_layers, extra=8)


def hf_config(cfg: ModernConfig, attn: str):
    """HF's config of `cfg` with both the 4.x keys (global_attn_every_n_layers, *_rope_theta) and
    the 5.x ones (layer_types, rope_parameters), as an export must write them."""
    types = [cfg.layer_type(i) for i in range(cfg.num_hidden_layers)]
    return transformers.ModernBertConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        hidden_activation=cfg.hidden_activation,
        max_position_embeddings=cfg.max_position_embeddings,
        norm_eps=cfg.norm_eps,
        local_attention=cfg.local_attention,
        global_attn_every_n_layers=cfg.global_attn_every_n_layers,
        global_rope_theta=cfg.global_rope_theta,
        local_rope_theta=cfg.local_rope_theta,
        layer_types=types,
        rope_parameters={
            GLOBAL: {"rope_type": "default", "rope_theta": cfg.global_rope_theta},
            LOCAL: {"rope_type": "default", "rope_theta": cfg.local_rope_theta},
        },
        pad_token_id=cfg.pad_token_id,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
        attn_implementation=attn,
    )


def hf_model(attn: str, kind: str = "ModernBertModel", **settings):
    torch.manual_seed(0)
    config = hf_config(TINY, attn)
    for key, value in settings.items():
        setattr(config, key, value)
    try:
        model = getattr(transformers, kind)(config)
    except (ValueError, ImportError) as e:  # a build without this attention path
        pytest.skip(f"transformers refuses attn_implementation={attn!r}: {e}")
    if model.config._attn_implementation != attn:
        pytest.skip(f"transformers ran {model.config._attn_implementation!r}, not {attn!r}")
    # Larger weights than HF's initialisation: its near-uniform attention would hide a wrong theta
    # or window below the rounding bound the comparison allows.
    bigger_weights(model)
    return model.eval()


def bigger_weights(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.2 * torch.randn_like(p))


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of LENGTH tokens, the second with 7 real tokens then padding."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, TINY.vocab_size, (2, LENGTH), generator=g)
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, 7:] = 0
    ids[1, 7:] = TINY.pad_token_id
    return ids, mask


def ours_from(hf, cfg: ModernConfig = TINY) -> ModernBertModel:
    ours = ModernBertModel(cfg).eval()
    ours.load_state_dict(hf.state_dict(), strict=True)  # no missing or unexpected keys
    return ours


def test_the_installed_config_carries_our_layer_pattern_and_thetas():
    c = hf_config(TINY, "sdpa")
    assert c.layer_types == [GLOBAL, LOCAL, GLOBAL]
    assert c.rope_parameters[GLOBAL]["rope_theta"] == 160_000.0
    assert c.rope_parameters[LOCAL]["rope_theta"] == 10_000.0
    assert c.sliding_window == TINY.local_attention // 2


def test_state_dict_keys_are_hf_modernbert_keys():
    assert set(ModernBertModel(TINY).state_dict()) == set(hf_model("sdpa").state_dict())


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_hidden_states_equal_hf_on_a_padded_batch(attn):
    hf = hf_model(attn)
    ours = ours_from(hf)
    ids, mask = padded_batch()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        mine = ours(ids, attention_mask=mask)
    real = mask.bool()
    assert mine.shape == theirs.shape == (2, LENGTH, TINY.hidden_size)
    assert torch.isfinite(mine).all()
    assert_same_computation(mine[real], theirs[real], terms=TERMS, depth=ENCODER)


@pytest.mark.parametrize(
    "change",
    [
        {"local_attention": 4096},  # no window: the comparison above would see it
        {"global_rope_theta": 10_000.0, "local_rope_theta": 160_000.0},  # thetas swapped
        {"global_attn_every_n_layers": 3},  # another layer pattern
    ],
)
def test_the_parity_test_would_catch_a_wrong_setting(change):
    hf = hf_model("sdpa")
    ours = ours_from(hf, dataclasses.replace(TINY, **change))
    ids, mask = padded_batch()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        gap = (ours(ids, attention_mask=mask) - theirs).abs()
    real = mask.bool()
    bound = rounding_bound(torch.float32, TERMS, ENCODER, largest(theirs[real]))
    assert gap[real].max() > 10 * bound  # what the parity test allows, ten times over


def test_a_padded_row_gives_what_the_row_alone_gives():
    torch.manual_seed(0)
    model = ModernBertModel(TINY).eval()
    ids, mask = padded_batch()
    with torch.no_grad():
        batched = model(ids, attention_mask=mask)[1, :7]
        alone = model(ids[1:, :7], attention_mask=mask[1:, :7])[0]
    assert_same_computation(batched, alone, terms=TERMS, depth=ENCODER)


def test_a_local_layer_sees_only_its_window():
    torch.manual_seed(0)
    model = ModernBertModel(TINY).eval()
    local, global_ = model.layers[1], model.layers[0]
    assert (local.attention_type, global_.attention_type) == (LOCAL, GLOBAL)
    half = TINY.local_attention // 2
    masks = attention_masks(torch.ones(1, LENGTH), LENGTH, half, torch.device("cpu"))
    x = torch.randn(1, LENGTH, TINY.hidden_size)
    far, near = x.clone(), x.clone()
    far[0, 10 + half + 1] += 1.0  # just outside position 10's window
    near[0, 10 + half] += 1.0  # its window's edge
    with torch.no_grad():
        for layer in (local, global_):
            rope = rotary(LENGTH, TINY.head_dim, TINY.rope_theta(layer.attention_type), x.device)
            base, after_far, after_near = (
                layer(v, masks[layer.attention_type], rope)[0, 10] for v in (x, far, near)
            )
            assert not torch.equal(base, after_near)
            assert torch.equal(base, after_far) == (layer is local)


def test_masks_hide_padding_and_far_keys():
    mask = torch.tensor([[1, 1, 1, 0, 0, 0]])
    m = attention_masks(mask, 6, 1, torch.device("cpu"))
    i, j = torch.meshgrid(torch.arange(6), torch.arange(6), indexing="ij")
    real_q = i < 3
    assert torch.equal(m[GLOBAL][0, 0][real_q], (j < 3)[real_q])
    assert torch.equal(m[LOCAL][0, 0][real_q], ((j < 3) & ((i - j).abs() <= 1))[real_q])
    assert m[LOCAL][0, 0].any(dim=-1).all()  # no row without a key (SDPA would give NaN)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"hidden_size": 30, "num_attention_heads": 4}, "not divisible"),
        ({"hidden_size": 36, "num_attention_heads": 4}, "odd"),
        ({"hidden_activation": "swish"}, "hidden_activation"),
        ({"classifier_activation": "swish"}, "classifier_activation"),
        ({"classifier_dropout": 1.0}, "classifier_dropout"),
        ({"pad_token_id": 100}, "pad_token_id"),
        ({"global_attn_every_n_layers": 0}, "global_attn_every_n_layers"),
        ({"local_rope_theta": 0.0}, "local_rope_theta"),
        ({"mlp_dropout": 1.0}, "mlp_dropout"),
    ],
)
def test_bad_settings_are_one_error_line(change, says):
    with pytest.raises(ElectraError, match=says) as e:
        dataclasses.replace(TINY, **change)
    assert "\n" not in str(e.value)


def test_a_row_longer_than_the_model_is_refused():
    model = ModernBertModel(dataclasses.replace(TINY, max_position_embeddings=8))
    with pytest.raises(ElectraError, match="max_position_embeddings"):
        model(torch.ones(1, 9, dtype=torch.long))


# The heads ---------------------------------------------------------------------------------------


def test_hf_dropout_settings_are_zero():
    c = hf_config(TINY, "sdpa")
    for name in ("embedding_dropout", "attention_dropout", "mlp_dropout", "classifier_dropout"):
        assert getattr(c, name) == 0 == getattr(TINY, name)
    assert (c.classifier_activation, c.classifier_bias, c.decoder_bias) == (
        TINY.classifier_activation,
        False,
        True,
    )


def test_mlm_state_dict_keys_are_hf_keys_and_the_decoder_is_tied():
    ours = ModernBertForMaskedLM(TINY)
    assert set(ours.state_dict()) == set(hf_model("sdpa", "ModernBertForMaskedLM").state_dict())
    assert ours.decoder.weight is ours.model.embeddings.tok_embeddings.weight
    assert ours.head.dense.bias is None and ours.head.norm.bias is None


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_mlm_logits_equal_hf_on_a_padded_batch(attn):
    hf = hf_model(attn, "ModernBertForMaskedLM")
    ours = ModernBertForMaskedLM(TINY).eval()
    result = ours.load_state_dict(hf.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert ours.decoder.weight is ours.model.embeddings.tok_embeddings.weight  # still tied
    ids, mask = padded_batch()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask).logits
        mine = ours(ids, attention_mask=mask)
    real = mask.bool()
    assert mine.shape == theirs.shape == (2, LENGTH, TINY.vocab_size)
    assert theirs[real].abs().max() > 1  # the comparison is not of near-zero numbers
    assert_same_computation(mine[real], theirs[real], terms=TERMS, depth=WITH_HEAD)


def test_mlm_at_positions_equals_the_full_logits_gathered():
    torch.manual_seed(0)
    ours = ModernBertForMaskedLM(TINY).eval()
    bigger_weights(ours)
    ids, mask = padded_batch()
    positions = torch.tensor([[0, 5, 19], [6, 1, 3]])
    with torch.no_grad():
        full = ours(ids, attention_mask=mask)
        some = ours(ids, attention_mask=mask, positions=positions)
    assert some.shape == (2, 3, TINY.vocab_size)
    expected = torch.stack([full[b, positions[b]] for b in range(2)])
    assert_same_computation(some, expected, terms=TERMS, depth=WITH_HEAD)


@pytest.mark.parametrize("layers", [1, 2, 3])  # the last layer global, local, global
def test_the_encoder_at_positions_gives_the_gathered_states_and_gradients(layers):
    """With `positions`, the last layer runs at those alone (`attend_at`): the states there and
    every parameter's gradient are the full encoder's, on rows with padding and two documents
    (positions on padding and on each document included)."""
    cfg = dataclasses.replace(TINY, num_hidden_layers=layers)
    torch.manual_seed(0)
    model = ModernBertModel(cfg)
    bigger_weights(model)
    ids, mask = padded_batch()
    mask[0, 12:] = 2  # row 0 packs a second document
    positions = torch.tensor([[0, 11, 12, 19], [6, 1, 3, 15]])
    results = []
    for narrow in (False, True):
        model.zero_grad()
        if narrow:
            out = model(ids, attention_mask=mask, positions=positions)
        else:
            out = model(ids, attention_mask=mask)
            out = torch.stack([out[b, positions[b]] for b in range(2)])
        out.pow(2).sum().backward()
        results.append((out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (full, full_grads), (some, some_grads) = results
    assert some.shape == (2, 4, cfg.hidden_size)
    assert_same_computation(some, full, terms=TERMS, depth=encoder_depth(layers, extra=4))
    assert some_grads.keys() == full_grads.keys()
    assert_same_gradients(
        some_grads.values(),
        full_grads.values(),
        terms=TERMS,
        depth=encoder_depth(layers, extra=4, backward=True),
        names=list(full_grads),
    )


def rtd_as_hf_token_classifier(ours: ModernBertForPreTraining, attn: str):
    """The export rule: every key as it is, the one-logit classifier as two rows [0; w], [0; b]."""
    hf = hf_model(attn, "ModernBertForTokenClassification", num_labels=2)
    state = dict(ours.state_dict())
    w, b = state.pop("classifier.weight"), state.pop("classifier.bias")
    state["classifier.weight"] = torch.cat((torch.zeros_like(w), w))
    state["classifier.bias"] = torch.cat((torch.zeros_like(b), b))
    hf.load_state_dict(state, strict=True)
    return hf


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_rtd_exports_to_hf_token_classification_with_equal_probabilities_and_loss(attn):
    torch.manual_seed(0)
    ours = ModernBertForPreTraining(TINY).eval()
    bigger_weights(ours)
    hf = rtd_as_hf_token_classifier(ours, attn)
    ids, mask = padded_batch()
    real = mask.bool()
    labels = torch.randint(0, 2, ids.shape, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        mine = ours(ids, attention_mask=mask)
        out = hf(input_ids=ids, attention_mask=mask, labels=labels.masked_fill(~real, -100))
    assert mine.shape == (2, LENGTH)
    assert out.logits.shape == (2, LENGTH, 2)
    probs = out.logits.softmax(-1)[..., 1]
    assert (mine[real].sigmoid() - 0.5).abs().max() > 0.1  # not all near one half
    # HF's two-way softmax adds one reduction; the loss's mean over the tokens another
    assert_same_computation(mine[real].sigmoid(), probs[real], terms=TERMS, depth=WITH_HEAD + 1)
    ours_loss = F.binary_cross_entropy_with_logits(mine[real], labels[real].float())
    assert_same_computation(
        ours_loss, out.loss, terms=TERMS, depth=WITH_HEAD + 2, scale=largest(mine[real], out.loss)
    )


def test_rtd_state_dict_keys_are_hf_token_classification_keys():
    ours = set(ModernBertForPreTraining(TINY).state_dict())
    hf = hf_model("sdpa", "ModernBertForTokenClassification", num_labels=2)
    assert ours == set(hf.state_dict())
    assert ModernBertForPreTraining(TINY)(*padded_batch()).shape == (2, LENGTH)
