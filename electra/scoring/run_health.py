"""`electra health`: a pretraining run's held-out health, finished or at a checkpoint, judged
against its starting point and the measurements the run logged on the way
(`electra.scoring.verdict`). The start is the run's own step-0 record on the same rows where it
logged one; otherwise the start is rebuilt (the untrained networks from the run's seed, or the
folders a continued run started from) and measured."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from electra.config import RunConfig
from electra.data.store import PretrainingData
from electra.engine.tracking import HELDOUT, read_metrics
from electra.errors import ElectraError
from electra.folders.continuation import continued_networks, load_pair_weights
from electra.objectives import build_objective
from electra.objectives.base import Objective
from electra.scoring.health import MAX_ROWS, Health, measure, open_heldout, rows_digest
from electra.scoring.verdict import judge


def run_networks(
    run_dir: Path, step: int | None, steps: int
) -> tuple[dict[str, nn.Module], int, str]:
    """A run's networks by role: those of checkpoint `step`, or the finished run's model folders
    (at its last step, `steps`), or (an unfinished run, no step given) its newest checkpoint's;
    the step they are at, and which were taken, in words."""
    from electra.folders.checkpoint import latest_complete
    from electra.folders.model_folder import ROLES, load_pretrained
    from electra.hf.export import checkpoint_models

    finished = [r for r in ROLES if (run_dir / r).is_dir()]
    if step is None and finished:
        networks = {r: load_pretrained(run_dir / r)[0] for r in finished}
        return networks, steps, "the finished models"
    if step is None:
        latest = latest_complete(run_dir)
        if latest is None:
            raise ElectraError(
                f"{run_dir} has no model folders and no checkpoint yet: train it first"
            )
        step = int(latest.name.split("_")[-1])
    models, _ = checkpoint_models(run_dir, step)
    return dict(models), step, f"checkpoint step {step}"


def starting_networks(cfg: RunConfig, data: PretrainingData) -> dict[str, nn.Module] | None:
    """The networks as the run started: built from its seed as `pretrain` builds them, with the
    folders it continued from loaded; None where those folders are gone."""
    if cfg.train.init_from and not Path(cfg.train.init_from).exists():
        return None
    with torch.random.fork_rng():
        torch.manual_seed(cfg.train.seed)
        objective = build_objective(cfg.model, cfg.objective, data.special, data.seq_len)
    if cfg.train.init_from:
        main, generator = continued_networks(objective)
        load_pair_weights(main, generator, cfg.train.init_from, cfg.train.generator_from)
    return objective.models()


def score_run(
    run_dir: str | Path,
    data_dir: str | Path,
    step: int | None = None,
    max_rows: int = MAX_ROWS,
    seed: int | None = None,
) -> tuple[Health, str]:
    """The held-out health of a pretraining run (finished, or at checkpoint `step`) on the
    prepared folder `data_dir` (the run's tokenizer and sequence length), judged against its
    start and logged history on the same rows, and which networks were scored, in words. Masks
    and samples are drawn from `seed` (default: the run's, as its own held-out measurements
    during training were)."""
    from electra.data.tokenizer import fingerprint, load_tokenizer

    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file() or not (run_dir / "tokenizer").is_dir():
        raise ElectraError(
            f"{run_dir} is not a pretraining run's folder (no config.json and tokenizer/): pass "
            "the --out folder of `electra pretrain`"
        )
    cfg = RunConfig.load(run_dir / "config.json")
    networks, at, which = run_networks(run_dir, step, cfg.train.steps)
    tokens = fingerprint(load_tokenizer(run_dir / "tokenizer"))
    documents = bool(cfg.data.document_mask)
    data, rows = open_heldout(data_dir, tokens, cfg.data.seq_len, "--data", max_rows, documents)
    corruption = Objective(cfg.objective, data.special, data.seq_len)
    seed = cfg.train.seed if seed is None else seed
    now = measure(networks, corruption, rows, data.special, seed=seed)
    history = with_start(logged_history(run_dir, rows_digest(rows), at), cfg, data, rows, seed)
    verdict = judge([*history, (at, now)], continued=bool(cfg.train.init_from))
    now.verdict, now.verdict_reason = verdict.name, verdict.history
    return now, which


def with_start(
    history: list[tuple[int, Health]],
    cfg: RunConfig,
    data: PretrainingData,
    rows: dict[str, torch.Tensor],
    seed: int,
) -> list[tuple[int, Health]]:
    """`history` beginning at step 0: where the run logged no start on these rows, its starting
    networks (`starting_networks`) are measured on them; left as it is where they are gone."""
    if history and history[0][0] == 0:
        return history
    start = starting_networks(cfg, data)
    if start is None:
        return history
    corruption = Objective(cfg.objective, data.special, data.seq_len)
    cpu = {k: v.cpu() for k, v in rows.items()}
    return [(0, measure(start, corruption, cpu, data.special, seed=seed)), *history]


def logged_history(run_dir: Path, digest: str, before: int) -> list[tuple[int, Health]]:
    """The run's held-out measurements on the same rows (by `rows_digest`) before step `before`."""
    return [
        (r["step"], Health.from_record(r))
        for r in read_metrics(run_dir, HELDOUT)
        if r.get("rows") == digest and r["step"] < before
    ]
