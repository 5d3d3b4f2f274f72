"""The pretraining loop: prepared data in, checkpoints, metrics and model folders out.

`pretrain` reads top to bottom: join torchrun's process group (if any), check every input before
writing anything, build the objective, make it data parallel, build the optimizer, restore a
checkpoint when resuming, then step. Statistics and the non-finite step guard stay on the device
and are read back only at logging and checkpoint steps, where ranks also agree on stopping, so the
hot loop never waits on the host.
"""

from __future__ import annotations

import contextlib
import functools
import math
import shutil
import signal
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.tensor import DTensor

from electra.config import RunConfig
from electra.data.store import BatchStream, PretrainingData
from electra.data.tokenizer import load_tokenizer
from electra.engine.distributed import (
    World,
    any_rank,
    close_process_group,
    init_process_group,
    world_from_env,
    wrap,
)
from electra.engine.graphs import check_graphable
from electra.engine.optim import build_optimizer, learning_rate, param_groups, set_learning_rate
from electra.engine.progress import Progress, progress_bar
from electra.engine.runtime import (
    Runtime,
    to_device,
    train_step_function,
)
from electra.engine.step import Window
from electra.engine.tracking import HELDOUT, RunLogger
from electra.errors import ElectraError
from electra.folders.checkpoint import load_checkpoint, save_checkpoint
from electra.folders.continuation import continued_groups, continued_networks, load_pair_weights
from electra.folders.model_folder import save_pretrained
from electra.folders.run_folder import drop_metrics_after, take_folder
from electra.locks import RunLock
from electra.model.attention import check_model
from electra.model.family import encoder_of, families
from electra.model.layers import count_parameters, format_count
from electra.objectives import Objective, build_objective, check_objective
from electra.objectives.flops import logged_convention, train_flops
from electra.pretraining.resolve import ResolvedRun, resolve_run
from electra.scoring.health import Health, measure, open_heldout, rows_digest
from electra.scoring.run_health import logged_history, with_start
from electra.scoring.verdict import in_words, judge

# What each FLOP convention is called where a run says which it counts in.
CONVENTIONS = {
    "official": "the official counter's convention, as in the paper's Table 1",
    "model": "the model convention, matmuls only, as MFU counts: the official one has no count "
    "for this architecture",
}


def wrapped_layers() -> tuple[type[torch.nn.Module], ...]:
    """The layers FSDP shards one by one (`electra.engine.distributed.wrap`), of every family
    registered by now."""
    return tuple(f.layer for f in families().values())


def describe(objective: Objective) -> str:
    """Each network's size, so no one trains the wrong generator/discriminator pair by accident."""
    lines = []
    models = objective.models()
    for role, model in models.items():
        c = model.config
        lines.append(
            f"{role}: {format_count(count_parameters(model))} parameters (embeddings + encoder "
            f"{format_count(count_parameters(encoder_of(model)))}; hidden {c.hidden_size}, "
            f"{c.num_hidden_layers} layers, {c.num_attention_heads} heads)"
        )
    lines.append(
        f"objective {objective.name}: {format_count(count_parameters(objective))} parameters "
        "trained (shared ones counted once)"
    )
    return "\n".join(lines)


class StopRequest:
    """Turns SIGINT/SIGTERM into a request to checkpoint and stop after the current step."""

    def __init__(self) -> None:
        self.requested = False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:  # a second Ctrl-C stops at once
            raise KeyboardInterrupt
        self.requested = True
        print(
            "\nstopping: saving a checkpoint after this step (Ctrl-C again to abort)",
            file=sys.stderr,
        )

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


class NonFiniteGuard:
    """Counts steps skipped for a non-finite loss or gradient, on the device: the current run of
    consecutive ones and the longest since the last check, read only where the loop syncs anyway."""

    def __init__(self, device: torch.device) -> None:
        self.streak = torch.zeros((), dtype=torch.long, device=device)
        self.longest = torch.zeros((), dtype=torch.long, device=device)

    def update(self, skipped: torch.Tensor) -> None:
        self.streak = (self.streak + 1) * skipped
        self.longest = torch.maximum(self.longest, self.streak)

    def read(self) -> tuple[int, int]:
        """(the longest streak since the last read, the current one), the same on every rank
        (their gradients are all-reduced, so they skip together)."""
        longest, current = int(self.longest), int(self.streak)
        self.longest = self.streak.clone()
        return longest, current


def micro_batch_seed(seed: int, step: int, index: int) -> int:
    """The RNG seed for global micro-batch `index` of optimizer step `step`. Masking, sampling and
    dropout draw from it, so a micro-batch's randomness depends on which rows it holds, not on
    which process or accumulation slot trains it: one process accumulating k micro-batches and k
    processes taking one each compute the same step, and a run may resume on another number of
    processes without changing what it trains on."""
    return int(np.random.SeedSequence([seed, step, index]).generate_state(1, np.uint64)[0] >> 1)


def pretrain(
    cfg: RunConfig,
    run_dir: str | Path,
    resume: bool = False,
    convention: str | None = None,
    overwrite: bool = False,
    *,
    given: Collection[str] | None = None,
    data: PretrainingData | None = None,
) -> Path:
    """Trains, checkpoints and, when the schedule is done, writes RUN/discriminator and RUN/generator.

    Under torchrun, each of the WORLD_SIZE processes trains on its share of every global batch
    (`train.parallel`: ddp or fsdp); rank 0 alone writes. A worker that torchrun restarts after a
    failure resumes from the run's last complete checkpoint. `convention` is the FLOP convention
    the run prints and logs `train_flops` in (default: its own, `logged_convention`); `electra
    experiment` gives its budget's, so that every arm counts on one scale. `overwrite` starts
    a new run over an earlier one in `run_dir`. The run is resolved first
    (`electra.pretraining.resolve.resolve_run`: a new run's unset settings filled, `given` being the
    section.field keys the caller set; its data folder opened once, or `data` where the caller
    has it open)."""
    run_dir = Path(run_dir)
    world = world_from_env()
    # A path the family has not is named as such (with the ones it has) before the device's check.
    check_model(cfg.train.attention, cfg.model, cfg.train.section)
    runtime = Runtime.from_config(cfg.train, place=functools.partial(init_process_group, world))
    try:
        with contextlib.ExitStack() as cleanup:
            lock = RunLock(run_dir)

            def hold(resuming: bool) -> None:  # held before the folder is read (take_folder)
                if world.is_main and resuming and run_dir.is_dir():
                    take_folder(lock, cleanup)
                if resuming and world.distributed:  # the others read it once rank 0 has
                    any_rank(False, runtime.device)  # put it in order

            resolved = resolve_run(
                cfg, run_dir, given=given, resume=resume, overwrite=overwrite, data=data, hold=hold
            )
            return _pretrain(resolved, run_dir, world, runtime, lock, cleanup, convention)
    finally:
        close_process_group()


def _pretrain(
    resolved: ResolvedRun,
    run_dir: Path,
    world: World,
    runtime: Runtime,
    lock: RunLock,
    cleanup: contextlib.ExitStack,
    convention: str | None = None,
) -> Path:
    """Build, fit, finish the resolved run: each input is checked before the folder is written."""
    cfg, latest = resolved.cfg, resolved.latest
    run = build(cfg, run_dir, resolved.data, latest, resolved.init_from_pair, world, runtime)
    run.convention = convention or run.convention
    if world.is_main:
        # Every input checked: from here on this run writes the folder, and only this run.
        take_folder(lock, cleanup, resolved.overwrite)
        open_run_dir(run, fresh=latest is None)
    failure = fit(run)
    finish(run, failure)
    return run_dir


@dataclass
class Run:
    """What the loop trains and where it stands: built by `build`, advanced by `fit`."""

    cfg: RunConfig
    run_dir: Path
    data: PretrainingData
    world: World
    runtime: Runtime
    objective: Objective
    model: torch.nn.Module  # the objective, data parallel when distributed
    optimizer: torch.optim.Optimizer
    stream: BatchStream
    micro_batch: int
    stop: int  # the step this invocation stops at (train.stop_after or train.steps)
    step: int = 0
    elapsed_before: float = 0.0  # training time of the runs this one resumes
    last_saved: str | None = None  # the newest checkpoint, named for messages
    convention: str = "official"  # the FLOP convention `train_flops` is printed and logged in
    heldout: dict[str, torch.Tensor] | None = None  # rows of train.eval_data, on the device
    heldout_digest: str = ""  # their `rows_digest`: which logged records are one history
    health: tuple[int, Health] | None = None  # the newest held-out measurement and its step
    # The held-out measurements so far, from step 0 (those of a resumed run's earlier invocations
    # read back from metrics.jsonl): what the verdict weighs.
    history: list[tuple[int, Health]] = field(default_factory=list)
    warned: set[str] = field(default_factory=set)  # the verdicts warned of, each said once

    @property
    def device(self) -> torch.device:
        return self.runtime.device


def build(
    cfg: RunConfig,
    run_dir: Path,
    data: PretrainingData,
    latest: Path | None,
    init_from_pair: bool,
    world: World,
    runtime: Runtime,
) -> Run:
    """The objective (from a pair's weights, or a checkpoint's), made data parallel, its optimizer
    and the batch stream, restored from `latest` when resuming."""
    check_objective(cfg)
    device = runtime.device
    check_graphable(cfg.train, device, world)
    micro_batch = cfg.train.micro_batch(world.world_size)
    torch.manual_seed(cfg.train.seed)
    objective = build_objective(cfg.model, cfg.objective, data.special, data.seq_len)
    objective = runtime.prepare(objective)
    if init_from_pair:
        started = load_pair_weights(
            *continued_networks(objective), cfg.train.init_from, cfg.train.generator_from
        )
        if world.is_main:
            print(started, file=sys.stderr)
    shard_by = wrapped_layers()
    layers = [m for m in objective.modules() if isinstance(m, shard_by)]
    model = wrap(
        objective, world, cfg.train.parallel, layers
    )  # step 1 of electra.engine.runtime's order
    groups = param_groups(
        objective,
        cfg.train.weight_decay,
        by_network=objective.staged,
        lr_scales={"generator": cfg.train.generator_lr_scale},
        **continued_groups(objective, cfg.train),  # resumed too: as the run started
    )
    optimizer = build_optimizer(groups, cfg.train, device)
    stream = BatchStream(
        data, micro_batch, cfg.train.seed, world.rank, world.world_size, cfg.data.document_mask
    )
    stop = min(cfg.train.steps, cfg.train.stop_after or cfg.train.steps)
    run = Run(
        cfg, run_dir, data, world, runtime, objective, model, optimizer, stream, micro_batch, stop
    )
    run.convention = logged_convention(cfg)
    if cfg.train.eval_data:
        fingerprint = data.meta["tokenizer_fingerprint"]
        documents = bool(cfg.data.document_mask)
        _, rows = open_heldout(
            cfg.train.eval_data, fingerprint, data.seq_len, "--eval-data", documents=documents
        )
        run.heldout, run.heldout_digest = to_device(rows, device), rows_digest(rows)
    if latest is not None:
        state = load_checkpoint(latest, objective, optimizer)
        run.step, run.elapsed_before = state["step"], state.get("elapsed_s", 0.0)
        stream.load_state_dict(state["data"])
        run.last_saved = f"step {run.step}"
    return run


def open_run_dir(run: Run, fresh: bool) -> None:
    """Rank 0 readies the run folder (its tokenizer, config and metrics) and says what it trains."""
    cfg, run_dir = run.cfg, run.run_dir
    # Metrics a killed run logged after its last checkpoint are logged again from there.
    drop_metrics_after(run_dir, run.step)
    if fresh:  # (a run restarted from step 0 drops its killed attempt's curves too)
        shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(run.data.tokenizer_path, run_dir / "tokenizer", dirs_exist_ok=True)
    cfg.save(run_dir / "config.json")
    print(describe(run.objective), file=sys.stderr)
    if run.world.distributed:
        print(
            f"{cfg.train.parallel} over {run.world.world_size} processes: {run.micro_batch} "
            f"sequences x {cfg.train.grad_accum} accumulation steps per process, "
            f"{cfg.train.batch_size} per optimizer step",
            file=sys.stderr,
        )
    if run.step >= run.stop:
        print(
            f"run {run_dir} is already at step {run.step}; raise --steps to train further",
            file=sys.stderr,
        )
    why = CONVENTIONS[run.convention]
    if run.convention != logged_convention(cfg):  # an experiment counts all arms on one scale
        why = f"the {run.convention} convention, in which the experiment counts every arm"
    print(
        f"training FLOPs: {train_flops(cfg, run.convention):.3g} for {cfg.train.steps} steps "
        f"({why})",
        file=sys.stderr,
    )
    if run.data.packs_documents:
        per_row = run.data.meta["builder"].get("documents_per_row", "several")
        attend = (
            "each attends only to itself (data.document_mask)"
            if cfg.data.document_mask
            else "they attend to each other (data.document_mask false)"
        )
        print(f"rows pack {per_row} documents on average; {attend}", file=sys.stderr)


def step_function(run: Run) -> Callable[..., torch.Tensor]:
    """One optimizer step over a list of micro-batches (compiled, or captured in a CUDA graph, as
    the config asks); it returns the device flag of a skipped step."""
    train = run.cfg.train
    params = [p for p in run.objective.parameters() if p.requires_grad]
    return train_step_function(
        run.model,
        run.optimizer,
        params,
        train.clip_norm,
        run.runtime,
        graph_key=run.objective.graph_key,
    )


def fit(run: Run) -> str:
    """Trains from `run.step` to `run.stop`, or to a stop request, logging and checkpointing on
    the way. It returns why it stopped early on non-finite steps ("" when it did not)."""
    train = run.cfg.train
    run_step = step_function(run)
    logger = RunLogger(run.run_dir, train.tensorboard) if run.world.is_main else None
    bar = progress_bar(  # a bar on a terminal; in a log file, a plain line now and then
        train.steps,
        "pretrain",
        enabled=train.progress and run.world.is_main,
        initial=run.step,
        leave=True,
    )
    run.objective.train()
    if run.heldout is not None and run.step == 0:  # the start: what the verdict weighs against
        _score_heldout(run, logger)
    elif run.heldout is not None:  # resumed: the history it logged, or its start measured again
        logged = logged_history(run.run_dir, run.heldout_digest, run.step + 1)
        run.history = with_start(logged, run.cfg, run.data, run.heldout, run.cfg.train.seed)
    with StopRequest() as stop_request:
        failure = _loop(run, run_step, logger, bar, stop_request)
    bar.close()
    if logger is not None:
        logger.close()
    return failure


def _loop(
    run: Run,
    run_step: Callable[..., torch.Tensor],
    logger: RunLogger | None,
    bar: Progress,
    stop_request: StopRequest,
) -> str:
    train, world = run.cfg.train, run.world
    window = Window(run.objective.metrics)
    guard = NonFiniteGuard(run.device)
    start = time.perf_counter()
    while run.step < run.stop:
        lr = learning_rate(run.step, train.lr, train.steps, train.warmup)
        set_learning_rate(run.optimizer, lr, run.step)
        run.objective.begin_step(run.step)
        micro_batches = [to_device(next(run.stream), run.device) for _ in range(train.grad_accum)]
        seeds = [
            micro_batch_seed(train.seed, run.step, i * world.world_size + world.rank)
            for i in range(train.grad_accum)
        ]
        skipped = run_step(micro_batches, window=window, seeds=seeds)
        guard.update(skipped)
        run.step += 1
        bar.update(1)

        # One process stops at once on a request, logging its last steps; processes of a
        # distributed run agree on stopping at the next logging or saving step.
        stop_now = stop_request.requested and not world.distributed
        log_now = run.step % train.log_every == 0 or run.step == run.stop or stop_now
        save_now = run.step % train.save_every == 0 or run.step == run.stop
        every = train.eval_every or train.save_every
        eval_now = run.heldout is not None and (run.step % every == 0 or run.step == run.stop)
        if not (log_now or save_now or eval_now):
            continue
        # The loop's sync points: ranks agree here on stopping, and the guard is read.
        if log_now:
            _log(run, window, lr, start, logger, bar)
            window = Window(run.objective.metrics)
        if eval_now:  # every rank: a sharded network's forward is collective
            scoring = time.perf_counter()
            _score_heldout(run, logger)
            window.start += time.perf_counter() - scoring  # tokens/s measures training only
        streak, current_streak = guard.read()
        if streak >= train.max_skipped_steps:
            return _non_finite_failure(run, streak)
        stopping = any_rank(stop_request.requested, run.device)
        # No checkpoint amid skipped steps: the newest one stays from before them.
        if (save_now or stopping) and not current_streak:
            _save(run, window, start)
        if stopping:
            break
    return ""


def _log(
    run: Run,
    window: Window,
    lr: float,
    start: float,
    logger: RunLogger | None,
    bar: Progress,
) -> None:
    """Logs the window's statistics, read back from the device, with the throughput."""
    record = window.summary(run.world.world_size)  # reads the device
    if run.device.type == "cuda":
        torch.cuda.synchronize()
    now = time.perf_counter()
    tokens_per_step = run.cfg.train.batch_size * run.data.seq_len
    record.update(
        step=run.step,
        lr=lr,
        tokens_per_s=window.steps * tokens_per_step / (now - window.start),
        train_flops=train_flops(run.cfg, run.convention, steps=run.step),
        elapsed_s=run.elapsed_before + now - start,
    )
    if logger is not None:
        logger.log(record)
    bar.set_postfix(_postfix(record, run.objective.shown), refresh=False)


def _score_heldout(run: Run, logger: RunLogger | None) -> None:
    """Scores the networks on the held-out rows (`electra.scoring.health`), judges them against
    the run's start and history (`electra.scoring.verdict`) and logs the record; the first
    collapsed (or drifting) verdict is said on stderr with what to try."""
    with run.runtime.autocast(cache_casts=False):
        health = measure(
            run.objective.models(),
            run.objective,
            run.heldout,
            run.data.special,
            seed=run.cfg.train.seed,
        )
    run.history = [(s, h) for s, h in run.history if s < run.step] + [(run.step, health)]
    verdict = judge(run.history, continued=bool(run.cfg.train.init_from))
    health.verdict, health.verdict_reason = verdict.name, verdict.history
    run.health = (run.step, health)
    if logger is None:
        return
    record = {"step": run.step, "split": HELDOUT, "rows": run.heldout_digest}
    logger.log(record | health.record())
    if health.verdict in ("collapsed", "drifting") and health.verdict not in run.warned:
        run.warned.add(health.verdict)
        print(
            f"\nwarning: at step {run.step} the held-out health is {in_words(health)}",
            file=sys.stderr,
        )


def health_summary(run: Run) -> str:
    """The end-of-run line on the held-out health, or how to get it."""
    if run.health is None:
        return (
            "held-out health: not measured; pass --eval-data FOLDER (held-out text prepared with "
            "the run's tokenizer) to see whether the model learned or collapsed"
        )
    step, health = run.health
    return f"held-out health at step {step}: {in_words(health)}"


def _save(run: Run, window: Window, start: float) -> None:
    """Checkpoints the run; the time it takes is left out of the window's tokens/s."""
    saving = time.perf_counter()
    save_checkpoint(
        run.run_dir,
        run.step,
        run.objective,
        run.optimizer,
        run.stream.state_dict(),
        run.cfg,
        run.cfg.train.keep_last,
        extra={
            "elapsed_s": run.elapsed_before + saving - start,
            "world_size": run.world.world_size,
        },
        is_main=run.world.is_main,
    )
    run.last_saved = f"step {run.step}"
    window.start += time.perf_counter() - saving  # tokens/s measures training only


def _non_finite_failure(run: Run, streak: int) -> str:
    saved, limit = run.last_saved, run.cfg.train.max_skipped_steps
    before = f"the last checkpoint, {saved}, is from before them" if saved else "no checkpoint yet"
    return (
        f"stopped at step {run.step}: {streak} consecutive steps had a non-finite loss or "
        f"gradient (train.max_skipped_steps={limit}); {before}: lower train.lr or check the "
        f"data, then continue with `electra pretrain --resume {run.run_dir} --train.lr LOWER`"
    )


def finish(run: Run, failure: str) -> None:
    """Raises a failure; else, when the schedule is done, writes RUN/discriminator and
    RUN/generator, and tells how to continue a run that stopped early."""
    if failure:
        raise ElectraError(failure)
    world, run_dir = run.world, run.run_dir
    if run.step >= run.cfg.train.steps:
        models = final_models(run.objective, run.cfg, run.data, world.is_main)
        if world.is_main:
            tokenizer = load_tokenizer(run_dir / "tokenizer")
            for role, network in models.items():
                save_pretrained(network, run_dir / role, tokenizer, run.data.special)
            print(
                f"done: {run.step} steps; models in {run_dir}/{{{','.join(models)}}}\n"
                f"{health_summary(run)}",
                file=sys.stderr,
            )
    elif world.is_main:
        print(
            f"stopped at step {run.step}: continue with `electra pretrain --resume {run_dir}`",
            file=sys.stderr,
        )


def final_models(
    objective: Objective, cfg: RunConfig, data: PretrainingData, is_main: bool
) -> dict[str, torch.nn.Module]:
    """The trained networks by role, whole: FSDP's shards are gathered (every rank takes part)
    into a CPU copy on rank 0."""
    if not any(isinstance(p, DTensor) for p in objective.parameters()):
        return objective.models()
    full = get_model_state_dict(
        objective, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if not is_main:  # with cpu_offload, only rank 0 receives the whole
        return {}
    copy = build_objective(cfg.model, cfg.objective, data.special, data.seq_len)
    copy.load_state_dict(full)
    return copy.models()


def _postfix(record: dict[str, Any], objective_shown: dict[str, str]) -> dict[str, str]:
    """The bar's figures: the loss, what the objective shows (`Objective.shown`), tokens/s."""
    names = {"loss": "loss", **objective_shown, "tok/s": "tokens_per_s"}
    shown = {short: record.get(key) for short, key in names.items()}
    return {k: f"{v:.3g}" for k, v in shown.items() if isinstance(v, float) and not math.isnan(v)}
