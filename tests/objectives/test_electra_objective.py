"""The ELECTRA objective: masking, sampling, labels, losses, gradient flow, and the MLM baseline."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from electra.config import ObjectiveConfig
from electra.objectives import build_objective
from electra.objectives.losses import masked_lm_loss
from electra.objectives.masking import mask_tokens, replace_tokens, select_positions
from electra.objectives.sampling import sample_categorical, sample_tokens

from ..conftest import random_batch
from ..numerics import assert_same_computation, binomial_bound, rounding_bound

pytestmark = pytest.mark.numeric


@pytest.mark.parametrize("distinct", [False, True])
def test_masking_exact_count_never_special_or_padding(special, distinct):
    ids, _, attention = random_batch(special)
    cfg = ObjectiveConfig()
    num_slots = cfg.num_predictions(40)  # int(0.155 * 40) = 6
    repeats = 0
    for _ in range(20):
        positions, weights = select_positions(
            ids, attention, special, cfg.mask_prob, num_slots, distinct
        )
        assert positions.shape == weights.shape == (64, num_slots)
        expected = torch.round(attention.sum(1) * 0.15).long().clamp(1, num_slots)
        assert torch.equal(weights.sum(1).long(), expected)
        chosen = ids.gather(1, positions)[weights.bool()]
        assert not torch.isin(
            chosen, torch.tensor([special.cls, special.sep, special.pad, special.mask])
        ).any()
        assert (attention.gather(1, positions)[weights.bool()] == 1).all()
        for row, w in zip(positions, weights.bool(), strict=True):
            repeats += int(w.sum()) - len(set(row[w].tolist()))
    # The official draws are with replacement: rows of 6-38 tokens repeat a position now and then.
    assert (repeats == 0) if distinct else (repeats > 20)


def test_official_draws_are_uniform_over_candidates(special):
    """Each candidate of a row is drawn equally often; special tokens and padding never."""
    torch.manual_seed(0)
    ids = torch.tensor([[special.cls, 10, 11, special.sep, 12, 13, special.sep, 0, 0]] * 4000)
    attention = (ids != special.pad).long()
    positions, weights = select_positions(ids, attention, special, 0.5, 3)
    drawn = positions[weights.bool()]
    freq = torch.bincount(drawn, minlength=9).float() / drawn.numel()
    within = binomial_bound(0.25, drawn.numel())  # 5 standard deviations of a rate over the draws
    assert torch.allclose(freq[[1, 2, 4, 5]], torch.full((4,), 0.25), atol=within)
    assert freq[[0, 3, 6, 7, 8]].sum() == 0


def test_a_position_drawn_twice_is_masked_if_either_slot_masks_it(special):
    """The official rule: a repeated position is [MASK] when any of its used slots drew [MASK]
    (85% each), so 1 - 0.15^2 of twice-drawn positions are masked, not 85%."""
    torch.manual_seed(0)
    ids = torch.tensor([[special.cls, 10, special.sep, 11, special.sep]] * 20000)
    attention = torch.ones_like(ids)
    cfg = ObjectiveConfig(mask_prob=0.5)  # round(5 * 0.5) = 2 used slots, both on a candidate
    m = mask_tokens(ids, attention, special, cfg, 2, vocab_size=100)
    twice = m.positions[:, 0] == m.positions[:, 1]
    masked = m.input_ids.gather(1, m.positions[:, :1]).squeeze(1) == special.mask
    # each rate within 5 binomial standard deviations over the rows it is taken over
    rows, n = len(ids), int(twice.sum())
    assert twice.float().mean().item() == pytest.approx(0.5, abs=binomial_bound(0.5, rows))
    either = 1 - 0.15**2
    assert masked[twice].float().mean().item() == pytest.approx(
        either, abs=binomial_bound(either, n)
    )
    assert masked[~twice].float().mean().item() == pytest.approx(
        0.85, abs=binomial_bound(0.85, rows - n)
    )


def test_a_position_drawn_twice_is_written_once_and_counted_twice(special):
    """Slots 0 and 1 of each row hold the same position: the first slot's sample is written, and
    the MLM loss averages over both slots."""
    from electra.objectives.masking import Masked, first_writes, write_slots

    ids = torch.tensor(
        [[special.cls, 10, 11, 12, special.sep], [special.cls, 20, 21, 22, special.sep]]
    )
    attention = torch.ones_like(ids)
    positions = torch.tensor([[2, 2, 3], [1, 1, 1]])
    weights = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    writes = first_writes(positions, weights)
    assert writes.tolist() == [[True, False, True], [True, False, False]]
    masked = write_slots(ids, positions, torch.tensor([[4, 50, 4], [51, 4, 52]]), writes)
    assert masked.tolist() == [[2, 10, 4, 4, 3], [2, 51, 21, 22, 3]]
    m = Masked(positions, weights, writes, ids.gather(1, positions), masked)
    corrupted, labels = replace_tokens(
        ids, attention, m, torch.tensor([[60, 61, 12], [70, 71, 72]])
    )
    assert corrupted.tolist() == [[2, 10, 60, 12, 3], [2, 70, 21, 22, 3]]
    assert labels.long().tolist() == [[0, 0, 1, 0, 0], [0, 1, 0, 0, 0]]
    logits = torch.randn(2, 3, 100)
    loss, _, _ = masked_lm_loss(logits, m.targets, weights)
    nll = F.cross_entropy(logits.flatten(0, 1), m.targets.flatten(), reduction="none")
    # the log-softmax over 100 ids and the weighted mean of 6 slots, in the logits' size
    assert loss.item() == pytest.approx(
        (nll * weights.flatten()).sum().item() / 5,
        abs=rounding_bound(torch.float32, 100, 2, logits.abs().max().item()),
    )


def test_mask_keep_random_split_proportions(special):
    torch.manual_seed(0)
    ids, _, attention = random_batch(special, b=256)
    cfg = ObjectiveConfig(mask_frac=0.8, keep_frac=0.1, random_frac=0.1)
    counts = torch.zeros(3)
    for _ in range(30):
        m = mask_tokens(ids, attention, special, cfg, cfg.num_predictions(40), vocab_size=100)
        used = m.weights.bool()
        new = m.input_ids.gather(1, m.positions)[m.writes]
        orig = m.targets[m.writes]
        is_mask = new == special.mask
        counts += torch.tensor(
            [is_mask.sum(), (new == orig).sum(), (~is_mask & (new != orig)).sum()]
        )
        # Outside the used slots' positions nothing changed.
        touched = torch.zeros_like(ids).scatter_add(1, m.positions, used.long()) > 0
        assert torch.equal(m.input_ids[~touched], ids[~touched])
    frac = (counts / counts.sum()).tolist()
    # A random id equals the original 1% of the time, which moves ~0.1% from "random" to "keep".
    # Each share within 5 binomial standard deviations over the slots counted.
    n = int(counts.sum())
    for share, p in zip(frac, (0.8, 0.101, 0.099), strict=True):
        assert share == pytest.approx(p, abs=binomial_bound(p, n))


def test_default_split_is_official_85_15_0(special):
    torch.manual_seed(1)
    ids, _, attention = random_batch(special, b=256)
    cfg = ObjectiveConfig()
    m = mask_tokens(ids, attention, special, cfg, cfg.num_predictions(40), vocab_size=100)
    used = m.weights.bool()
    new = m.input_ids.gather(1, m.positions)[used]
    assert ((new == special.mask) | (new == m.targets[used])).all()  # never a random token
    within = binomial_bound(0.85, len(new))  # 5 standard deviations over the used slots
    assert (new == special.mask).float().mean().item() == pytest.approx(0.85, abs=within)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_generator_sampling_is_an_exact_categorical_sample(temperature):
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    logits = probs.log().expand(200_000, 2, 5).to(torch.bfloat16)  # [rows, slots, vocab]
    samples = sample_tokens(logits, temperature)
    assert samples.shape == (200_000, 2) and samples.dtype == torch.int64
    freq = torch.bincount(samples.flatten(), minlength=5).float() / samples.numel()
    # of the bf16 logits as drawn from; each frequency within 5 binomial standard deviations
    expected = torch.softmax(logits[0, 0].float() / temperature, -1)
    within = 5 * (expected * (1 - expected) / samples.numel()).sqrt()
    assert ((freq - expected).abs() <= within).all()
    assert freq[4] == 0  # a token of probability zero is never drawn


def test_two_level_sampling_across_blocks():
    """Blocks of 256 over a vocabulary of 1,000 (a short last block): mass on both sides of block
    edges, zeros at the edges and at the end, and whole blocks of zero probability."""
    torch.manual_seed(0)
    weights = torch.zeros(1000)
    weights[[0, 254, 257, 300, 511, 512, 768, 998]] = torch.tensor([1, 2, 3, 1, 2, 4, 1, 2.0])
    weights[600:700] = 0.01
    probs = weights / weights.sum()
    samples = sample_categorical(probs.expand(100_000, 1000) * 3.0)  # any positive total
    freq = torch.bincount(samples, minlength=1000).float() / samples.numel()
    # each frequency within 5 binomial standard deviations of its probability (and float32's
    # rounding of the probabilities' sums over 1,000 ids)
    within = 5 * (probs * (1 - probs) / samples.numel()).sqrt()
    assert ((freq - probs).abs() <= within + rounding_bound(torch.float32, 1000)).all()
    assert freq[probs == 0].sum() == 0  # zero-probability tokens are never drawn


def test_masked_lm_loss_matches_cross_entropy():
    """Loss, gradient and accuracy against PyTorch's cross-entropy and argmax, with unused slots."""
    torch.manual_seed(0)
    logits = (torch.randn(4, 6, 50) * 3).requires_grad_()
    targets = torch.randint(0, 50, (4, 6))
    targets[0, :3] = logits[0, :3].argmax(-1)  # some right answers
    weights = (torch.rand(4, 6) > 0.3).float()
    loss, acc, probs = masked_lm_loss(logits, targets, weights)
    assert_same_computation(probs, torch.softmax(logits.detach(), -1), terms=50)
    loss.backward()
    ours = logits.grad.clone()
    logits.grad = None
    nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    expected = (nll * weights.flatten()).sum() / weights.sum()
    expected.backward()
    # the log-softmax over 50 ids and the weighted mean, in the logits' size; the gradient the
    # softmax, a difference and the weights' division
    assert loss.item() == pytest.approx(
        expected.item(), abs=rounding_bound(torch.float32, 50, 2, logits.abs().max().item())
    )
    assert_same_computation(ours, logits.grad, terms=50, depth=3)
    hit = (logits.argmax(-1) == targets).float()
    assert acc.item() == pytest.approx(((hit * weights).sum() / weights.sum()).item())


def test_discriminator_loss_sends_no_gradient_into_the_generator(
    tiny_model, objective_cfg, special
):
    torch.manual_seed(0)
    ids, types, attention = random_batch(special, b=8)
    objective_cfg.gen_weight = 0.0  # the loss is now 50 * RTD alone
    obj = build_objective(tiny_model, objective_cfg, special, seq_len=40)
    obj(ids, types, attention).loss.backward()
    shared = {id(p) for p in obj.discriminator.parameters()}
    gen_only = [(n, p) for n, p in obj.generator.named_parameters() if id(p) not in shared]
    assert gen_only
    for name, p in gen_only:
        assert p.grad is None or torch.count_nonzero(p.grad) == 0, name
    assert torch.count_nonzero(obj.discriminator.discriminator_predictions.dense.weight.grad) > 0

    # With the RTD weight at zero instead, the MLM loss does train the generator.
    objective_cfg.gen_weight, objective_cfg.disc_weight = 1.0, 0.0
    obj = build_objective(tiny_model, objective_cfg, special, seq_len=40)
    obj(ids, types, attention).loss.backward()
    assert torch.count_nonzero(obj.generator.generator_lm_head.bias.grad) > 0
    assert torch.count_nonzero(obj.generator.electra.encoder.layer[0].output.dense.weight.grad) > 0


def test_sample_equal_to_original_is_labelled_original(special):
    torch.manual_seed(0)
    ids, _, attention = random_batch(special, b=8)
    cfg = ObjectiveConfig()
    m = mask_tokens(ids, attention, special, cfg, cfg.num_predictions(40), vocab_size=100)
    # A generator that samples every original back: nothing is replaced.
    corrupted, labels = replace_tokens(ids, attention, m, m.targets.clone())
    assert torch.equal(corrupted, ids) and not labels.any()
    # Change one sample in each row's first slot: exactly those positions are labelled replaced.
    sampled = m.targets.clone()
    sampled[:, 0] = (sampled[:, 0] - 5 + 1) % 95 + 5  # another ordinary token
    corrupted, labels = replace_tokens(ids, attention, m, sampled)
    assert labels.sum() == 8
    assert labels.gather(1, m.positions[:, :1]).all()
    # A sample in an unused slot (weight 0) changes nothing.
    unused = m.weights == 0
    if unused.any():
        sampled = m.targets.masked_fill(unused, 7)
        assert torch.equal(replace_tokens(ids, attention, m, sampled)[0], ids)


def test_labels_mark_exactly_the_changed_real_tokens(tiny_model, objective_cfg, special):
    torch.manual_seed(0)
    obj = build_objective(tiny_model, objective_cfg, special, seq_len=40)
    ids, types, attention = random_batch(special, b=16)
    out = obj(ids, types, attention)
    _, d = obj.detect(ids, types, attention)
    labels = d.labels
    assert not labels[attention == 0].any()
    n = attention.sum(1)
    # At most round(0.15 * n) tokens per row can be replaced; an untrained generator replaces most.
    assert (labels.sum(1) <= torch.round(n * 0.15).clamp(1, 6)).all()
    assert labels.sum() > 0.5 * torch.round(n * 0.15).clamp(1, 6).sum()
    expected = objective_cfg.gen_weight * out.stats["mlm_loss"] + 50 * out.stats["disc_loss"]
    # two products and a sum of the same two positive losses
    assert out.loss.item() == pytest.approx(
        expected.item(), rel=rounding_bound(torch.float32, 2, 2)
    )


def test_mlm_baseline_objective(tiny_model, special):
    torch.manual_seed(0)
    cfg = ObjectiveConfig(name="mlm", mask_frac=0.8, keep_frac=0.1, random_frac=0.1)
    obj = build_objective(tiny_model, cfg, special, seq_len=40)
    assert set(obj.models()) == {"mlm"}
    ids, types, attention = random_batch(special, b=8)
    out = obj(ids, types, attention)
    assert out.loss.item() == pytest.approx(torch.log(torch.tensor(100.0)).item(), rel=0.1)
    out.loss.backward()
    assert obj.mlm.generator_lm_head.bias.grad is not None
