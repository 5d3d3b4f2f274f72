"""Inference over a task's encoded examples: batches of similar lengths, each trimmed to its longest
row, on the runtime's device and precision, captured as CUDA graphs where asked. What `evaluate`,
`predict` and fine-tuning's dev scoring run; the training loop trims its batches here too."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from electra.engine.runtime import Runtime, inference_function, to_device
from electra.tasks.base import Batch, Encoded, Task


def trim(batch: Batch, static: bool = False, multiple: int = 8) -> Batch:
    """Cuts padding columns that no row in the batch uses, before the batch goes to the device:
    short GLUE sentences need not pay for max_seq_len. The width kept is a multiple of `multiple`
    (8; prediction on a CPU takes 1, as aligned widths buy nothing there and SST-2's sentences
    average 16 tokens), or with `static` a power of two from 32 (or the whole width), so that
    captured steps see few shapes."""
    width = batch["attention_mask"].shape[1]
    used = int(batch["attention_mask"].sum(1).max())
    keep = max(32, 1 << (used - 1).bit_length()) if static else -(-used // multiple) * multiple
    keep = min(width, keep)
    return {k: v[:, :keep] if v.dim() > 1 and v.shape[1] == width else v for k, v in batch.items()}


def select_rows(data: Encoded, idx: torch.Tensor) -> Batch:
    """The rows `idx` of every tensor of `data`."""
    return {k: v[idx] for k, v in data.tensors.items()}


def predict(
    task: Task,
    model: nn.Module,
    examples: list,
    data: Encoded,
    runtime: Runtime,
) -> list[dict]:
    """The task's predictions for `examples` (encoded as `data`): `predict_outputs` decoded."""
    return task.decode(examples, data, predict_outputs(task, model, data, runtime))


@torch.no_grad()
def predict_outputs(
    task: Task,
    model: nn.Module,
    data: Encoded,
    runtime: Runtime,
    batch_size: int | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> Batch:
    """The task's model outputs (`Task.infer`) for the rows of `data`, in their order, on the host,
    computed on `runtime.device` in its config's precision. Batches (`batch_size` rows; unset:
    the task's own) hold rows of similar lengths (longest first, so that a too-large batch fails
    at once), each trimmed to its longest row; the outputs stay on the device until the last
    batch (read back once). `on_batch(rows)` is called after each batch (a progress bar). With
    the config's `cuda_graph` the batches take a few static shapes (`trim(static=True)`, the last
    filled up with repeated rows) and, on a GPU, each shape's forward is captured after one eager
    call (each capture synchronizes the device) and replayed (`electra.engine.runtime.inference_function`,
    `electra.engine.graphs.ShapeGraphs`)."""
    model.eval()
    device, cuda_graph = runtime.device, runtime.config.cuda_graph

    def infer(batch: Batch) -> Batch:
        with runtime.autocast(cache_casts=not cuda_graph):
            return task.infer(model, batch)

    run = inference_function(infer, runtime)
    size = batch_size or task.eval_batch_size
    multiple = 1 if device.type == "cpu" else 8  # exact widths: 15% faster on SST-2 on a CPU
    order = data.tensors["attention_mask"].sum(1).argsort(descending=True, stable=True)
    width = data.tensors["input_ids"].shape[1]
    parts: dict[str, list[torch.Tensor]] = {}
    for idx in order.split(size):
        n = len(idx)
        if cuda_graph and n < size:
            idx = torch.cat([idx, idx[:1].repeat(size - n)])
        batch = trim(select_rows(data, idx), static=cuda_graph, multiple=multiple)
        out = run(to_device(batch, device))
        for k, v in out.items():
            v = v[:n].clone()  # a replay's outputs are rewritten by the next replay
            if k in task.token_outputs:  # trimmed to the batch: pad back to the common width
                v = nn.functional.pad(v, (0, width - v.shape[1]))
            parts.setdefault(k, []).append(v)
        if on_batch is not None:
            on_batch(n)
    return {k: torch.cat(v).cpu()[order.argsort()] for k, v in parts.items()}
