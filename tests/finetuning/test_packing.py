"""Packed fine-tuning batches compute what padded ones do, with fewer rows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from electra.finetuning.inference import trim
from electra.finetuning.packing import first_fit, pack_batch
from electra.model import kernels
from electra.model.electra.heads import ElectraForSequenceClassification

from ..conftest import tiny_model_config, train_losses, varied_sst_dir
from ..numerics import assert_same_computation, assert_same_gradients, encoder_depth, rounding_bound

pytestmark = pytest.mark.numeric

CFG = tiny_model_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# The classifier's chain: 2 layers, the embeddings' projection and LayerNorm (3), the head's two
# products (2); its logits' longest reduction the intermediate size (64, above 24 keys), its
# weights' gradients' the 8 rows of 24 tokens they sum over (192); the loss adds the softmax over
# 3 labels and the sum over 8 examples.
FORWARD = encoder_depth(CFG.num_hidden_layers, extra=5)
BACKWARD = encoder_depth(CFG.num_hidden_layers, extra=7, backward=True)
TOKENS = 8 * 24


def test_first_fit_places_the_longest_first_into_the_first_row_with_room():
    assert first_fit([5, 3, 4, 2], width=8) == [(0, 0), (0, 5), (1, 0), (1, 4)]
    assert first_fit([8, 8], width=8) == [(0, 0), (1, 0)]


@pytest.mark.parametrize(
    ("lengths", "shape"),
    [
        ([5, 3], (1, 8)),
        ([6, 5, 3], (2, 8)),
        ([40, 30, 30, 20, 10], (4, 40)),
        ([40, 24, 24, 24], (2, 64)),
        ([64, 64], (2, 64)),
    ],
)
def test_rows_are_the_batch_or_its_longest_example_wide_whichever_wastes_less(lengths, shape):
    mask = (torch.arange(64)[None] < torch.tensor(lengths)[:, None]).long()
    batch = {"input_ids": mask, "token_type_ids": mask * 0, "attention_mask": mask}
    assert pack_batch(batch)["input_ids"].shape == shape


def padded_batch(lengths, t=24, vocab=100, seed=0):
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    mask = (torch.arange(t)[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(5, vocab, (b, t), generator=g).masked_fill(mask == 0, 0)
    ids[:, 0] = 2
    types = (torch.arange(t)[None] >= torch.tensor(lengths)[:, None] // 2).long() * mask
    labels = torch.randint(0, 3, (b,), generator=g)
    return trim(
        {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels}
    )


def logits_of(model, batch):
    return model(
        batch["input_ids"],
        batch["token_type_ids"],
        batch["attention_mask"],
        batch.get("position_ids"),
        batch.get("cls_index"),
    )


LENGTHS = [5, 17, 3, 9, 24, 2, 11, 6]


@pytest.mark.parametrize("gpu_path", [False, True])
def test_packed_logits_and_gradients_equal_padded(gpu_path):
    torch.manual_seed(0)
    model = ElectraForSequenceClassification(
        tiny_model_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), 3
    )
    # gpu_path: the stock layers and SDPA with the mask, as on a GPU; else the CPU kernels
    kernels.use_kernels(model, "stock" if gpu_path else "auto", torch.device("cpu"))
    batch = padded_batch(LENGTHS)
    packed = pack_batch(batch)
    assert packed["input_ids"].shape == (4, 24)  # 77 real tokens in 4 rows instead of 8
    assert torch.equal(packed["labels"], batch["labels"])
    grads = []
    for b in (batch, packed):
        model.zero_grad()
        logits = logits_of(model, b)
        F.cross_entropy(logits, b["labels"], reduction="sum").backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        if b is batch:
            expected = logits.detach()
    assert_same_computation(logits.detach(), expected, terms=CFG.intermediate_size, depth=FORWARD)
    assert_same_gradients(grads[1], grads[0], terms=TOKENS, depth=BACKWARD)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("gpu_path", [False, True])
def test_the_last_layer_at_cls_alone_equals_the_whole_encoder(packed, gpu_path):
    """The classifier runs the encoder's last layer at the [CLS] positions only: the same logits
    and gradients as taking [CLS] from every position's final states."""
    torch.manual_seed(0)
    model = ElectraForSequenceClassification(
        tiny_model_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), 3
    )
    # gpu_path: the stock layers and SDPA with the mask, as on a GPU; else the CPU kernels
    kernels.use_kernels(model, "stock" if gpu_path else "auto", torch.device("cpu"))
    batch = padded_batch(LENGTHS)
    if packed:
        batch = pack_batch(batch)
    cls = batch.get("cls_index")
    if cls is None:
        cls = torch.arange(len(LENGTHS)) * batch["input_ids"].shape[1]

    def whole(m, b):
        states = m.electra(
            b["input_ids"], b["token_type_ids"], b["attention_mask"], b.get("position_ids")
        )
        return m.logits(states.flatten(0, 1)[cls])

    results = []
    for forward in (logits_of, whole):
        model.zero_grad()
        logits = forward(model, batch)
        F.cross_entropy(logits, batch["labels"], reduction="sum").backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (narrow, narrow_grads), (full, full_grads) = results
    assert_same_computation(narrow, full, terms=CFG.intermediate_size, depth=FORWARD)
    assert_same_gradients(narrow_grads, full_grads, terms=TOKENS, depth=BACKWARD)


def test_an_example_sees_only_itself_in_a_packed_row():
    torch.manual_seed(0)
    model = ElectraForSequenceClassification(tiny_model_config(), 3).eval()
    batch = padded_batch(LENGTHS)
    before = logits_of(model, pack_batch(batch))
    batch["input_ids"][3, 1:9] = 7  # example 3 shares a row with others
    after = logits_of(model, pack_batch(batch))
    rounding = rounding_bound(torch.float32, 64, FORWARD, before.abs().max().item())
    changed = (after - before).abs().amax(1) > rounding
    assert changed.tolist() == [i == 3 for i in range(len(LENGTHS))]


def test_packed_training_with_dropout_is_finite():
    torch.manual_seed(0)
    model = ElectraForSequenceClassification(tiny_model_config(), 3).train()
    loss = F.cross_entropy(
        logits_of(model, pack_batch(padded_batch(LENGTHS))), torch.zeros(8).long()
    )
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_fine_tuning_packed_and_padded_give_the_same_losses(tmp_path, capsys, tiny_pretrained):
    data = varied_sst_dir(tmp_path / "sst")
    cfg, packed = train_losses(capsys, tiny_pretrained, data, tmp_path / "packed", "--pack")
    padded_cfg, padded = train_losses(
        capsys, tiny_pretrained, data, tmp_path / "padded", "--no-pack"
    )
    assert cfg["pack"] and not padded_cfg["pack"]
    # Each step's loss comes from weights that every earlier step's gradients moved: a chain of
    # 8 steps (2 epochs of 4 batches of 8) of the backward chain and Adam's update, relative to
    # the losses' size (positive terms); the longest reduction 8 rows of at most 16 tokens.
    depth = 8 * (BACKWARD + 1)
    assert packed == pytest.approx(padded, rel=rounding_bound(torch.float32, 8 * 16, depth))
