"""Where a run executes, shared by pretraining (`electra.pretraining.train`) and fine-tuning
(`electra.finetuning`):
the device, the precision, the CPU-only process settings, and the order in which a model becomes
the step the loop calls, as torchtitan's `parallelize` does:

1. data parallel (DDP or FSDP, `electra.engine.distributed.wrap`), before the optimizer is built, since
   FSDP replaces the parameters it shards;
2. `torch.compile` (the config's `compile`, `compile_mode`), over the data-parallel model;
3. the CUDA graph (the config's `cuda_graph`, `electra.engine.graphs`), over the whole step: forward,
   backward, clipping and the optimizer.

`Runtime.from_config` makes the runtime a config asks for in one call (the device resolved, the
process configured) and `Runtime.prepare` readies a built model on it; steps 2 and 3 are
`train_step_function` (and `inference_function` for prediction). The precision
choice is `electra.engine.step.autocast` (bf16 autocast on GPU by default, fp32 on CPU unless bf16 is
asked for), used through `Runtime.autocast`: it stays in `step.py`, whose forward/backward it wraps
and which this module imports (through `electra.engine.graphs`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from electra.config import RuntimeConfig
from electra.engine.graphs import GraphedTrainStep, ShapeGraphs
from electra.engine.host_memory import keep_freed_memory
from electra.engine.step import autocast, train_step
from electra.errors import ElectraError
from electra.model.attention import check_attention, check_model, use_attention
from electra.model.kernels import onednn_linear_enabled, use_kernels
from electra.objectives import StepOutput

__all__ = [
    "Runtime",
    "configure_process",
    "inference_function",
    "prepare_model",
    "resolve_device",
    "to_device",
    "train_step_function",
]


def resolve_device(name: str) -> torch.device:
    """The device `name` names (auto: a visible GPU, else the CPU). It reads the CPU linear-layer
    setting (`electra.model.kernels.onednn_linear_enabled`) now, on any device, so that a bad one stops
    a run before it writes anything, on a GPU machine as on CI."""
    onednn_linear_enabled()
    if name == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ElectraError(f"train.device={name} but no CUDA GPU is visible: use train.device=cpu")
    return device


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A host batch on `device`. To a GPU it goes through pinned memory, so that the copy is
    queued behind the device's work instead of making the host wait for it."""
    if device.type != "cuda":
        return batch
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}


def configure_process(device: torch.device) -> None:
    """The process settings of a run on `device`; only a CPU run has any: malloc keeps the pages
    it frees (`electra.engine.host_memory`). On GPU the activations live on the device."""
    if device.type == "cpu":
        keep_freed_memory()


@dataclass(frozen=True)
class Runtime:
    """How a loop runs its model: on `device`, as its `config` asks (`electra.config.RuntimeConfig`,
    pretraining's, fine-tuning's or a fine-tuned model's): in its `precision`, compiled (`compile`,
    in `compile_mode`) and with the step captured in CUDA graphs (`cuda_graph`, which also gives
    the batches static shapes). The `kernels` and `attention` settings act once, on the built model
    (`prepare`), not on every step; an attention path the device cannot train on is refused as the
    runtime is made (`electra.model.attention.check_attention`). The config's `section` is how the
    user names these settings in messages ("train." in pretraining)."""

    device: torch.device
    config: RuntimeConfig = field(default_factory=RuntimeConfig)

    def __post_init__(self) -> None:
        c = self.config
        check_attention(c.attention, self.device, c.precision, c.section)

    @classmethod
    def from_config(
        cls,
        cfg: RuntimeConfig,
        place: Callable[[torch.device], torch.device] | None = None,
    ) -> Runtime:
        """The runtime a config (pretraining's, fine-tuning's or a fine-tuned model's) asks for:
        its device resolved (`resolve_device`), then placed by `place` (under torchrun, this
        rank's GPU: `electra.engine.distributed.init_process_group`), and the process configured
        for it (`configure_process`). Pretraining, fine-tuning and inference all start here."""
        device = resolve_device(cfg.device)
        if place is not None:
            device = place(device)
        configure_process(device)
        return cls.of(cfg, device)

    @classmethod
    def of(cls, cfg: RuntimeConfig, device: torch.device) -> Runtime:
        """The runtime `cfg` asks for on a device already chosen (a test's or a benchmark's)."""
        return cls(device, cfg)

    def prepare(self, model: nn.Module) -> nn.Module:
        """A built model made ready to run on this runtime (`prepare_model`)."""
        c = self.config
        return prepare_model(model, self.device, c.kernels, c.attention, c.section)

    def check_model(self, model_cfg: Any) -> None:
        """Refuses a model config the `attention` path cannot run, before the model is built
        (`electra.model.attention.check_model`)."""
        check_model(self.config.attention, model_cfg, self.config.section)

    def autocast(self, cache_casts: bool = True) -> contextlib.AbstractContextManager:
        """This runtime's autocast (`electra.engine.step.autocast`)."""
        return autocast(self.device, self.config.precision, cache_casts)


def prepare_model(
    model: nn.Module,
    device: torch.device,
    kernels: str = "auto",
    attention: str = "sdpa",
    section: str = "",
) -> nn.Module:
    """A built model made ready to run, before step 1 of the order: moved to `device`, with the
    kernels the `kernels` setting names (`electra.model.kernels.use_kernels`: on CPU, auto swaps in the
    CPU kernels) and its modern encoders attending by the `attention` path
    (`electra.model.attention.use_attention`; the electra family refuses any but sdpa).
    Pretraining, fine-tuning and prediction all call it."""
    model = use_attention(model, attention, section)
    return use_kernels(model.to(device), kernels, device)


def train_step_function(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    params: list[nn.Parameter],
    clip_norm: float,
    runtime: Runtime,
    loss: Callable[[nn.Module], Callable[..., StepOutput]] | None = None,
    graph_key: Callable[[], Hashable] = lambda: None,
) -> Callable[..., torch.Tensor]:
    """Steps 2 and 3 of the order: one optimizer step over a list of micro-batches
    (`electra.engine.step.train_step`, clipped at `clip_norm`), on `model` (already
    data parallel) compiled, then captured per batch shape, as `runtime` asks. `loss` makes the
    step function from the (compiled) model, which by default is the step function itself.
    Returns the device flag of a skipped step."""
    asked = runtime.config
    forward = compile_model(model, asked.compile_mode) if asked.compile else model
    step_fn = loss(forward) if loss is not None else forward
    settings = {"precision": asked.precision, "clip_norm": clip_norm}
    if asked.cuda_graph:
        return GraphedTrainStep(
            step_fn, optimizer, params, runtime.device, **settings, graph_key=graph_key
        )
    return functools.partial(train_step, step_fn, optimizer, params, **settings)


def compile_model(model: nn.Module, mode: str = "default") -> nn.Module:
    """`torch.compile(model, mode=mode)`, inductor's on-disk caches keyed by the CPU kernel set
    (`key_compile_cache_by_cpu`)."""
    key_compile_cache_by_cpu()
    return torch.compile(model, mode=mode)


def key_compile_cache_by_cpu() -> None:
    """Adds the CPU capability in force (AVX512, AVX2 or DEFAULT, as `ATEN_CPU_CAPABILITY` may set
    it) to `torch.compiler.config.cache_key_tag`. torch 2.13 keys inductor's FX graph cache, which
    holds the generated C++ kernels, without it, although the kernels' vector width follows it: a
    process under `ATEN_CPU_CAPABILITY=avx2` reused AVX-512 kernels from an earlier run on the same
    machine (and the reverse), built them against the other width's vector types and read and
    wrote out of bounds: glibc heap aborts, or an "index out of bounds" check in a compiled
    fine-tuning step (tests/engine/test_compile_cache.py). A tag the user set is kept."""
    tag = f"cpu-{torch.backends.cpu.get_cpu_capability().lower()}"
    tags = [t for t in torch.compiler.config.cache_key_tag.split(",") if t]
    if tag not in tags:
        torch.compiler.config.cache_key_tag = ",".join([*tags, tag])


def inference_function(fn: Callable[[Any], Any], runtime: Runtime) -> Callable[[Any], Any]:
    """`fn(batch)`, captured per batch shape after one eager call under the config's `cuda_graph`
    (`electra.engine.graphs.ShapeGraphs`; on another device than a GPU it runs as it is)."""
    return ShapeGraphs(fn, runtime.device, warmup=1) if runtime.config.cuda_graph else fn
