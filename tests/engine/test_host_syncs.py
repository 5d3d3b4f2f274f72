"""The training step (pretraining's, every fine-tuning task's) and fine-tuning's prediction never
read a value back to the host, checked without a GPU.

On a GPU a host read (`.item()`, `.cpu()`, a boolean mask index, `nonzero`, `if tensor:`) stalls
Python until the device catches up, and it breaks CUDA-graph capture. `HostReads` counts every op
that would do so while a step runs on CPU: the aten ops through a dispatch mode, the Tensor methods
that bypass dispatch on CPU by wrapping them. The CPU-only kernels of `electra.model.kernels` (cheap
dropout bits drawn on the host) are switched off, so the step takes the path it takes on a GPU.
"""

from __future__ import annotations

import collections
import functools
import traceback

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from electra.config import ObjectiveConfig, TrainConfig
from electra.engine.optim import build_optimizer, param_groups
from electra.engine.step import Window, train_step
from electra.finetuning.inference import trim
from electra.finetuning.loop import layerwise_groups, task_step
from electra.finetuning.packing import pack_batch
from electra.model import kernels
from electra.objectives import OBJECTIVES, build_objective
from electra.tasks import get_task
from electra.tasks.finetune_config import FinetuneConfig
from electra.tasks.tagging import IGNORE

from ..conftest import random_batch, tiny_model_config, tiny_modern_config

aten = torch.ops.aten
# Ops whose result the host must wait for: a scalar read, or an output shaped by the data.
READS = {aten._local_scalar_dense, aten.nonzero, aten.masked_select, aten.is_nonzero}
READS |= {aten._unique2, aten.unique_consecutive, aten.unique_dim}
BOOL_INDEXED = {aten.index, aten.index_put, aten.index_put_}  # a boolean index hides a nonzero


class HostReads(TorchDispatchMode):
    """Counts host reads by where they happen (the innermost frame in this repository)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        super().__init__()
        self.reads: collections.Counter[str] = collections.Counter()
        for name in ("item", "tolist", "numpy", "cpu"):
            monkeypatch.setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))

    def _wrap(self, name, method):
        def counted(tensor, *args, **kwargs):
            self._count(name)
            return method(tensor, *args, **kwargs)

        return counted

    def _count(self, what: str) -> None:
        frames = [f for f in traceback.extract_stack() if "/electra/" in f.filename]
        where = (
            f"{frames[-1].filename.split('/electra/')[-1]}:{frames[-1].lineno}" if frames else "?"
        )
        self.reads[f"{what} at {where}"] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in READS:
            self._count(str(packet))
        elif packet in BOOL_INDEXED and any(
            i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1]
        ):
            self._count(f"{packet} with a boolean index")
        return func(*args, **(kwargs or {}))


@pytest.fixture
def gpu_path(monkeypatch):
    monkeypatch.setattr(kernels, "stock_ops", lambda device: True)


def test_host_reads_are_counted(monkeypatch, gpu_path):
    x = torch.arange(6.0)
    with HostReads(monkeypatch) as probe:
        x.sum().item()
        x[x > 2].sum()
        bool(x.any())
        x.cpu()
        torch.nonzero(x)
        x.tolist()
    assert sum(probe.reads.values()) >= 6, probe.reads
    with HostReads(monkeypatch) as probe:
        x[torch.tensor([1, 2])].sum() * 2
    assert not probe.reads


TINY_MODERN = tiny_modern_config()  # windows matter at the batch's 40 tokens


@pytest.mark.parametrize("arch", ["electra", "modernbert"])
@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_training_step_reads_nothing_back(name, arch, tiny_model, special, monkeypatch, gpu_path):
    sizes = {"sharing": "none", "generator_hidden_fraction": 1.0} if name == "two_stage" else {}
    if arch == "modernbert":  # a generator sharing the table has its width, a third of its depth
        tiny_model = TINY_MODERN
        depth = 1.0 if name == "two_stage" else 1 / 3
        sizes = {"generator_hidden_fraction": 1.0, "generator_layers_fraction": depth, **sizes}
    cfg = ObjectiveConfig(
        name=name,
        **{"generator_hidden_fraction": 0.25, **sizes},
        two_stage_steps=1,
        adversarial_mlm_steps=1,
    )
    torch.manual_seed(0)
    objective = build_objective(tiny_model, cfg, special, seq_len=40)
    train = TrainConfig(grad_accum=2)
    optimizer = build_optimizer(
        param_groups(objective, 0.01, by_network=objective.staged), train, torch.device("cpu")
    )
    params = [p for p in objective.parameters() if p.requires_grad]
    settings = {"precision": train.precision, "clip_norm": train.clip_norm}
    ids, types, attention = random_batch(special, b=8)
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": attention}
    window = Window()
    for step in range(3):  # through the switches of two_stage and adversarial at step 1
        objective.begin_step(step)
        with HostReads(monkeypatch) as probe:
            train_step(objective, optimizer, params, [batch, batch], window, **settings)
        assert not probe.reads, f"step {step}: {dict(probe.reads)}"
    assert window.steps == 3 and torch.isfinite(window.sums["loss"])


def _task_batch(name: str, special, b: int = 8, t: int = 40) -> dict[str, torch.Tensor]:
    """A padded batch of task `name`'s training tensors, rows of varied lengths."""
    ids, types, attention = random_batch(special, b=b, t=t)
    attention[1::2, t // 2 :] = 0  # half the rows shorter
    batch = {"input_ids": ids * attention, "token_type_ids": types, "attention_mask": attention}
    g = torch.Generator().manual_seed(1)
    if name == "conll2003":
        labels = torch.randint(0, 9, (b, t), generator=g)
        batch["labels"] = labels.masked_fill(attention == 0, IGNORE)
    elif name == "squad2":
        batch["start_positions"] = torch.randint(0, t // 2, (b,), generator=g)
        batch["end_positions"] = batch["start_positions"] + 1
        batch["is_impossible"] = torch.randint(0, 2, (b,), generator=g).float()
    elif name == "stsb":
        batch["labels"] = torch.rand(b, generator=g)
    else:
        batch["labels"] = torch.randint(0, 2, (b,), generator=g)
    return batch


FINETUNE_TASKS = ("sst2", "stsb", "conll2003", "squad2")


@pytest.mark.parametrize(
    "name, shape",
    [(n, "padded") for n in FINETUNE_TASKS]
    + [(n, "packed") for n in FINETUNE_TASKS if get_task(n).packable]
    # the modern family's heads, on padded rows (its rows are not packed); QA's official head
    # is ELECTRA's
    + [(n, "modern") for n in FINETUNE_TASKS if n != "squad2"],
)
def test_fine_tuning_reads_nothing_back(name, shape, special, monkeypatch, gpu_path):
    """Fine-tuning's step (through pretraining's `train_step`) and its prediction, on the batches
    it gives them: trimmed to a static width, or packed (GLUE's default)."""
    task = get_task(name)
    torch.manual_seed(0)
    model = task.build_model(TINY_MODERN if shape == "modern" else tiny_model_config())
    cfg = FinetuneConfig(layerwise_lr_decay=0.8, lr=1e-3)
    optimizer = build_optimizer(layerwise_groups(model, cfg), cfg, torch.device("cpu"))
    params = list(model.parameters())
    batch = _task_batch(name, special)
    batch = pack_batch(batch) if shape == "packed" else trim(batch, static=True)
    step_fn = functools.partial(task_step, task, model, cfg.loss_reduction)
    window = Window()
    model.train()
    for step in range(2):
        with HostReads(monkeypatch) as probe:
            train_step(
                step_fn,
                optimizer,
                params,
                [batch],
                window,
                precision="fp32",
                clip_norm=cfg.clip_norm,
            )
        assert not probe.reads, f"step {step}: {dict(probe.reads)}"
    assert window.steps == 2 and torch.isfinite(window.sums["example_loss"])
    if shape == "packed":  # prediction batches are padded
        return
    model.eval()
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad(), HostReads(monkeypatch) as probe:
        task.infer(model, inputs)
    assert not probe.reads, dict(probe.reads)
