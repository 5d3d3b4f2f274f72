"""`electra adapt`: whether continuing a checkpoint on unlabelled text helps a task, in one
command (docs/pretraining.md §Adapting a checkpoint to a task).

From one model folder and the task's labelled files, each arm is scored on the task over seeds:

    none      the checkpoint as it is
    electra   continued with replaced token detection for `steps` steps
    mlm       continued with masked LM at the same training FLOPs as electra's run

Each continued arm runs `pretrain_seeds` times; every arm is fine-tuned `seeds` times (and probed
frozen, with `probe`), so a continued arm's scores are its pretraining seeds x fine-tuning seeds.
The unlabelled text is `corpus` (files), or the task's own training text with its labels dropped
(task-adaptive pretraining). No row of the task's dev or test files is in it: a corpus file that is
one of them is refused, and a corpus line with the text of a dev or test row is dropped and
counted. A slice of the corpus (HELDOUT_SHARE, at most HELDOUT_MAX lines) is held out of
pretraining to watch the runs' held-out health against the checkpoint's (`electra.scoring`).

The pretraining and scoring are an `electra experiment` (`electra.recipes.experiment`) in
OUT/experiment, its arms continued from the folder (`train.init_from`); OUT holds besides:

    adapt.json               the plan; a rerun with the same plan continues where it stopped
    corpus/                  the text pretrained on (corpus.txt) and held out (heldout.txt),
                             what was read, kept and dropped (corpus.json), and their data folders
    none/                    the checkpoint's fine-tuning and probe on the task
    results.json, results.md the arms' medians and ranges, each against none and electra
                             against mlm, beyond the seed spread or not (`electra.scoring.spread`)
    score_vs_compute.png     each arm's score against its pretraining FLOPs
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from electra.atomic import write_json_atomic, write_text_atomic
from electra.errors import ElectraError
from electra.recipes.experiment import (
    Plan,
    finetune_point,
    parse_arm,
    probe_point,
    run_experiment,
    scored,
)
from electra.scoring.spread import compared

ARMS = ("none", "electra", "mlm")
CONTINUED = ("electra", "mlm")
HELDOUT_SHARE, HELDOUT_MAX, HELDOUT_MIN_LINES = 0.05, 2000, 200


@dataclass
class AdaptPlan:
    """What `electra adapt` runs; saved as OUT/adapt.json."""

    model: str
    task: str
    data: str
    corpus: list[str] = field(default_factory=list)  # none: the task's training text
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    steps: int = 200
    seeds: int = 3
    pretrain_seeds: int = 1
    batch_size: int = 16
    seq_len: int = 128
    probe: bool = True
    finetune_set: dict[str, str] = field(default_factory=dict)
    pretrain_set: dict[str, str] = field(default_factory=dict)


def check_plan(plan: AdaptPlan) -> None:
    unknown = [a for a in plan.arms if a not in ARMS]
    if unknown or not plan.arms or len(set(plan.arms)) != len(plan.arms):
        raise ElectraError(
            f"--arms {' '.join(plan.arms)}: choose each at most once from {', '.join(ARMS)}"
        )
    for name in ("steps", "seeds", "pretrain_seeds", "batch_size", "seq_len"):
        if getattr(plan, name) < 1:
            raise ElectraError(f"--{name.replace('_', '-')} must be at least 1")


def task_texts(plan: AdaptPlan) -> tuple[list[str], list[str], list[Path]]:
    """The task's training texts (labels dropped), the texts of its dev and test rows, and those
    files; a task with no labelled training row is refused before anything is written."""
    from electra.finetuning.results import read_split, read_train
    from electra.tasks import get_task
    from electra.tasks.finetune_config import FinetuneConfig

    cfg = FinetuneConfig.from_values(plan.finetune_set, source="electra adapt")
    task = get_task(plan.task, cfg)
    files = task.resolve(plan.data)
    task, train = read_train(task, files)
    labelled = [e for e in train if task.is_labelled(e)]
    if not labelled:
        raise ElectraError(
            f"{files.file('train')}: no labelled row to fine-tune on: check the label column "
            "(--label-column) or pass a file with labels"
        )
    held, paths = [], []
    for split in ("dev", "test"):
        if not files.has(split):
            continue
        for name, rows in read_split(task, files, split).items():
            paths.append(files[split][name])
            held += [t for e in rows for t in task.row_texts(e) if t]
    train_texts = [t for e in labelled for t in task.row_texts(e) if t]
    return train_texts, held, paths


def corpus_lines(plan: AdaptPlan, train: list[str], held_files: list[Path]) -> list[list[str]]:
    """The unlabelled documents: the corpus files' (a file that is a dev or test file of the
    task refused), or each training row's texts as one document."""
    if not plan.corpus:
        return [[t] for t in train]
    from electra.data.corpus import iter_documents, resolve_paths

    paths = resolve_paths(plan.corpus)
    held = {p.resolve() for p in held_files}
    for path in paths:
        if path.resolve() in held:
            raise ElectraError(
                f"--corpus {path} is the task's {path.name} file: pretraining on the rows it is "
                "scored on would flatter every continued arm; give text without them"
            )
    return list(iter_documents(paths))


def write_corpus(plan: AdaptPlan, out: Path) -> dict[str, Any]:
    """OUT/corpus/corpus.txt and heldout.txt, with the counts of what was read, dropped (a dev
    or test row's text) and held out, in corpus.json; refused where too little is left."""
    from electra.data.tokenizer import load_tokenizer
    from electra.finetuning.overlap import normalised

    where = out / "corpus"
    if (where / "corpus.json").is_file():
        return json.loads((where / "corpus.json").read_text())
    train, held_texts, held_files = task_texts(plan)
    docs = corpus_lines(plan, train, held_files)
    tokenizer = load_tokenizer(plan.model)
    held = set(normalised(held_texts, tokenizer))
    lines = [line for doc in docs for line in doc]
    keys = iter(normalised(lines, tokenizer))
    kept = [[line for line in doc if next(keys) not in held] for doc in docs]
    kept = [doc for doc in kept if doc]
    read, kept_lines = len(lines), sum(map(len, kept))
    if read and (read - kept_lines) > read / 2:
        raise ElectraError(
            f"--corpus: {read - kept_lines} of its {read} lines are rows of the task's dev or "
            "test files: give text without them"
        )
    n_held = min(HELDOUT_MAX, round(HELDOUT_SHARE * len(kept)))
    n_held = n_held if len(kept) >= HELDOUT_MIN_LINES else 0
    heldout, kept = kept[:n_held], kept[n_held:]
    if not kept:
        raise ElectraError("the corpus has no line left to pretrain on: give more text (--corpus)")
    where.mkdir(parents=True, exist_ok=True)
    for name, part in (("corpus.txt", kept), ("heldout.txt", heldout)):
        write_text_atomic(where / name, "".join("\n".join(d) + "\n\n" for d in part))
    counts = {
        "source": plan.corpus or f"the {plan.task} training text, labels dropped",
        "lines_read": read,
        "dropped_dev_or_test": read - kept_lines,
        "held_out_documents": len(heldout),
        "pretraining_documents": len(kept),
    }
    print(
        f"adapt: corpus {read} lines read, {counts['dropped_dev_or_test']} dropped (the text of a "
        f"dev or test row), {len(heldout)} documents held out for health, {len(kept)} to "
        "pretrain on",
        file=sys.stderr,
    )
    write_json_atomic(where / "corpus.json", counts)
    return counts


def prepared(plan: AdaptPlan, out: Path, name: str) -> Path:
    """The data folder of OUT/corpus/NAME.txt, prepared with the checkpoint's tokenizer once."""
    from electra.data.prepare import prepare

    folder = out / "corpus" / f"{name}-data"
    if not (folder / "meta.json").is_file():
        prepare(
            [str(out / "corpus" / f"{name}.txt")],
            plan.model,
            seq_len=plan.seq_len,
            out_dir=folder,
            overwrite=True,
        )
    return folder


def experiment_plan(plan: AdaptPlan, out: Path, heldout: bool) -> Plan:
    """The continued arms as an experiment: electra first, so that its `steps` set the budget
    mlm matches; each pretraining seed an arm of its own."""
    from electra.pretraining.resolve import continuation_preset

    objectives = [a for a in CONTINUED if a in plan.arms]
    arms = [
        parse_arm(f"{o}-s{s}:objective.name={o},train.seed={s}")
        for o in objectives
        for s in range(1, plan.pretrain_seeds + 1)
    ]
    pretrain_set = {
        "train.init_from": plan.model,
        "train.batch_size": str(plan.batch_size),
        **({"train.eval_data": str(out / "corpus" / "heldout-data")} if heldout else {}),
        **plan.pretrain_set,
    }
    task_data = {plan.task: plan.data}
    return Plan(
        preset=continuation_preset(plan.model),
        data=str(out / "corpus" / "corpus-data"),
        glue=None,
        arms=arms,
        tasks=[plan.task],
        seeds=plan.seeds,
        steps=plan.steps,
        pretrain_set=pretrain_set,
        finetune_set=plan.finetune_set,
        task_data=task_data,
        score="both" if plan.probe else "finetune",
    )


def run_adapt(plan: AdaptPlan, out: str | Path) -> dict[str, Any]:
    """Runs (or continues) the plan in `out` and writes its results."""
    out = Path(out)
    check_plan(plan)
    check_model(plan)
    check_same_plan(plan, out)
    counts = write_corpus(plan, out)
    heldout = counts["held_out_documents"] > 0
    write_json_atomic(out / "adapt.json", asdict(plan))
    expt = experiment_plan(plan, out, heldout)
    if any(a in plan.arms for a in CONTINUED):
        prepared(plan, out, "corpus")
        if heldout:
            prepared(plan, out, "heldout")
        run_experiment(expt, out / "experiment")
    if "none" in plan.arms:
        checkpoint = Path(plan.model)
        finetune_point(expt, checkpoint, plan.task, at=out / "none")
        if plan.probe:
            probe_point(expt, checkpoint, plan.task, at=out / "none")
    return write_results(plan, expt, out, counts)


def check_model(plan: AdaptPlan) -> None:
    """The checkpoint is a model folder, and one that RTD and MLM continue where an arm does."""
    from electra.folders.continuation import pair_configs
    from electra.folders.model_folder import resolve_model_dir

    if any(a in plan.arms for a in CONTINUED):
        pair_configs(plan.model)
    else:
        resolve_model_dir(plan.model)


# What the continued runs depend on: a rerun into OUT must match these. The rest (the arms, the
# seeds, fine-tuning's settings, the probe) may change: the runs are scored again, not rerun.
PRETRAINING = ("model", "task", "data", "corpus", "steps", "pretrain_seeds", "batch_size")
PRETRAINING += ("seq_len", "pretrain_set")


def check_same_plan(plan: AdaptPlan, out: Path) -> None:
    saved = out / "adapt.json"
    if saved.is_file():
        before, now = json.loads(saved.read_text()), asdict(plan)
        if any(before.get(k) != now[k] for k in PRETRAINING):
            raise ElectraError(
                f"{out} holds another adapt run ({saved} differs in its checkpoint, task data, "
                "corpus or pretraining settings): choose another --out"
            )
    elif out.is_file() or (out.is_dir() and any(out.iterdir())):
        raise ElectraError(f"{out} exists and is not an adapt run's folder: choose another --out")


def arm_scores(plan: AdaptPlan, expt: Plan, out: Path) -> dict[str, dict[str, Any]]:
    """Each arm's fine-tuning (and probe) scores, pooled over its pretraining seeds, with the
    training FLOPs of its pretraining (0 for none): only those scored with this plan's settings
    (`electra.recipes.experiment.scored`), so a stopped re-scoring never mixes in older ones."""
    arms: dict[str, dict[str, Any]] = {}
    if "none" in plan.arms:
        arms["none"] = _pooled(expt, [out / "none"]) | {"train_flops": 0.0}
    saved = out / "experiment" / "experiment.json"
    resolved = json.loads(saved.read_text())["arms"] if saved.is_file() else {}
    for objective in CONTINUED:
        labels = [k for k in resolved if k.rsplit("-s", 1)[0] == objective]
        if objective not in plan.arms or not labels:
            continue
        info = resolved[labels[0]]
        points = [out / "experiment" / "arms" / k / f"step_{resolved[k]['steps']}" for k in labels]
        arms[objective] = _pooled(expt, points) | {
            "train_flops": info["train_flops"],
            "steps": info["steps"],
        }
    return arms


def _pooled(expt: Plan, points: list[Path]) -> dict[str, Any]:
    """The points' scores on the task, per kind the plan scores, pooled: per seed, median,
    range (a probe's mean-pooled, or a tagger's per-token)."""
    row: dict[str, Any] = {}
    for kind in ("finetune", "probe"):
        per_seed = []
        for at in points:
            for saved in scored(expt, at, kind).values():
                if kind == "finetune":
                    per_seed += saved["per_seed"]
                    row["metric"] = saved["metric"]
                else:
                    features = saved["features"]  # (saved JSON sorts its keys)
                    per_seed += features.get("mean", features.get("token", {}))["per_seed"]
        if per_seed:
            row[kind] = {
                "median": statistics.median(per_seed),
                "min": min(per_seed),
                "max": max(per_seed),
                "per_seed": per_seed,
            }
    return row


def write_results(plan: AdaptPlan, expt: Plan, out: Path, counts: dict[str, Any]) -> dict[str, Any]:
    arms = arm_scores(plan, expt, out)
    versus = [(a, "none") for a in CONTINUED if a in arms and "none" in arms]
    versus += [("electra", "mlm")] if {"electra", "mlm"} <= set(arms) else []
    comparisons = {}
    for a, b in versus:
        for kind in ("finetune", "probe"):
            if kind in arms[a] and kind in arms[b]:
                d = compared(arms[a][kind], arms[b][kind])
                comparisons[f"{a} vs {b} ({kind})"] = {
                    "gain": d.gain,
                    "shown": d.shown,
                    "in_words": d.in_words(),
                }
    results = {"task": plan.task, "corpus": counts, "arms": arms, "comparisons": comparisons}
    write_json_atomic(out / "results.json", results)
    write_text_atomic(out / "results.md", "\n".join(table_lines(plan, results)) + "\n")
    if arms:
        plot_scores(arms, out / "score_vs_compute.png", plan.task)
    return results


def table_lines(plan: AdaptPlan, results: dict[str, Any]) -> list[str]:
    """The arms' medians and ranges, and the comparisons in words."""
    arms = results["arms"]
    metric = next((r["metric"] for r in arms.values() if "metric" in r), "score")
    lines = [
        f"# electra adapt: {plan.task} from {plan.model}",
        "",
        f"| arm | steps | training FLOPs | fine-tuned {metric}: median [range] (n) "
        "| probe (mean-pooled): median [range] (n) |",
        "|---|---|---|---|---|",
    ]
    for name, row in arms.items():
        cells = [
            f"{row[k]['median']:.2f} [{row[k]['min']:.2f}, {row[k]['max']:.2f}] "
            f"({len(row[k]['per_seed'])})"
            if k in row
            else "-"
            for k in ("finetune", "probe")
        ]
        lines.append(
            f"| {name} | {row.get('steps', 0)} | {row['train_flops']:.3g} | {cells[0]} | {cells[1]} |"
        )
    lines += ["", "Differences of medians (shown where the seed ranges are apart):", ""]
    for name, d in results["comparisons"].items():
        lines.append(f"- {name}: {d['in_words']}")
    return lines


def plot_scores(arms: dict[str, dict[str, Any]], path: Path, task: str) -> None:
    """Each arm's fine-tuned median (its range as a bar) against its pretraining FLOPs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, row in arms.items():
        if "finetune" not in row:
            continue
        s = row["finetune"]
        low, high = s["median"] - s["min"], s["max"] - s["median"]
        ax.errorbar([row["train_flops"]], [s["median"]], yerr=[[low], [high]], fmt="o", label=name)
    ax.set_xlabel("pretraining FLOPs (continued; 0: the checkpoint as it is)")
    ax.set_ylabel(f"{task} dev, fine-tuned (median, range)")
    ax.legend()
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
