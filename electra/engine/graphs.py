"""CUDA graphs: the whole training step (`train.cuda_graph`, `finetune --cuda-graph`), and
fine-tuning's prediction, captured once per input shape and replayed.

A small model on a GPU is bound by kernel launches, not arithmetic: ELECTRA-Small's step is
hundreds of short kernels over two thin networks, and the host cannot issue them as fast as the
GPU runs them. A replay issues them all at once. torch.compile's `reduce-overhead` mode graphs
the forward and the backward but leaves the optimizer and clipping to the host; this captures
those too, so a step costs the host one launch and a few copies.

What makes the step capturable, and what this relies on: no host sync in it
(`tests/engine/test_host_syncs.py` counts them for every objective and fine-tuning task); static shapes
(pretraining batches always are, and the masked slots are a fixed count; fine-tuning pads its
batches to a few widths, `electra.finetuning.inference.trim`, and one graph is captured per shape); a fused
Adam(W) whose LR is a device tensor and whose step count does not change on the host
(`electra.engine.optim.make_capturable`, `AdamWNoBiasCorrection`); and a step that skips a non-finite
update on the device. The random draws (masking, sampling, dropout) come from the graph-safe CUDA
generator: a replay after `torch.manual_seed(s)` draws what an eager step after the same seed
draws.

Conditions, checked by `check_graphable` before a run writes anything: a CUDA device, one
process, one micro-batch per step (its seed is set before the replay), and a torch.compile mode
that makes no CUDA graphs of its own. An objective whose step changes with the schedule
(`Objective.graph_key`: two_stage's switch, adversarial's warm start) is captured again when it
changes.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable
from typing import Any

import torch

from electra.config import RuntimeConfig
from electra.engine.distributed import World
from electra.engine.optim import make_capturable
from electra.engine.step import Window, apply_update, forward_backward
from electra.errors import ElectraError
from electra.objectives import StepOutput

# Eager calls at each input shape before its capture, run as the capture will run them: the
# first compiles (under --compile) the forward and the backward; the rest let lazily created
# state (optimizer moments, library workspaces) settle.
WARMUP_STEPS = 3

Batch = dict[str, torch.Tensor]


def check_graphable(cfg: RuntimeConfig, device: torch.device, world: World | None = None) -> None:
    """Refuses a `cuda_graph` run that cannot be captured, with one line naming the field."""
    if not cfg.cuda_graph:
        return
    field = f"{cfg.section}cuda_graph"
    if device.type != "cuda":
        raise ElectraError(
            f"{field} captures the step on a CUDA GPU, but this run is on {device}: "
            f"turn {field} off"
        )
    if world is not None and world.distributed:
        raise ElectraError(
            f"{field} runs in one process: turn it off under torchrun "
            f"({world.world_size} processes)"
        )


class ShapeGraphs:
    """`fn(batch)` run eagerly for its first `warmup` calls at each input shape (on a side
    stream, as a capture runs), then captured as a CUDA graph of that shape and replayed: the
    host copies the batch into the graph's input buffers and issues one launch. On another
    device every call runs `fn` as it is (so what feeds it static shapes is tested on CPU).

    A replay returns the graph's own output tensors, valid until the next call of any shape:
    all graphs share one memory pool, so that a few shapes cost little more memory than one,
    and a graph captured later may hold its outputs, or use as scratch, memory an earlier graph
    writes. Callers use a replay's outputs at once (the window adds them, prediction clones
    them), queued on the stream before the next replay. `before_eager` runs before every eager
    call and capture (the training step drops the gradient buffers a replay left in `.grad`,
    which an eager backward would add to)."""

    def __init__(
        self,
        fn: Callable[[Batch], Any],
        device: torch.device,
        warmup: int = WARMUP_STEPS,
        before_eager: Callable[[], None] = lambda: None,
    ) -> None:
        self.fn, self.warmup, self.before_eager = fn, warmup, before_eager
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.reset()

    def reset(self) -> None:
        """Forgets every graph (their memory goes back to the allocator)."""
        self.graphs: dict[Hashable, tuple[torch.cuda.CUDAGraph, Batch, Any]] = {}
        self.calls: collections.Counter[Hashable] = collections.Counter()  # by input shape
        self.pool = None

    def __call__(self, batch: Batch, seed: int | None = None) -> Any:
        """`fn(batch)` or its replay, after `torch.manual_seed(seed)` where a seed is given."""
        shape = tuple((name, t.shape, t.dtype) for name, t in batch.items())
        self.calls[shape] += 1
        if self.stream is None:
            _seed(seed)
            return self.fn(batch)
        if shape not in self.graphs:
            self.before_eager()
            # Each way round, so that memory freed on one stream is not reused on the other
            # while a kernel there may still read it.
            self.stream.wait_stream(torch.cuda.current_stream())
            try:
                with torch.cuda.stream(self.stream):
                    if self.calls[shape] <= self.warmup:
                        _seed(seed)
                        return self.fn(batch)
                    self.graphs[shape] = self._capture(batch)
            finally:
                torch.cuda.current_stream().wait_stream(self.stream)
        graph, inputs, outputs = self.graphs[shape]
        for name, buffer in inputs.items():
            buffer.copy_(batch[name], non_blocking=True)
        _seed(seed)
        graph.replay()
        return outputs

    def _capture(self, batch: Batch) -> tuple[torch.cuda.CUDAGraph, Batch, Any]:
        inputs = {name: t.clone() for name, t in batch.items()}
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            outputs = self.fn(inputs)
        self.pool = graph.pool()
        return graph, inputs, outputs


def _seed(seed: int | None) -> None:
    if seed is not None:
        torch.manual_seed(seed)


class GraphedTrainStep:
    """`electra.engine.step.train_step` with the same arguments, each input shape's step run eagerly
    `WARMUP_STEPS` times and then captured and replayed (`ShapeGraphs`): forward, backward,
    clipping and the optimizer. Each replay copies the batch into the captured input buffers,
    seeds the RNG and adds the captured outputs to the window."""

    def __init__(
        self,
        step_fn: Callable[..., StepOutput],
        optimizer: torch.optim.Optimizer,
        params: list[torch.nn.Parameter],
        device: torch.device,
        *,
        precision: str,
        clip_norm: float,
        graph_key: Callable[[], Hashable] = lambda: None,
    ) -> None:
        if device.type != "cuda":
            raise ValueError(f"a captured step runs on a CUDA GPU, not on {device}")
        make_capturable(optimizer, device)
        self.step_fn, self.optimizer, self.params = step_fn, optimizer, params
        self.precision, self.clip_norm = precision, clip_norm
        self.graph_key = graph_key
        self.key: Hashable = graph_key()
        # A backward adds to `.grad`; the capture must allocate the gradients in its own memory,
        # at addresses every replay writes again, and an eager step must not add to a replay's.
        self.graphs = ShapeGraphs(
            self._update, device, before_eager=lambda: optimizer.zero_grad(set_to_none=True)
        )

    def _update(self, batch: Batch) -> tuple[list[StepOutput], torch.Tensor, torch.Tensor]:
        # Autocast's cache stays off, eager as captured: torch.compile guards on that setting,
        # and a recompilation inside a capture fails.
        outs, bad = forward_backward(self.step_fn, [batch], self.precision, cache_casts=False)
        grad_norm, skipped = apply_update(self.optimizer, self.params, self.clip_norm, bad)
        return outs, grad_norm, skipped

    @property
    def captured(self) -> int:
        """How many shapes' steps are captured."""
        return len(self.graphs.graphs)

    def __call__(
        self, micro_batches: list[Batch], window: Window, seeds: list[int] | None = None
    ) -> torch.Tensor:
        if len(micro_batches) != 1:
            raise ValueError("a captured step takes one micro-batch")
        key = self.graph_key()
        if key != self.key:  # the objective changed what its step computes: capture it anew
            self.key = key
            self.graphs.reset()
        outs, grad_norm, skipped = self.graphs(micro_batches[0], seeds[0] if seeds else None)
        for out in outs:
            window.add(out)
        window.end_step(grad_norm, skipped)
        return skipped
