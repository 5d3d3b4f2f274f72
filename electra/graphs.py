"""The whole training step as one CUDA graph (`train.cuda_graph`): forward, backward, clipping
and the optimizer captured once and replayed at every step.

A small model on a GPU is bound by kernel launches, not arithmetic: ELECTRA-Small's step is
hundreds of short kernels over two thin networks, and the host cannot issue them as fast as the
GPU runs them. A replay issues them all at once. torch.compile's `reduce-overhead` mode graphs
the forward and the backward but leaves the optimizer and clipping to the host; this captures
those too, so a step costs the host one launch and a few copies.

What makes the step capturable, and what this relies on: no host sync in it
(`tests/test_host_syncs.py` counts them for every objective); static shapes (pretraining batches
always are, and the masked slots are a fixed count); a fused Adam(W) whose LR is a device tensor
and whose step count does not change on the host (`electra.optim.make_capturable`,
`AdamWNoBiasCorrection`); and a step that skips a non-finite update on the device. The random
draws (masking, sampling, dropout) come from the graph-safe CUDA generator: a replay after
`torch.manual_seed(s)` draws what an eager step after the same seed draws.

Conditions, checked by `check_graphable` before a run writes anything: a CUDA device, one
process, one micro-batch per step (its seed is set before the replay), and a torch.compile mode
that makes no CUDA graphs of its own. An objective whose step changes with the schedule
(`Objective.graph_key`: two_stage's switch, adversarial's warm start) is captured again when it
changes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch

from electra.config import TrainConfig
from electra.distributed import World
from electra.errors import ElectraError
from electra.objectives import StepOutput
from electra.optim import make_capturable
from electra.step import Window, apply_update, forward_backward, train_step

# Eager steps before a capture, run as the capture will run the step: the first compiles (under
# --compile) the forward and the backward; the rest let lazily created state (optimizer moments,
# library workspaces) settle.
WARMUP_STEPS = 3


def check_graphable(cfg: TrainConfig, device: torch.device, world: World) -> None:
    """Refuses a `train.cuda_graph` run that cannot be captured, with one line naming the field."""
    if not cfg.cuda_graph:
        return
    if device.type != "cuda":
        raise ElectraError(
            f"train.cuda_graph captures the step on a CUDA GPU, but this run is on {device}: "
            "turn train.cuda_graph off"
        )
    if world.distributed:
        raise ElectraError(
            "train.cuda_graph runs in one process: turn it off under torchrun "
            f"({world.world_size} processes)"
        )


class GraphedTrainStep:
    """`train_step` with the same arguments, run eagerly `WARMUP_STEPS` times and then captured
    and replayed. Each replay copies the batch into the captured input buffers, seeds the RNG and
    adds the captured outputs to the window."""

    def __init__(
        self,
        step_fn: Callable[..., StepOutput],
        optimizer: torch.optim.Optimizer,
        params: list[torch.nn.Parameter],
        cfg: TrainConfig,
        device: torch.device,
        graph_key: Callable[[], Hashable] = lambda: None,
    ) -> None:
        make_capturable(optimizer, device)
        self.step_fn, self.optimizer, self.params, self.cfg = step_fn, optimizer, params, cfg
        self.graph_key = graph_key
        self.stream = torch.cuda.Stream(device)  # warm-up and capture run on a side stream
        self.graph: torch.cuda.CUDAGraph | None = None
        self.key: Hashable = graph_key()
        self.warm = 0

    def __call__(
        self,
        micro_batches: list[dict[str, torch.Tensor]],
        window: Window,
        seeds: list[int] | None = None,
    ) -> torch.Tensor:
        if len(micro_batches) != 1:
            raise ValueError("a captured step takes one micro-batch")
        key = self.graph_key()
        if key != self.key:  # the objective changed what its step computes: capture it anew
            self.key, self.graph, self.warm = key, None, 0
            self.optimizer.zero_grad(set_to_none=True)  # drop the old graph's gradient buffers
        if self.graph is None and self.warm < WARMUP_STEPS:
            self.warm += 1
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                # As the capture will run it: torch.compile guards on autocast's cache setting,
                # and a recompilation inside a capture fails.
                skipped = train_step(
                    self.step_fn,
                    self.optimizer,
                    self.params,
                    micro_batches,
                    self.cfg,
                    window,
                    seeds,
                    cache_casts=False,
                )
            torch.cuda.current_stream().wait_stream(self.stream)
            return skipped
        if self.graph is None:
            self._capture(micro_batches[0])
        for name, buffer in self.inputs.items():
            buffer.copy_(micro_batches[0][name], non_blocking=True)
        if seeds is not None:
            torch.manual_seed(seeds[0])
        self.graph.replay()
        for out in self.outs:
            window.add(out)
        window.end_step(self.grad_norm, self.skipped)
        return self.skipped

    def _capture(self, batch: dict[str, torch.Tensor]) -> None:
        """Records one step over input buffers shaped like `batch`. The gradients are set to
        None first, so that the captured backward allocates them in the graph's memory, at
        addresses every replay writes again (nothing accumulates across replays)."""
        self.inputs = {name: t.clone() for name, t in batch.items()}
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            self.outs, bad = forward_backward(
                self.step_fn, [self.inputs], self.cfg.precision, cache_casts=False
            )
            self.grad_norm, self.skipped = apply_update(
                self.optimizer, self.params, self.cfg.clip_norm, bad
            )
        self.graph = graph
