"""Data parallel training under torchrun, on this machine's CPU with gloo: the same weights as one
process, disjoint data, rank 0 alone writing, agreement on stopping, and resume after a SIGKILL or
on another number of processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from electra.data.store import BatchStream, PretrainingData
from electra.engine.distributed import World, init_process_group
from electra.engine.optim import learning_rate
from electra.engine.tracking import read_metrics
from electra.errors import ElectraError
from electra.folders.checkpoint import checkpoint_dirs
from electra.model.kernels import cpu_info
from electra.pretraining.train import pretrain

from ..conftest import tiny_cfg
from ..numerics import encoder_depth, rounding_bound

TIMEOUT = 240  # seconds for one multi-process run; a hang fails instead of stalling CI


@pytest.fixture(autouse=True)
def one_thread():
    """In-process runs on one thread, as the workers (OMP_NUM_THREADS=1): another thread count
    sums matmuls in another order, and the comparisons here are bit for bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def torchrun(tmp_path: Path, cfg, out: Path, *extra: str, nproc: int = 2, restarts: int = 0):
    """Starts `torchrun -m electra.cli pretrain` with `cfg` (saved as a config file)."""
    config = tmp_path / f"{out.name}.json"
    cfg.save(config)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        f"--max-restarts={restarts}",
        "-m",
        "electra.cli",
        "pretrain",
        "--config",
        str(config),
        "--out",
        str(out),
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so that a failed test can kill torchrun and its workers
    )


def kill(proc: subprocess.Popen) -> None:
    """torchrun and every worker it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def finish(proc: subprocess.Popen) -> str:
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        kill(proc)
        raise
    assert proc.returncode == 0, out[-3000:]
    return out


def weights(run: Path, step: int | None = None) -> dict[str, torch.Tensor]:
    ckpt = checkpoint_dirs(run)[-1] if step is None else run / "checkpoints" / f"step_{step:08d}"
    return load_file(ckpt / "model.safetensors")


def assert_same_weights(a: dict, b: dict, atol: float, runs: tuple[Path, Path] | None = None):
    """Equal within `atol`; a failure names the tensor that differs most and, given the two
    `runs`, their logged losses and the CPU, so that a CI log says where the runs parted."""
    assert a.keys() == b.keys()
    worst = max(a, key=lambda k: (a[k] - b[k]).abs().max().item())
    gap = (a[worst] - b[worst]).abs().max().item()
    if gap <= atol:
        return
    losses = [[(r["step"], r["loss"]) for r in read_metrics(run)] for run in runs or ()]
    flags = set(cpu_info("flags").split()) & {"avx2", "avx512f", "amx_bf16", "amx_tile"}
    cpu = f"{cpu_info('vendor_id')} {cpu_info('model name')} {sorted(flags)}"
    raise AssertionError(f"{gap} in {worst} (atol {atol}); losses {losses}; CPU {cpu}")


def worker(proc: subprocess.Popen, rank: int) -> int:
    """The pid of the worker of `rank` that torchrun started (its children, via /proc)."""
    for task in Path(f"/proc/{proc.pid}/task").iterdir():
        for pid in (task / "children").read_text().split():
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if f"RANK={rank}".encode() in env:
                return int(pid)
    raise AssertionError(f"no worker of rank {rank}")


def wait_for(predicate, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if proc.poll() is not None or time.monotonic() > deadline:
            kill(proc)
            raise AssertionError(f"never saw {what}: {proc.communicate()[0][-3000:]}")
        time.sleep(0.05)


@pytest.mark.numeric
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_train_the_weights_of_one_that_accumulates(wikitext_data, tmp_path, parallel):
    """A global batch of 8 as 2 processes x 4 equals 1 process x 2 micro-batches of 4, dropout
    on: each micro-batch's masking, sampling and dropout follow its rows, not its process.

    DDP all-reduces the same sums as one process accumulates: bit-identical to the end. FSDP
    reduce-scatters, and clips by a norm summed over shards, in another order: last-bit
    differences, from the first step whose LR is not 0 (step 2). From step 3 the generator samples
    from weights that differ in the last bit, and its inverse-CDF sample (`sample_categorical`)
    is a step function of the probabilities: in about 1-2% of runs one sampled token crosses a
    boundary, and that one changed input moves the weights by ~1e-3 (an Adam step). So FSDP is
    compared at step 2, the last step before that can happen, and its export against its own
    last checkpoint."""
    keep = {"train.keep_last": 3}  # the step-2 checkpoint too
    one = pretrain(tiny_cfg(wikitext_data, **{"train.grad_accum": 2, **keep}), tmp_path / "one")
    cfg = tiny_cfg(wikitext_data, **{"train.parallel": parallel, **keep})
    log = finish(torchrun(tmp_path, cfg, tmp_path / "two"))
    two = tmp_path / "two"
    assert f"{parallel} over 2 processes: 4 sequences x 1 accumulation steps" in log
    if parallel == "ddp":
        assert_same_weights(weights(one), weights(two), 0.0, runs=(one, two))
        for role in ("discriminator", "generator"):
            a, b = (load_file(run / role / "model.safetensors") for run in (one, two))
            assert_same_weights(a, b, 0.0)
        last = -1  # the logged row of the last step compared
    else:
        # One Adam update separates step 2's weights from the start (step 0's LR is 0), of at
        # most 3.16 LR per weight (the official first update, (1 - b1) / sqrt(1 - b2)). It
        # divides moments of the gradients, so its gap is its size times their relative rounding:
        # the backward chain of the discriminator (2 layers and 7 reductions beside them) over
        # the 8 x 64 tokens of the global batch, and the clipping norm's sum over every weight.
        start = weights(one, 2)
        step = 3.16 * learning_rate(1, cfg.train.lr, cfg.train.steps, cfg.train.warmup_steps)
        gradients = rounding_bound(torch.float32, 8 * 64, encoder_depth(2, 7, backward=True))
        norm = rounding_bound(torch.float32, sum(w.numel() for w in start.values()))
        assert_same_weights(start, weights(two, 2), step * (gradients + norm), runs=(one, two))
        assert_exported_as_trained(two)
        last = 0
    # Rank 0 alone writes: each logging step once, with the global batch's statistics. The
    # weights those steps ran with are equal: their figures differ by the order they are
    # combined in (two micro-batches or two ranks, over the two steps logged), relative to
    # their size (sums of positive terms).
    rows, ref = read_metrics(two), read_metrics(one)
    assert [r["step"] for r in rows] == [2, 4, 6]
    combined = rounding_bound(torch.float32, 2 * 2, 2)
    assert rows[last]["loss"] == pytest.approx(ref[last]["loss"], rel=combined)
    assert rows[last]["disc_auc"] == pytest.approx(ref[last]["disc_auc"], rel=combined)
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())


def assert_exported_as_trained(run: Path) -> None:
    """The run's role folders hold its last checkpoint's weights, gathered whole. A checkpoint
    stores tied tensors once: the embeddings the two networks share under the discriminator's
    names, the generator's output layer (tied to them) as the word embeddings."""
    trained = weights(run)
    tied = {"generator_lm_head.weight": "electra.embeddings.word_embeddings.weight"}
    for role in ("discriminator", "generator"):
        for name, value in load_file(run / role / "model.safetensors").items():
            stored = trained.get(f"{role}.{name}", trained.get(f"discriminator.{name}"))
            if name in tied and role == "generator":
                stored = trained[f"discriminator.{tied[name]}"]
            assert stored is not None and torch.equal(stored, value), f"{role}: {name}"


class Recorder:
    """Prepared data that records which examples a stream asks for."""

    def __init__(self, data: PretrainingData):
        self.data, self.path, self.seen = data, data.path, []

    def __len__(self) -> int:
        return len(self.data)

    def batch(self, indices: torch.Tensor, documents: bool = False) -> dict:
        self.seen += indices.tolist()
        return {}


def test_ranks_read_disjoint_examples_that_cover_each_epoch(wikitext_data):
    world, batch = 3, 5
    data = [Recorder(PretrainingData(wikitext_data)) for _ in range(world)]
    streams = [BatchStream(data[r], batch, seed=7, rank=r, world_size=world) for r in range(world)]
    steps = len(data[0]) // (batch * world)
    for _ in range(steps):
        for stream in streams:
            next(stream)
    union = set().union(*(d.seen for d in data))
    assert sum(len(d.seen) for d in data) == len(union) == steps * batch * world  # disjoint
    assert len(data[0]) - len(union) < batch * world  # covers the epoch but its dropped tail
    assert all(s.state_dict() == {"epoch": 1, "offset": 0} for s in streams)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_killed_worker_is_restarted_and_the_run_resumes(wikitext_data, tmp_path, rank):
    """SIGKILL either of two workers mid-run (rank 0 may be writing a checkpoint): torchrun
    restarts both (--max-restarts), they resume from the last complete checkpoint and finish with
    the weights of an uninterrupted run."""
    long = {"train.steps": 40, "train.save_every": 4, "train.log_every": 4}
    straight = pretrain(tiny_cfg(wikitext_data, **long, **{"train.grad_accum": 2}), tmp_path / "s")
    run = tmp_path / "killed"
    proc = torchrun(tmp_path, tiny_cfg(wikitext_data, **long), run, restarts=1)
    wait_for(lambda: (run / "checkpoints" / "step_00000008").is_dir(), "step 8", proc)
    os.kill(worker(proc, rank), signal.SIGKILL)
    log = finish(proc)
    assert "done: 40 steps" in log
    assert_same_weights(weights(straight), weights(run), atol=0.0)
    steps = [r["step"] for r in read_metrics(run)]
    assert steps == list(range(4, 41, 4))  # each logging step once, though some ran twice


def test_resume_on_another_number_of_processes(wikitext_data, tmp_path):
    """Stopped at step 3 on 2 processes, resumed on 1 with the same global batch: the weights
    of 6 steps on 1 process."""
    straight = pretrain(tiny_cfg(wikitext_data, **{"train.grad_accum": 2}), tmp_path / "straight")
    run = tmp_path / "run"
    finish(torchrun(tmp_path, tiny_cfg(wikitext_data, **{"train.stop_after": 3}), run))
    assert checkpoint_dirs(run)[-1].name == "step_00000003"
    pretrain(tiny_cfg(wikitext_data, **{"train.grad_accum": 2}), run, resume=True)
    assert_same_weights(weights(straight), weights(run), atol=0.0)


def test_a_stop_signal_to_one_rank_stops_every_rank_with_a_checkpoint(wikitext_data, tmp_path):
    cfg = tiny_cfg(wikitext_data, **{"train.steps": 100_000, "train.save_every": 100_000})
    run = tmp_path / "run"
    proc = torchrun(tmp_path, cfg, run)
    wait_for(lambda: (run / "metrics.jsonl").is_file(), "a logging step", proc)
    os.kill(worker(proc, 1), signal.SIGTERM)  # one rank alone
    log = finish(proc)
    stopped = int(log.split("stopped at step ")[1].split(":")[0])
    assert 0 < stopped < 100_000 and stopped % cfg.train.log_every == 0
    assert checkpoint_dirs(run)[-1].name == f"step_{stopped:08d}"
    state = torch.load(checkpoint_dirs(run)[-1] / "state.pt", weights_only=True)
    assert state["step"] == stopped and json.loads((run / "config.json").read_text())


def test_the_global_batch_must_divide_over_processes_and_accumulation():
    from electra.config import TrainConfig
    from electra.errors import ElectraError

    assert TrainConfig(batch_size=32, grad_accum=2).micro_batch(4) == 4
    with pytest.raises(ElectraError, match=r"not divisible by train.grad_accum=2 x 3 processes"):
        TrainConfig(batch_size=32, grad_accum=2).micro_batch(3)
    with pytest.raises(ElectraError, match=r"train.parallel='zero3': use ddp or fsdp"):
        TrainConfig(parallel="zero3")


def test_more_ranks_than_gpus_is_refused_in_one_line(monkeypatch):
    """torchrun --nproc_per_node 2 on a one-GPU machine: rank 1 is told what to do, before it asks
    CUDA for a second device."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    world = World(rank=1, world_size=2, local_rank=1)
    with pytest.raises(ElectraError, match="1 are visible: start at most that many processes"):
        init_process_group(world, torch.device("cuda"))
