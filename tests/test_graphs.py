"""The whole-step CUDA graph (`train.cuda_graph`, electra.graphs): refused where it cannot run,
and on a GPU, replays that train exactly as eager steps do, through every objective's schedule."""

from __future__ import annotations

import functools

import pytest
import torch

from electra.config import ObjectiveConfig, TrainConfig
from electra.distributed import World
from electra.errors import ElectraError
from electra.graphs import GraphedTrainStep, check_graphable
from electra.objectives import OBJECTIVES, build_objective
from electra.optim import build_optimizer, learning_rate, param_groups, set_learning_rate
from electra.step import Window, train_step
from electra.tokenizer import SpecialIds

from .conftest import tiny_model_config

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA GPU: the captured step is checked on the GPU machine "
    "(benchmarks/gpu_session.sh speed)",
)


def test_settings_that_cannot_be_captured_are_refused():
    with pytest.raises(ElectraError, match="train.grad_accum=1"):
        TrainConfig(cuda_graph=True, grad_accum=2)
    for mode in ("reduce-overhead", "max-autotune"):
        with pytest.raises(ElectraError, match="train.compile_mode=default"):
            TrainConfig(cuda_graph=True, compile=True, compile_mode=mode)
    TrainConfig(cuda_graph=True, compile=True, compile_mode="max-autotune-no-cudagraphs")
    TrainConfig(
        cuda_graph=True, compile_mode="reduce-overhead"
    )  # not compiled: no graphs of its own


def test_a_captured_step_needs_one_gpu_process():
    cfg = TrainConfig(cuda_graph=True)
    with pytest.raises(ElectraError, match="on cpu: turn train.cuda_graph off"):
        check_graphable(cfg, torch.device("cpu"), World(rank=0, world_size=1, local_rank=0))
    with pytest.raises(ElectraError, match="under torchrun"):
        check_graphable(cfg, torch.device("cuda"), World(rank=0, world_size=2, local_rank=0))
    check_graphable(TrainConfig(), torch.device("cpu"), World(rank=0, world_size=1, local_rank=0))


def _batches(steps: int, vocab: int, b: int = 8, t: int = 40):
    """Random rows of real tokens between [CLS] and [SEP], a few padded, on the GPU."""
    g = torch.Generator().manual_seed(7)
    out = []
    for _ in range(steps):
        ids = torch.randint(5, vocab, (b, t), generator=g)
        lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
        attention = (torch.arange(t)[None, :] < lengths[:, None]).long()
        ids[:, 0] = 2
        ids[torch.arange(b), lengths - 1] = 3
        ids = ids * attention
        out.append(
            {
                "input_ids": ids.cuda(),
                "token_type_ids": torch.zeros_like(ids).cuda(),
                "attention_mask": attention.cuda(),
            }
        )
    return out


def _train(name: str, graphed: bool, steps: int, precision: str, compile: bool = False):
    """`steps` steps of objective `name` (its switches at step 5), eager or captured, with the
    LR schedule moving every step and a seed per step; returns the weights and the window."""
    sizes = {"sharing": "none", "generator_hidden_fraction": 1.0} if name == "two_stage" else {}
    cfg = ObjectiveConfig(
        name=name,
        **{"generator_hidden_fraction": 0.25, **sizes},
        two_stage_steps=5,
        adversarial_mlm_steps=5,
    )
    device = torch.device("cuda")
    torch.manual_seed(0)
    special = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
    objective = build_objective(tiny_model_config(), cfg, special, seq_len=40)
    objective.to(device).train()
    train = TrainConfig(precision=precision, cuda_graph=graphed, compile=compile, steps=steps)
    optimizer = build_optimizer(
        param_groups(objective, 0.01, by_network=objective.staged), train, device
    )
    params = [p for p in objective.parameters() if p.requires_grad]
    step_fn = torch.compile(objective) if compile else objective
    if graphed:
        run = GraphedTrainStep(step_fn, optimizer, params, train, device, objective.graph_key)
    else:
        run = functools.partial(train_step, step_fn, optimizer, params, cfg=train)
    window = Window()
    for step, batch in enumerate(_batches(steps, tiny_model_config().vocab_size)):
        set_learning_rate(optimizer, learning_rate(step, 1e-3, steps, 3))
        objective.begin_step(step)
        run([batch], window=window, seeds=[1000 + step])
    if graphed:
        assert run.graph is not None  # the last steps were replays
    weights = {k: v.detach().float().cpu() for k, v in objective.state_dict().items()}
    return weights, window.summary()


@needs_cuda
@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_replays_train_as_eager_steps_do(name):
    """12 steps: 3 eager, a capture and replays, and for two_stage and adversarial a switch at
    step 5 that captures the step anew. In fp32 the replays draw the same random numbers as the
    eager steps, so the weights agree to rounding (atomic adds may order sums differently)."""
    eager, eager_stats = _train(name, graphed=False, steps=12, precision="fp32")
    graphed, graphed_stats = _train(name, graphed=True, steps=12, precision="fp32")
    for key, value in eager.items():
        assert torch.allclose(graphed[key], value, rtol=1e-4, atol=1e-5), key
    assert graphed_stats["loss"] == pytest.approx(eager_stats["loss"], rel=1e-4)
    if "disc_auc" in eager_stats:
        assert graphed_stats["disc_auc"] == pytest.approx(eager_stats["disc_auc"], abs=1e-3)


@needs_cuda
@pytest.mark.parametrize("compile", [False, True])
def test_replays_in_bf16_and_compiled(compile):
    eager, _ = _train("electra", graphed=False, steps=8, precision="bf16", compile=compile)
    graphed, _ = _train("electra", graphed=True, steps=8, precision="bf16", compile=compile)
    for key, value in eager.items():
        assert torch.allclose(graphed[key], value, rtol=1e-3, atol=1e-4), key
