"""The pretraining loop: prepared data in, checkpoints, metrics and model folders out.

`pretrain` reads top to bottom: check every input before writing anything, build the objective and
optimizer, restore a checkpoint when resuming, then step. Statistics stay on the device and are read
back only at logging steps, so the hot loop never waits on the host.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from electra.checkpoint import checkpoint_dirs, load_checkpoint, save_checkpoint, set_rng_state
from electra.config import RunConfig, TrainConfig, with_architecture_of
from electra.data import BatchStream, PretrainingData
from electra.errors import ElectraError
from electra.flops import official_train_flops
from electra.host_memory import keep_freed_memory
from electra.model import count_parameters, format_count
from electra.objectives import Objective, StepOutput, build_objective, check_objective
from electra.ops import onednn_linear_enabled
from electra.optim import build_optimizer, learning_rate, param_groups, set_learning_rate
from electra.pretrained import load_pair_weights, pair_configs, pair_dirs, save_pretrained
from electra.tokenizer import fingerprint, load_tokenizer
from electra.tracking import RunLogger, auc_from_histograms, auc_histograms


def resolve_device(name: str) -> torch.device:
    """The device `name` names (auto: a visible GPU, else the CPU). It reads the CPU linear-layer
    setting (`electra.ops.onednn_linear_enabled`) now, on any device, so that a bad one stops a run
    before it writes anything, on a GPU machine as on CI."""
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


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast on GPU by default; fp32 on CPU unless bf16 is asked for (fast on AMX CPUs)."""
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def fit_config_to_data(cfg: RunConfig, data: PretrainingData, keep_vocab: bool) -> RunConfig:
    """A new model takes its vocabulary size and padding id from the tokenizer; a model that
    already has weights (resumed, or continued from a pair) keeps its size, and the data must fit."""
    if cfg.model.max_position_embeddings < data.seq_len:
        raise ElectraError(
            f"model.max_position_embeddings={cfg.model.max_position_embeddings} is shorter than the "
            f"data's seq len {data.seq_len}: raise it or prepare shorter sequences"
        )
    if keep_vocab and data.vocab_size > cfg.model.vocab_size:
        raise ElectraError(
            f"the data in {cfg.data.path} uses {data.vocab_size} token ids but the model has "
            f"{cfg.model.vocab_size}: prepare the data with the model's tokenizer"
        )
    vocab = cfg.model.vocab_size if keep_vocab else data.vocab_size
    model = replace(cfg.model, vocab_size=vocab, pad_token_id=data.special.pad)
    return replace(cfg, model=model, data=replace(cfg.data, seq_len=data.seq_len))


def configure_from_pair(cfg: RunConfig, data: PretrainingData) -> RunConfig:
    """Continued pretraining: the pair's configs replace the preset's architecture, and the data
    must have been prepared with the pair's tokenizer."""
    source = cfg.train.init_from
    disc, gen = pair_configs(source)
    if fingerprint(load_tokenizer(pair_dirs(source)[0])) != data.meta["tokenizer_fingerprint"]:
        raise ElectraError(
            f"the data in {cfg.data.path} was not prepared with the tokenizer of {source}: run "
            f"`electra prepare ... --tokenizer {Path(source) / 'discriminator'}`"
        )
    objective = replace(
        cfg.objective,
        name="electra",
        sharing="embeddings",
        generator_hidden_size=gen.hidden_size,
        generator_num_hidden_layers=gen.num_hidden_layers,
        generator_num_attention_heads=gen.num_attention_heads,
        generator_intermediate_size=gen.intermediate_size,
    )
    return replace(cfg, model=disc, objective=objective)


def describe(objective: Objective) -> str:
    """Each network's size, so no one trains the wrong generator/discriminator pair by accident."""
    lines = []
    models = objective.models()
    for role, model in models.items():
        c = model.config
        lines.append(
            f"{role}: {format_count(count_parameters(model))} parameters (embeddings + encoder "
            f"{format_count(count_parameters(model.electra))}; hidden {c.hidden_size}, "
            f"{c.num_hidden_layers} layers, {c.num_attention_heads} heads)"
        )
    lines.append(
        f"objective {objective.name}: {format_count(count_parameters(objective))} parameters "
        "trained (shared ones counted once)"
    )
    return "\n".join(lines)


class Window:
    """Step statistics between two logging steps, summed on the device and read back once."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}  # micro-batches that reported each statistic
        self.auc_hist: tuple[torch.Tensor, torch.Tensor] | None = None
        self.steps = 0
        self.grad_norm: torch.Tensor | float = 0.0
        self.start = time.perf_counter()

    def add(self, out: StepOutput) -> None:
        """One micro-batch's statistics."""
        for k, v in {**out.stats, "loss": out.loss.detach()}.items():
            self.sums[k] = self.sums[k] + v if k in self.sums else v.clone()
            self.counts[k] = self.counts.get(k, 0) + 1
        if out.disc_logits is not None:
            pos, neg = auc_histograms(out.disc_logits, out.disc_labels, out.real_mask)
            if self.auc_hist is not None:
                pos, neg = pos + self.auc_hist[0], neg + self.auc_hist[1]
            self.auc_hist = (pos, neg)

    def end_step(self, grad_norm: torch.Tensor) -> None:
        self.steps += 1
        self.grad_norm = self.grad_norm + grad_norm

    def summary(self) -> dict[str, float]:
        means = {k: v.item() / self.counts[k] for k, v in self.sums.items()}
        means["grad_norm"] = float(self.grad_norm) / self.steps
        if self.auc_hist is not None:
            means["disc_auc"] = auc_from_histograms(*self.auc_hist)
        return means


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


def train_step(
    step_fn: Callable[..., StepOutput],
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    micro_batches: list[dict[str, torch.Tensor]],
    cfg: TrainConfig,
    window: Window,
) -> None:
    """One optimizer step over micro-batches already on the device: gradients accumulated, clipped
    and applied, statistics added to `window`. Nothing in it reads a value back to the host
    (tests/test_host_syncs.py counts), so a GPU runs it ahead of Python, and it can be captured."""
    device = micro_batches[0]["input_ids"].device
    for batch in micro_batches:
        with autocast(device, cfg.precision):
            out = step_fn(**batch)
        (out.loss / len(micro_batches)).backward()
        window.add(out)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.clip_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    window.end_step(grad_norm)


def pretrain(cfg: RunConfig, run_dir: str | Path, resume: bool = False) -> Path:
    """Trains, checkpoints and, when the schedule is done, writes RUN/discriminator and RUN/generator."""
    run_dir = Path(run_dir)
    device = resolve_device(cfg.train.device)
    if not cfg.data.path:
        raise ElectraError(
            "no data folder: pass --data DIR (a folder written by `electra prepare`)"
        )
    data = PretrainingData(cfg.data.path, seq_len=cfg.data.seq_len)
    latest = None
    if resume:
        ckpts = checkpoint_dirs(run_dir)
        if not ckpts:
            raise ElectraError(
                f"{run_dir} has no checkpoint to resume from: start it without --resume"
            )
        latest = ckpts[-1]
        cfg = with_architecture_of(cfg, RunConfig.load(latest / "config.json"))
        if fingerprint(load_tokenizer(run_dir / "tokenizer")) != data.meta["tokenizer_fingerprint"]:
            raise ElectraError(
                f"the data in {cfg.data.path} was tokenized with another vocabulary than run {run_dir}: "
                "resume with data prepared with the run's tokenizer (RUN/tokenizer)"
            )
    elif run_dir.exists() and any(run_dir.iterdir()):
        raise ElectraError(
            f"run folder {run_dir} already exists: continue it with --resume {run_dir} or choose another --out"
        )
    init_from_pair = bool(cfg.train.init_from) and not resume
    if init_from_pair:
        cfg = configure_from_pair(cfg, data)
    cfg = fit_config_to_data(cfg, data, keep_vocab=resume or init_from_pair)

    check_objective(cfg)
    if device.type == "cpu":
        keep_freed_memory()
    torch.manual_seed(cfg.train.seed)
    objective = build_objective(cfg.model, cfg.objective, data.special, data.seq_len).to(device)
    groups = param_groups(objective, cfg.train.weight_decay, by_network=objective.staged)
    optimizer = build_optimizer(groups, cfg.train, device)
    micro_batch = cfg.train.batch_size // cfg.train.grad_accum
    stream = BatchStream(data, micro_batch, seed=cfg.train.seed)
    step, elapsed_before = 0, 0.0
    if init_from_pair:
        load_pair_weights(objective.discriminator, objective.generator, cfg.train.init_from)
    if latest is not None:
        state = load_checkpoint(latest, objective, optimizer)
        step, elapsed_before = state["step"], state.get("elapsed_s", 0.0)
        stream.load_state_dict(state["data"])
        set_rng_state(state["rng"])
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(data.tokenizer_path, run_dir / "tokenizer", dirs_exist_ok=True)
    cfg.save(run_dir / "config.json")

    print(describe(objective), file=sys.stderr)
    stop = min(cfg.train.steps, cfg.train.stop_after or cfg.train.steps)
    if step >= stop:
        print(
            f"run {run_dir} is already at step {step}; raise --steps to train further",
            file=sys.stderr,
        )
    tokens_per_step = cfg.train.batch_size * data.seq_len
    print(
        f"training FLOPs: {official_train_flops(cfg):.3g} for {cfg.train.steps} steps "
        "(the official counter's convention, as in the paper's Table 1)",
        file=sys.stderr,
    )
    params = [p for p in objective.parameters() if p.requires_grad]
    step_fn = (
        torch.compile(objective, mode=cfg.train.compile_mode) if cfg.train.compile else objective
    )
    logger = RunLogger(run_dir, cfg.train.tensorboard)
    bar = tqdm(
        total=cfg.train.steps,
        initial=step,
        disable=not cfg.train.progress,
        unit="step",
        dynamic_ncols=True,
        file=sys.stderr,
        mininterval=0.5 if sys.stderr.isatty() else 30,  # a log file gets a line every 30 s
    )
    objective.train()
    window = Window()
    start = time.perf_counter()
    with StopRequest() as stop_request:
        while step < stop and not stop_request.requested:
            lr = learning_rate(step, cfg.train.lr, cfg.train.steps, cfg.train.warmup)
            set_learning_rate(optimizer, lr)
            objective.begin_step(step)
            micro_batches = [to_device(next(stream), device) for _ in range(cfg.train.grad_accum)]
            train_step(step_fn, optimizer, params, micro_batches, cfg.train, window)
            step += 1
            bar.update(1)

            if step % cfg.train.log_every == 0 or step == stop:
                record = window.summary()  # reads the device: the only sync in the loop
                if device.type == "cuda":
                    torch.cuda.synchronize()
                now = time.perf_counter()
                record.update(
                    step=step,
                    lr=lr,
                    tokens_per_s=window.steps * tokens_per_step / (now - window.start),
                    train_flops=official_train_flops(cfg, steps=step),
                    elapsed_s=elapsed_before + now - start,
                )
                logger.log(record)
                bar.set_postfix(_postfix(record), refresh=False)
                window = Window()
            if step % cfg.train.save_every == 0 or step == stop or stop_request.requested:
                saving = time.perf_counter()
                save_checkpoint(
                    run_dir,
                    step,
                    objective,
                    optimizer,
                    stream.state_dict(),
                    cfg,
                    cfg.train.keep_last,
                    extra={"elapsed_s": elapsed_before + saving - start},
                )
                window.start += time.perf_counter() - saving  # tokens/s measures training only
    bar.close()
    logger.close()
    if step >= cfg.train.steps:
        tokenizer = load_tokenizer(run_dir / "tokenizer")
        for role, model in objective.models().items():
            save_pretrained(model, run_dir / role, tokenizer)
        print(
            f"done: {step} steps; models in {run_dir}/{{{','.join(objective.models())}}}",
            file=sys.stderr,
        )
    else:
        print(
            f"stopped at step {step}: continue with `electra pretrain --resume {run_dir}`",
            file=sys.stderr,
        )
    return run_dir


def _postfix(record: dict[str, Any]) -> dict[str, str]:
    shown = {
        "loss": record.get("loss"),
        "auc": record.get("disc_auc"),
        "tok/s": record.get("tokens_per_s"),
    }
    return {k: f"{v:.3g}" for k, v in shown.items() if isinstance(v, float) and not math.isnan(v)}
