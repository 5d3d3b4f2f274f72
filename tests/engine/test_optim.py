"""The official optimizer, its parameter groups and the LR schedule
(docs/specification.md §Optimizer)."""

from __future__ import annotations

import math

import pytest
import torch

from electra.config import TrainConfig
from electra.engine.optim import (
    PINNED_STEP,
    AdamWNoBiasCorrection,
    build_optimizer,
    learning_rate,
    make_capturable,
    param_groups,
    set_learning_rate,
)
from electra.objectives import build_objective

from ..numerics import assert_same_computation

pytestmark = pytest.mark.numeric


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(7, 5, generator=g).requires_grad_(),
        torch.randn(5, generator=g).requires_grad_(),
    ]


def _grads(step):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(7, 5, generator=g), torch.randn(5, generator=g)]


def _run(opt, params, steps, start=0, lrs=None):
    for t in range(start, start + steps):
        for p, g in zip(params, _grads(t), strict=True):
            p.grad = g.clone()
        set_learning_rate(opt, lrs[t])
        opt.step()


def test_official_adam_is_the_bert_update():
    """p -= lr * (m / (sqrt(v) + eps) + wd * p) with no bias correction, against that formula in
    float64, with the LR changing every step and a layer-wise LR scale on one group."""
    params = _params()
    cfg = TrainConfig(lr=1e-2, weight_decay=0.1, adam_eps=1e-6)
    groups = [
        {"params": [params[0]], "weight_decay": 0.1},
        {"params": [params[1]], "weight_decay": 0.0, "lr_scale": 0.5},
    ]
    opt = build_optimizer(groups, cfg, torch.device("cpu"))
    assert isinstance(opt, AdamWNoBiasCorrection)  # the default
    lrs = [1e-2 * (t + 1) / 6 for t in range(6)]
    ref = [p.detach().double().clone() for p in _params()]
    m = [torch.zeros_like(p) for p in ref]
    v = [torch.zeros_like(p) for p in ref]
    for t in range(6):
        for i, (p, g) in enumerate(zip(ref, _grads(t), strict=True)):
            g = g.double()
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            wd, scale = (0.1, 1.0) if i == 0 else (0.0, 0.5)
            p -= lrs[t] * scale * (m[i] / (v[i].sqrt() + 1e-6) + wd * p)
    _run(opt, params, 6, lrs=lrs)
    # no sums, a chain of elementwise roundings in float32: per step the two moments (2 each),
    # the square root, eps, the quotient, the decay term, the LR's product and the update (9)
    for p, r in zip(params, ref, strict=True):
        assert_same_computation(p.double(), r, terms=1, depth=6 * 9, dtype=torch.float32)


def test_official_adam_takes_larger_first_steps_than_torch_adamw():
    """Without bias correction the first update is (1 - beta1) / sqrt(1 - beta2) = 3.16 times
    torch's, whose first step moves each weight by lr."""
    moved = {}
    for correct in (False, True):
        params = _params()
        opt = build_optimizer(
            [{"params": params, "weight_decay": 0.0}],
            TrainConfig(lr=1e-3, bias_correction=correct),
            torch.device("cpu"),
        )
        before = [p.detach().clone() for p in params]
        _run(opt, params, 1, lrs=[1e-3])
        moved[correct] = (params[0].detach() - before[0]).abs().mean().item()
    # Not two computations of one number: each weight moves lr * |g| / (|g| + eps), short of
    # lr by eps / |g| (about 1e-6 for gradients of size 1; 1e-4 for the smallest of these 35)
    # and by the rounding of the weight (u |p| / lr, about 1e-4): within 1e-3 of it.
    assert moved[True] == pytest.approx(1e-3, rel=1e-3)
    assert moved[False] == pytest.approx(1e-3 * 0.1 / math.sqrt(0.001), rel=1e-3)


@pytest.mark.parametrize("counted", [False, True])
def test_official_adam_resumes_exactly(counted):
    """Stopped after 3 steps and resumed, 6 steps in all: the weights of 6 uninterrupted steps. With
    `counted`, the saved state is as earlier versions wrote it (a step count per parameter and
    the groups' `official_steps`): it is pinned on loading and continues the same."""
    lrs = [1e-3] * 6
    whole = _params()
    opt = build_optimizer(
        [{"params": whole, "weight_decay": 0.01}], TrainConfig(), torch.device("cpu")
    )
    _run(opt, whole, 6, lrs=lrs)

    parts = _params()
    first = build_optimizer(
        [{"params": parts, "weight_decay": 0.01}], TrainConfig(), torch.device("cpu")
    )
    _run(first, parts, 3, lrs=lrs)
    state = first.state_dict()
    if counted:
        for saved in state["state"].values():
            saved["step"] = torch.tensor(3.0)
        state["param_groups"][0]["official_steps"] = 3
    second = build_optimizer(
        [{"params": parts, "weight_decay": 0.01}], TrainConfig(), torch.device("cpu")
    )
    second.load_state_dict(state)
    assert "official_steps" not in second.param_groups[0]
    _run(second, parts, 3, start=3, lrs=lrs)
    for a, b in zip(whole, parts, strict=True):
        assert torch.equal(a, b)


def test_schedule_decays_from_step_zero_times_the_warmup_ramp():
    assert learning_rate(0, 1e-3, 100, 10) == 0.0
    assert learning_rate(5, 1e-3, 100, 10) == pytest.approx(1e-3 * 0.95 * 0.5)
    assert learning_rate(10, 1e-3, 100, 10) == pytest.approx(1e-3 * 0.9)  # not the peak
    assert learning_rate(100, 1e-3, 100, 10) == 0.0
    assert learning_rate(3, 1e-3, 100, 0) == pytest.approx(1e-3 * 0.97)


def test_param_groups_follow_the_official_names(tiny_model, objective_cfg, special):
    obj = build_objective(tiny_model, objective_cfg, special, seq_len=40)
    names = {id(p): n for n, p in obj.named_parameters()}
    # With by_network, one decayed and one not decayed group per network (each counts its steps).
    networks = [
        {names[id(p)].split(".")[0] for p in g["params"]} for g in param_groups(obj, 0.01, True)
    ]
    assert sorted(map(sorted, networks)) == [["discriminator"]] * 2 + [["generator"]] * 2
    groups = param_groups(obj, 0.01)
    assert len(groups) == 2  # the layout checkpoints of earlier runs hold
    kept = [p for g in groups if g["weight_decay"] == 0.0 for p in g["params"]]
    decayed = [p for g in groups if g["weight_decay"] == 0.01 for p in g["params"]]
    kept_names = {names[id(p)] for p in kept}
    decayed_names = {names[id(p)] for p in decayed}
    assert all("LayerNorm" in n or n.endswith("bias") for n in kept_names)
    assert "generator.generator_lm_head.bias" in kept_names
    table = obj.discriminator.electra.embeddings.word_embeddings.weight  # shared, and decayed
    assert any(p is table for p in decayed) and not decayed_names & kept_names
    assert len(decayed) + len(kept) == len(list(obj.parameters()))


def test_the_generators_own_parameters_train_at_their_scale(tiny_model, objective_cfg, special):
    """train.generator_lr_scale: the generator's layers and head at lr x scale; the embeddings it
    shares with the discriminator at lr, as the discriminator's own; scale 1 changes nothing."""
    obj = build_objective(tiny_model, objective_cfg, special, seq_len=40)
    assert param_groups(obj, 0.01, lr_scales={"generator": 1.0}) == param_groups(obj, 0.01)
    groups = param_groups(obj, 0.01, lr_scales={"generator": 10.0})
    opt = build_optimizer(groups, TrainConfig(), torch.device("cpu"))
    set_learning_rate(opt, 2e-4)
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    own = {id(p) for p in obj.generator.parameters()} - {
        id(p) for p in obj.discriminator.parameters()
    }
    table = obj.discriminator.electra.embeddings.word_embeddings.weight
    assert own and id(table) not in own  # the word table is shared (sharing "embeddings")
    for n, p in obj.named_parameters():
        assert lr_of[id(p)] == pytest.approx(2e-3 if id(p) in own else 2e-4), n
    assert len(lr_of) == len(list(obj.parameters()))


def test_a_group_that_starts_late_takes_the_official_first_step():
    """two_stage trains the discriminator from step n: its groups count their own steps, so its
    first update is the official first update, (1 - b1) / sqrt(1 - b2) = 3.16 lr per weight."""
    early, late = _params(0), _params(1)
    opt = build_optimizer(
        [{"params": early, "weight_decay": 0.0}, {"params": late, "weight_decay": 0.0}],
        TrainConfig(lr=1e-3),
        torch.device("cpu"),
    )
    for t in range(5):
        for p, g in zip(early, _grads(t), strict=True):
            p.grad = g.clone()
        opt.step()  # `late` has no gradient yet and is left alone
    before = [p.detach().clone() for p in late]
    assert all(not opt.state[p] for p in late)  # no state before its first gradient
    for p, g in zip(early + late, _grads(5) + _grads(6), strict=True):
        p.grad = g.clone()
    opt.step()
    for p, b, g in zip(late, before, _grads(6), strict=True):
        moved = (b - p.detach()) / 1e-3
        want = 0.1 * g / (math.sqrt(0.001) * g.abs() + 1e-6)
        # the update's few roundings, and the weight's own (b - p, at the weights' size, over
        # the LR), the larger
        size = b.abs().max().item() / 1e-3
        assert_same_computation(moved, want, terms=1, depth=5, scale=size)


def test_the_step_count_stays_pinned_through_skipped_steps():
    """The count sits where torch's bias corrections are exactly 1 and never moves, also when the
    fused kernel skips a step for a non-finite gradient (and leaves the weights alone)."""
    params = _params()
    opt = build_optimizer(
        [{"params": params, "weight_decay": 0.01}], TrainConfig(), torch.device("cpu")
    )
    _run(opt, params, 3, lrs=[1e-3] * 3)
    before = [p.detach().clone() for p in params]
    opt.found_inf = torch.ones(())
    _run(opt, params, 1, start=3, lrs=[1e-3] * 4)
    assert all(torch.equal(a, b) for a, b in zip(params, before, strict=True))
    assert all(opt.state[p]["step"].item() == PINNED_STEP for p in params)


def test_a_capturable_optimizer_keeps_its_lr_on_the_device_and_checkpoints_plain():
    """make_capturable moves the LR into a tensor that set_learning_rate writes in place (a
    captured step reads it there); the state it saves is the plain optimizer's, a float LR."""
    params = _params()
    opt = build_optimizer(
        [{"params": params, "weight_decay": 0.01, "lr_scale": 0.5}],
        TrainConfig(),
        torch.device("cpu"),
    )
    make_capturable(opt, torch.device("cpu"))
    lr = opt.param_groups[0]["lr"]
    set_learning_rate(opt, 2e-3)
    assert opt.param_groups[0]["lr"] is lr and lr.item() == pytest.approx(1e-3)
    saved = opt.state_dict()["param_groups"][0]
    assert saved["lr"] == pytest.approx(1e-3) and isinstance(saved["lr"], float)
    assert saved["capturable"] is False
    assert opt.param_groups[0]["capturable"] is True  # the live optimizer is unchanged


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan")])
def test_a_generator_scale_that_is_not_a_positive_number_is_refused(scale):
    from electra.errors import ElectraError

    with pytest.raises(ElectraError, match="train.generator_lr_scale must be a positive number"):
        TrainConfig(generator_lr_scale=scale)
