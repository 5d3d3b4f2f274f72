"""`electra experiment`: the paper's compute-matched comparison in one command.

Each arm (an objective name, or a label with any config overrides) is pretrained at the same
training FLOPs (`electra.objectives.flops.train_flops`: the paper's Table 1 convention, or the
model convention where an arm's family has no count in that one, the modern family's), so arms
that cost more per step take fewer steps. At `points` evenly spaced fractions of the budget the run's
checkpoint becomes a model folder and is fine-tuned on the chosen GLUE tasks (or a task on the
user's own files, `--task NAME --task-data DIR`) over several seeds, so each arm is a line of GLUE
score (the mean of the task medians) against pretraining FLOPs. OUT holds:

    experiment.json          the resolved plan (arms, steps, FLOPs); a rerun must match it
    arms/LABEL/pretrain/     the pretraining run (metrics.jsonl, checkpoints, model folders);
                             it prints and logs its FLOPs in the budget's convention
    arms/LABEL/step_N/       the checkpoint's networks as model folders, and finetune/TASK/
    results.json, results.md the table (a task median no better than the task's trivial
                             baseline marked †, and the baseline named under it)
    glue_vs_flops.png, losses.png  the plots, their FLOPs in the budget's convention

Every finished piece is kept: run the same command again and it continues where it stopped.
Started twice at once, two processes take different arms (each arm is locked while it runs, with
the run folders' lock, `electra.locks.RunLock`), so OUT as a whole is not locked for the
run; what the processes share, experiment.json and the results table and plots, each writes under
OUT's own lock (`claim_output`), one at a time. A folder that holds another experiment, or
no experiment, is refused.

An arm's and --pretrain-set's `section.field=value` are shorthand for the `--section.field VALUE`
flags of `electra pretrain`, and the arm's run is resolved as that command resolves it
(`electra.pretraining.resolve.resolve_run`), from the data folder the experiment opens once. An
arm's `preset=NAME` starts it from another preset than --preset's, so that arms cross architecture
and objective (`rtd:preset=modern-tiny`, `bert:preset=tiny,objective.name=mlm`; docs/objectives.md
§electra experiment).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from electra.atomic import write_json_atomic, write_text_atomic
from electra.config import RunConfig, apply_overrides, preset
from electra.data.store import PretrainingData
from electra.errors import ElectraError
from electra.folders.checkpoint import checkpoint_dirs
from electra.folders.model_folder import ROLES, is_model_dir
from electra.hf.export import export_hf
from electra.locks import RunLock, claim_output
from electra.model.configs import AnyModelConfig, other_family, with_arch
from electra.objectives import OBJECTIVES, check_objective
from electra.objectives.flops import logged_convention, train_flops
from electra.pretraining.resolve import resolve_run
from electra.pretraining.train import pretrain
from electra.recipes.experiment_plots import loss_curves, plot_experiment, plot_losses
from electra.recipes.experiment_table import counted_in, score_name, table_lines
from electra.tasks.glue import GLUE


@dataclass
class Arm:
    label: str
    overrides: dict[str, str]


def parse_arm(spec: str) -> Arm:
    """`NAME` (an objective) or `LABEL:section.field=value,section.field=value` (each the
    shorthand of `electra pretrain --section.field value`; `preset=NAME` the arm's preset)."""
    label, _, rest = spec.partition(":")
    if not rest:
        if label not in OBJECTIVES:
            raise ElectraError(
                f"arm {spec!r}: a bare arm must be an objective ({', '.join(OBJECTIVES)}); "
                "otherwise write LABEL:section.field=value,..."
            )
        return Arm(label, {"objective.name": label})
    overrides = {}
    for item in rest.split(","):
        key, eq, value = item.partition("=")
        if not eq or ("." not in key and key.strip() != "preset"):
            raise ElectraError(
                f"arm {spec!r}: {item!r} is not section.field=value (or preset=NAME)"
            )
        overrides[key.strip()] = value.strip()
    return Arm(label, overrides)


@dataclass
class Plan:
    """What an experiment runs; saved as OUT/experiment.json and checked on a rerun."""

    preset: str
    data: str
    glue: str | None  # the GLUE folder (CoLA/, SST-2/, ...); unset where every task is own data
    arms: list[Arm]
    tasks: list[str]
    seeds: int = 3
    flops: float | None = None  # the budget; unset: what the first arm spends in `steps`
    steps: int | None = None
    points: int = 1  # fine-tuned checkpoints per arm, evenly spaced over the budget
    pretrain_set: dict[str, str] = field(default_factory=dict)
    finetune_set: dict[str, str] = field(default_factory=dict)
    # A task on the user's own files (classification, ..., `electra.tasks.OWN_DATA`) -> its folder
    # of train.*/dev.* files; the other tasks are GLUE's, under `glue`.
    task_data: dict[str, str] = field(default_factory=dict)
    # How each point is scored on the tasks: fine-tuned, probed frozen (`electra.probing`), or both.
    score: str = "finetune"


SCORES = ("finetune", "probe", "both")
# What makes the arms' runs what they are: a rerun into OUT must match these. The rest of the
# plan (tasks, seeds, scoring) may change, and the arms are scored again without pretraining again.
PRETRAINING = ("preset", "data", "arms", "flops", "steps", "points", "pretrain_set")


def scores(plan: Plan, kind: str) -> bool:
    """Whether the plan scores its points by `kind` (finetune or probe)."""
    return plan.score in (kind, "both")


def arm_config(plan: Plan, arm: Arm, steps: int, data: PretrainingData) -> RunConfig:
    """The arm's run config at `steps`, resolved as `electra pretrain` resolves a new run
    (`electra.pretraining.resolve.resolve_run`: the settings it leaves unset filled, a two_stage arm
    switching at half the steps, an adversarial one warming up for a tenth; fitted to the data),
    so that its FLOPs are the ones the run logs. A setting this arm's family
    lacks, or that does not fit its objective, is one line naming the arm."""
    own = {k: v for k, v in arm.overrides.items() if k != "preset"}
    values = {**plan.pretrain_set, **own, "data.path": plan.data, "train.steps": steps}
    try:
        base = preset(arm.overrides.get("preset", plan.preset))
        check_shared_settings(
            plan, arm, with_arch(base.model, values.get("model.arch", base.model.arch))
        )
        cfg = apply_overrides(base, values, source=f"arm {arm.label}")
        return resolve_run(cfg, given=values, data=data, note=None).cfg
    except ElectraError as e:
        raise naming(arm, e) from None


def naming(arm: Arm, error: ElectraError) -> ElectraError:
    """`error`, saying which arm it is about where it does not already."""
    return error if f"arm {arm.label}" in str(error) else ElectraError(f"arm {arm.label}: {error}")


def check_shared_settings(plan: Plan, arm: Arm, model: AnyModelConfig) -> None:
    """A --pretrain-set `model.` setting of one family only is refused for an arm of the other
    (ModernBERT has no `embedding_size`, ELECTRA no `local_attention`): it belongs in the arms of
    its family. Said here, since the pretrain-set's keys would otherwise read as the arm's."""
    mine = {f"model.{f.name}" for f in fields(model)}
    for key, value in plan.pretrain_set.items():
        theirs = key not in mine and other_family(key, model, "--pretrain-set")
        if theirs and key not in arm.overrides:
            raise ElectraError(
                f"--pretrain-set {key}={value} is not a setting of arm {arm.label} (model.arch="
                f"{model.arch}): give it only to the arms of the family that has it "
                f"(LABEL:{key}={value},...)"
            )


def convention(plan: Plan, data: PretrainingData) -> str:
    """The FLOP convention every arm is counted in: the official one (the paper's Table 1) where
    each arm's family has a count in it, else the model convention (matmuls, as MFU counts),
    so that arms of the modern family compare on one scale."""
    runs = [arm_config(plan, arm, 1, data) for arm in plan.arms]
    official = all(logged_convention(cfg) == "official" for cfg in runs)
    return "official" if official else "model"


def steps_for_budget(
    plan: Plan, arm: Arm, budget: float, data: PretrainingData, counted: str = "official"
) -> int:
    """The most steps whose training FLOPs (in convention `counted`) stay within `budget` (FLOPs
    grow with steps)."""

    def fits(steps: int) -> bool:
        return train_flops(arm_config(plan, arm, steps, data), counted) <= budget

    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def resolve(plan: Plan, data: PretrainingData) -> dict[str, Any]:
    """Per arm: steps, FLOPs and the checkpoints to fine-tune, checked before anything runs."""
    if not plan.arms:
        raise ElectraError("an experiment needs at least one --arm")
    if plan.score not in SCORES:
        raise ElectraError(f"--score {plan.score}: choose one of {', '.join(SCORES)}")
    labels = [a.label for a in plan.arms]
    if len(set(labels)) != len(labels):
        raise ElectraError(f"arm labels must differ (got {', '.join(labels)})")
    for task in plan.tasks:
        check_task(plan, task)

    counted = convention(plan, data)
    if plan.flops:
        budget = plan.flops
    elif plan.steps:
        budget = train_flops(arm_config(plan, plan.arms[0], plan.steps, data), counted)
    else:
        raise ElectraError("give the budget: --flops F, or --steps N for the first arm")
    arms = {}
    for arm in plan.arms:
        steps = steps_for_budget(plan, arm, budget, data, counted)
        cfg = arm_config(plan, arm, steps, data)
        try:
            check_objective(cfg)
        except ElectraError as e:
            raise naming(arm, e) from None
        points = sorted({max(1, round(steps * (i + 1) / plan.points)) for i in range(plan.points)})
        arms[arm.label] = {
            "overrides": arm.overrides,
            "objective": cfg.objective.name,
            "steps": steps,
            "train_flops": train_flops(cfg, counted),
            "points": {str(p): train_flops(cfg, counted, steps=p) for p in points},
        }
        if counted != "official":  # an experiment of the ELECTRA family alone reads as before
            arms[arm.label]["arch"] = cfg.model.arch
    # An experiment.json of the official convention reads as before (no key), so reruns match.
    return {"budget": budget, "arms": arms} | (
        {"convention": counted} if counted != "official" else {}
    )


def check_task(plan: Plan, task: str) -> None:
    """A GLUE task's folder exists; a task on the user's files reads them (train and dev) now,
    so that a bad file stops the experiment before any pretraining, not after it."""
    if scores(plan, "probe"):
        from electra.probing.probe import probe_kind
        from electra.tasks import get_task
        from electra.tasks.finetune_config import FinetuneConfig

        settings = FinetuneConfig.from_values(plan.finetune_set, source="--finetune-set")
        probe_kind(get_task(task, settings))  # classification or tagging: said before pretraining
    if task in plan.task_data:
        from electra.finetuning.results import read_split, read_train
        from electra.tasks import get_task
        from electra.tasks.finetune_config import FinetuneConfig

        cfg = FinetuneConfig.from_values(plan.finetune_set, source="--finetune-set")
        own = get_task(task, cfg)
        files = own.resolve(plan.task_data[task])
        read_split(read_train(own, files)[0], files, "dev")
        return
    if task not in GLUE:
        raise ElectraError(
            f"task {task!r} is not a GLUE task ({', '.join(GLUE)}): a task on your own files "
            "takes --task NAME --task-data DIR"
        )
    if not plan.glue:
        raise ElectraError(f"the GLUE task {task} needs --glue FOLDER (holding CoLA/, SST-2/, ...)")
    if not (Path(plan.glue) / GLUE[task].submission).is_dir():
        raise ElectraError(f"{Path(plan.glue) / GLUE[task].submission} not found (--glue)")


def data_of(plan: Plan, task: str) -> Path:
    """Where a task's files are: its --task-data folder, or its folder under --glue."""
    if task in plan.task_data:
        return Path(plan.task_data[task])
    return Path(plan.glue) / GLUE[task].submission


def run_experiment(plan: Plan, out: str | Path) -> dict[str, Any]:
    out = Path(out)
    data = PretrainingData(plan.data)
    resolved = resolve(plan, data)
    record = {"plan": asdict(plan), **resolved}
    with claim_output(out, overwrite=True, wait=True):  # checked and written one at a time
        check_same_experiment(out, record)
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "experiment.json", record)

    busy = []
    for arm in plan.arms:
        arm_dir = out / "arms" / arm.label
        lock = RunLock(arm_dir)
        if not lock.try_acquire():  # another process runs it: this one goes on with the next arm
            busy.append(arm.label)
            continue
        with lock:
            info = resolved["arms"][arm.label]
            cfg = arm_config(plan, arm, info["steps"], data)
            for point in map(int, info["points"]):
                models = pretrain_to(arm, cfg, point, arm_dir, counted_in(resolved), data)
                encoder = encoder_folder(cfg, models, point)
                for task in plan.tasks:
                    if scores(plan, "finetune"):
                        finetune_point(plan, encoder, task)
                    if scores(plan, "probe"):
                        probe_point(plan, encoder, task)
                write_results(plan, resolved, out, data)
    if busy:
        print(
            f"experiment: arms {', '.join(busy)} are being run by another process; their "
            "results join the table when it finishes",
            file=sys.stderr,
        )
    return write_results(plan, resolved, out, data)


def check_same_experiment(out: Path, record: dict[str, Any]) -> None:
    """OUT is new (or empty), or holds this experiment, which a rerun continues; another
    experiment, or a folder of something else, is refused before anything is written in it."""
    saved = out / "experiment.json"
    if saved.is_file():
        before = json.loads(saved.read_text())
        if pretraining(before["plan"]) != pretraining(record["plan"]):
            raise ElectraError(
                f"{out} holds another experiment ({saved} differs in its arms, budget, data or "
                "pretraining settings): choose another --out"
            )
    elif out.is_file() or (out.is_dir() and any(out.iterdir())):
        raise ElectraError(
            f"{out} exists and is not an experiment's folder (no experiment.json): choose "
            "another --out"
        )


def pretraining(plan: dict[str, Any]) -> dict[str, Any]:
    """The part of a saved plan that its arms' runs depend on."""
    return {k: plan.get(k) for k in PRETRAINING}


def pretrain_to(
    arm: Arm, cfg: RunConfig, point: int, arm_dir: Path, counted: str, data: PretrainingData
) -> Path:
    """Trains the arm's run (`cfg`, its full schedule) up to step `point` (resuming it) on the
    experiment's `data` and returns the folder of that checkpoint's networks as model folders.
    The run prints and logs its FLOPs in the budget's convention `counted`, as the table and the
    plots count them."""
    models = arm_dir / f"step_{point}"
    if (models / "experiment-point.json").is_file():
        return models
    run = arm_dir / "pretrain"
    done = {int(p.name.split("_")[1]) for p in checkpoint_dirs(run)}
    if not done and run.exists():
        shutil.rmtree(run)  # stopped before its first checkpoint: nothing to resume
    if point not in done:
        start = time.perf_counter()
        stopping = replace(cfg, train=replace(cfg.train, stop_after=point))
        pretrain(stopping, run, resume=bool(done), convention=counted, data=data)
        print(
            f"experiment: {arm.label} pretrained to step {point}/{cfg.train.steps}, "
            f"{train_flops(cfg, counted, steps=point):.3g} training FLOPs ({counted} convention; "
            f"{(time.perf_counter() - start) / 60:.1f} min)",
            file=sys.stderr,
        )
    if models.exists():
        shutil.rmtree(models)
    export_hf(run, models, step=point)
    write_json_atomic(models / "experiment-point.json", {"step": point})
    return models


def encoder_folder(cfg: RunConfig, models: Path, step: int) -> Path:
    """The network to fine-tune after `step` steps: the discriminator, or the MLM model; for
    two_stage, the generator until the switch (the discriminator has not trained yet)."""
    if cfg.objective.name == "two_stage" and step <= cfg.objective.two_stage_steps:
        return models / "generator"
    return next(models / r for r in ROLES if is_model_dir(models / r))


def scoring_settings(plan: Plan, task: str, kind: str) -> dict[str, Any]:
    """What a point's score on `task` by `kind` (finetune or probe) depends on besides the
    point: the task's data and the seeds, and fine-tuning's settings."""
    settings = {"data": str(data_of(plan, task)), "seeds": plan.seeds}
    return settings | ({"set": plan.finetune_set} if kind == "finetune" else {})


def cached(summary: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """A point's saved scores on a task, where they were scored with `settings` (the task's data,
    the seeds, the recipe's settings); a summary from before settings were saved is taken."""
    if not summary.is_file():
        return None
    row = json.loads(summary.read_text())
    return row if row.get("settings", settings) == settings else None


def finetune_point(plan: Plan, encoder: Path, task: str, at: Path | None = None) -> dict[str, Any]:
    """The point's encoder fine-tuned on `task` over the plan's seeds, in AT/finetune/TASK
    (default: beside the encoder, in its step folder)."""
    from electra.finetuning.run import finetune
    from electra.tasks.finetune_config import FinetuneConfig

    out = (at or encoder.parent) / "finetune" / task
    summary = out / "summary.json"
    settings = scoring_settings(plan, task, "finetune")
    if (row := cached(summary, settings)) is not None:
        return row
    cfg = FinetuneConfig.from_values(
        {**plan.finetune_set, "seeds": plan.seeds, "progress": False}, source="--finetune-set"
    )
    results = finetune(encoder, task, data_of(plan, task), out, cfg, overwrite=True)
    metric = results["main_metric"]
    row = {
        "metric": metric,
        "median": results["metrics"][metric],
        "min": results["spread"][metric]["min"],
        "max": results["spread"][metric]["max"],
        "per_seed": [s["metrics"][metric] for s in results["per_seed"]],
        # The trivial predictor's score (finetune's `baseline`): a median near it learned nothing.
        "baseline": (results.get("baseline") or {}).get("metrics", {}).get(metric),
        "baseline_rule": (results.get("baseline") or {}).get("rule"),
        "seeds_not_beating_baseline": results["seeds_not_beating_baseline"],
    }
    write_json_atomic(summary, {**row, "model": str(encoder), "settings": settings})
    return row


def probe_point(plan: Plan, encoder: Path, task: str, at: Path | None = None) -> dict[str, Any]:
    """The point's encoder probed frozen on `task` (`electra.probing.probe`), the same
    architecture's random weights beside it, over the plan's seeds, in AT/probe/TASK."""
    from electra.probing.probe import ProbeConfig, probe
    from electra.tasks.finetune_config import FinetuneConfig

    out = (at or encoder.parent) / "probe" / task
    summary = out / "summary.json"
    settings = scoring_settings(plan, task, "probe")
    if (row := cached(summary, settings)) is not None:
        return row
    task_cfg = FinetuneConfig.from_values(plan.finetune_set, source="--finetune-set")
    cfg = ProbeConfig(seeds=plan.seeds)
    results = probe(encoder, task, data_of(plan, task), out, cfg, task_cfg=task_cfg, overwrite=True)
    spread = ("median", "min", "max", "per_seed")
    row = {
        "metric": results["main_metric"],
        "features": {k: {s: v[s] for s in spread} for k, v in results["features"].items()},
        "random": {k: {s: v[s] for s in spread} for k, v in results["random_weights"].items()},
        "baseline": (results.get("baseline") or {}).get("metrics", {}).get(results["main_metric"]),
    }
    write_json_atomic(summary, {**row, "model": str(encoder), "settings": settings})
    return row


def collect(plan: Plan, resolved: dict[str, Any], out: Path) -> dict[str, Any]:
    """Every scored point: {arm: [{step, train_flops, tasks: {task: fine-tuning row}, probes:
    {task: probe row}, glue}]}, of the scores the plan asks for, with its settings."""
    table: dict[str, list[dict[str, Any]]] = {}
    for arm in plan.arms:
        info = resolved["arms"][arm.label]
        rows = []
        for point, flops in info["points"].items():
            at = out / "arms" / arm.label / f"step_{point}"
            tasks, probes = (scored(plan, at, kind) for kind in ("finetune", "probe"))
            if not tasks and not probes:
                continue
            complete = tasks and len(tasks) == len(plan.tasks)
            glue = sum(r["median"] for r in tasks.values()) / len(tasks) if complete else None
            row = {"step": int(point), "train_flops": flops, "tasks": tasks, "glue": glue}
            rows.append(row | ({"probes": probes} if scores(plan, "probe") else {}))
        table[arm.label] = rows
    return table


def scored(plan: Plan, point: Path, kind: str) -> dict[str, dict[str, Any]]:
    """The point's saved scores by `kind` on the plan's tasks, where the plan asks for them."""
    if not scores(plan, kind):
        return {}
    found = {
        t: cached(point / kind / t / "summary.json", scoring_settings(plan, t, kind))
        for t in plan.tasks
    }
    return {t: row for t, row in found.items() if row is not None}


def write_results(
    plan: Plan, resolved: dict[str, Any], out: Path, data: PretrainingData | None = None
) -> dict[str, Any]:
    """results.json, results.md and the plots from every finished point; `data` (default: the
    plan's) prices each arm's logged steps for the loss plot."""
    data = data or PretrainingData(plan.data)
    configs = {
        a.label: arm_config(plan, a, resolved["arms"][a.label]["steps"], data) for a in plan.arms
    }
    counted = counted_in(resolved)
    # Two processes running arms of one experiment write the table in turn, each from every
    # point finished by then, so the last one written is never older than another.
    with claim_output(out, overwrite=True, wait=True):
        table = collect(plan, resolved, out)
        results = {"budget": resolved["budget"], "tasks": plan.tasks, "arms": table}
        write_json_atomic(out / "results.json", results)
        lines = table_lines(plan, resolved, table)
        write_text_atomic(out / "results.md", "\n".join(lines) + "\n")
        ylabel = f"{score_name(plan)} dev ({', '.join(plan.tasks)}; mean of medians)"
        if scores(plan, "finetune"):
            plot_experiment(ylabel, table, out, counted)
        plot_losses(loss_curves(out, configs, counted), out, counted)
    return results
