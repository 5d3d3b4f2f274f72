"""Data parallelism through `torch.distributed`: the process group `torchrun` describes, the
wrapping of the objective in DDP or FSDP, and the few collectives the trainer needs.

`torchrun --nproc_per_node N -m electra.cli pretrain ...` sets RANK, WORLD_SIZE and LOCAL_RANK;
without them the run is one process and nothing here communicates. The backend is NCCL for GPUs
and gloo for the CPU. The model code knows nothing of this module (as in torchtitan): the trainer
builds the objective, then `wrap` makes it data parallel.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from electra.errors import ElectraError


@dataclass(frozen=True)
class World:
    """This process's place among the training processes."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def world_from_env() -> World:
    """The world torchrun (or any launcher setting RANK/WORLD_SIZE/LOCAL_RANK) started us in."""
    try:
        world = World(
            rank=int(os.environ.get("RANK", 0)),
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            local_rank=int(os.environ.get("LOCAL_RANK", 0)),
        )
    except ValueError:
        raise ElectraError(
            "RANK, WORLD_SIZE or LOCAL_RANK is not an integer: launch with torchrun"
        ) from None
    if not 0 <= world.rank < world.world_size:
        raise ElectraError(f"RANK={world.rank} is outside WORLD_SIZE={world.world_size}")
    return world


def restarted_by_torchrun() -> bool:
    """Whether torchrun restarted this worker after a failure (`--max-restarts`)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0


def init_process_group(world: World, device: torch.device) -> torch.device:
    """Joins the process group (NCCL on GPU, gloo on CPU); returns this rank's device."""
    if not world.distributed:
        return device
    if device.type == "cuda":
        if world.local_rank >= torch.cuda.device_count():
            raise ElectraError(
                f"local rank {world.local_rank} needs GPU {world.local_rank}, but "
                f"{torch.cuda.device_count()} are visible: start at most that many processes per "
                "node (torchrun --nproc_per_node), or train on the CPU with --device cpu"
            )
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        timeout = datetime.timedelta(minutes=30)
        store, rank, size = next(
            dist.rendezvous("env://", world.rank, world.world_size, timeout=timeout)
        )
        # torchrun's workers share its store across restarts: a restarted worker could read an
        # address its dead predecessor published there. A prefix per attempt keeps them apart.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            store=dist.PrefixStore(f"electra/attempt_{attempt}/", store),
            rank=rank,
            world_size=size,
            timeout=timeout,
            **({"device_id": device} if device.type == "cuda" else {}),
        )
    if dist.get_world_size() != world.world_size:
        raise ElectraError("the process group's size is not WORLD_SIZE: launch with torchrun")
    return device


def close_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, world: World, mode: str, layers: list[nn.Module]) -> nn.Module:
    """`model` made data parallel: DDP (a full replica per rank), or FSDP2's `fully_shard` of each
    of `layers` and then of the whole (parameters, gradients and optimizer state sharded)."""
    if not world.distributed:
        return model
    device = next(model.parameters()).device
    if mode == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        # On the run's device type: FSDP's default mesh is CUDA's wherever a GPU is visible,
        # and a CPU run's ranks beyond the GPU count would then fail.
        mesh = init_device_mesh(device.type, (world.world_size,))
        for layer in layers:
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)
    return nn.parallel.DistributedDataParallel(
        model,
        device_ids=[device] if device.type == "cuda" else None,
        broadcast_buffers=False,  # no buffer changes during training
        # A staged objective trains one network at a time: the other's parameters get no grads.
        find_unused_parameters=getattr(model, "staged", False),
    )


@contextlib.contextmanager
def gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Skips the gradient all-reduce of accumulation micro-batches before the last one."""
    model = getattr(model, "_orig_mod", model)  # under torch.compile
    if enabled or not dist.is_initialized():
        yield
    elif isinstance(model, nn.parallel.DistributedDataParallel):
        with model.no_sync():
            yield
    elif hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        yield


def all_reduce_(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """In place over all ranks (a no-op for one process); returns `tensor`."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return tensor


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank when `flag` is true on any: how ranks agree to stop."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    return bool(all_reduce_(t, "max").item())
