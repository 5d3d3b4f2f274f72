"""The fine-tuning recipe's training loop over a task's encoded examples: layer-wise LR decay, the
official schedule, static shapes where they pay (docs/specification.md §Fine-tuning). Inference
is `electra.finetuning.inference`'s."""

from __future__ import annotations

import functools
import math
import sys

import torch
from torch import nn

from electra.engine.optim import build_optimizer, learning_rate, no_decay, set_learning_rate
from electra.engine.progress import progress_bar
from electra.engine.runtime import (
    Runtime,
    to_device,
    train_step_function,
)
from electra.engine.step import Window
from electra.finetuning.inference import select_rows, trim
from electra.finetuning.packing import pack_batch
from electra.model.family import family_of
from electra.objectives import StepOutput
from electra.tasks.base import Encoded, Task
from electra.tasks.finetune_config import FinetuneConfig


def layerwise_groups(model: nn.Module, cfg: FinetuneConfig) -> list[dict]:
    """Parameter groups with `lr_scale` = decay^(top - depth): embeddings are depth 0, encoder
    layer i is i + 1, and the task head is the top, n + 1, at the full LR. With the official
    off-by-one the encoder sits one level further down, so its top layer gets decay^2."""
    n = model.config.num_hidden_layers
    top = n + 1
    depth_of = family_of(model.config).layerwise_depth
    groups: dict[tuple[float, bool], list[nn.Parameter]] = {}
    kept = no_decay(model)  # pretraining's rule
    for name, p in model.named_parameters():
        depth = depth_of(name, n)
        exponent = top - depth + (1 if cfg.layerwise_off_by_one and depth < top else 0)
        groups.setdefault((cfg.layerwise_lr_decay**exponent, id(p) in kept), []).append(p)
    return [
        {"params": ps, "lr_scale": scale, "weight_decay": 0.0 if nd else cfg.weight_decay}
        for (scale, nd), ps in groups.items()
    ]


def task_step(task: Task, model: nn.Module, reduction: str, **batch: torch.Tensor) -> StepOutput:
    """A task's training objective as the step function of `electra.engine.step.train_step`: the loss
    to differentiate (the per-example losses summed or averaged), and their sum as a statistic."""
    losses = task.losses(model, batch)
    loss = losses.sum() if reduction == "sum" else losses.mean()
    return StepOutput(loss=loss, stats={"example_loss": losses.detach().sum()})


def train_model(
    task: Task, model: nn.Module, data: Encoded, cfg: FinetuneConfig, runtime: Runtime, seed: int
) -> list[float]:
    """Trains in place on `runtime.device`; returns the mean per-example loss of each epoch. A
    step is pretraining's (`electra.engine.step.train_step`: clipping, and no update where the loss or
    the gradient is not finite), compiled and captured per batch shape as `runtime` asks
    (`electra.engine.runtime.train_step_function`)."""
    device = runtime.device
    n = len(data)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    warmup = int(cfg.warmup_proportion * total)
    optimizer = build_optimizer(layerwise_groups(model, cfg), cfg, device)
    params = [p for p in model.parameters() if p.requires_grad]
    order = torch.Generator().manual_seed(seed)
    run_step = train_step_function(
        model,
        optimizer,
        params,
        cfg.clip_norm,
        runtime,
        loss=lambda forward: functools.partial(task_step, task, forward, cfg.loss_reduction),
    )
    # Packed rows vary in number (no CUDA graphs), and need position ids, which not every family's
    # encoder takes (`Family.packs`): the others train on padded rows.
    packs = family_of(model.config).packs
    pack = cfg.pack and task.packable and not runtime.config.cuda_graph and packs
    model.train()
    epoch_losses, skipped = [], 0
    bar = progress_bar(total, "fine-tune", enabled=cfg.progress)
    step = 0
    for _ in range(cfg.epochs):
        window = Window()
        for idx in torch.randperm(n, generator=order).split(cfg.batch_size):
            batch = select_rows(data, idx)  # untrimmed: pack_batch chooses its rows' width itself
            batch = pack_batch(batch) if pack else trim(batch, static=runtime.config.cuda_graph)
            set_learning_rate(optimizer, learning_rate(step, cfg.lr, total, warmup))
            run_step([to_device(batch, device)], window=window)
            step += 1
            bar.update(1)
        epoch_losses.append(window.sums["example_loss"].item() / n)  # one sync per epoch
        skipped += int(window.skipped)
        bar.set_postfix(loss=f"{epoch_losses[-1]:.4g}")
    bar.close()
    optimizer.zero_grad(set_to_none=True)  # a captured step leaves its gradient buffers in .grad
    if skipped:
        print(
            f"warning: {skipped} of {total} steps were skipped, their loss or gradient not finite",
            file=sys.stderr,
        )
    return epoch_losses
