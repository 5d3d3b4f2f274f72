"""Does pretraining transfer? Fine-tunes a pretrained discriminator and the same architecture from
random initialization on GLUE tasks with the same recipe, and tabulates dev scores over seeds.

    python benchmarks/transfer.py --data wiki-128 --preset tiny --steps 20000 --precision bf16 \\
        --glue ../shared/data/glue --out bench/transfer          # pretrain, then both arms
    python benchmarks/transfer.py --model RUN_OR_DISCRIMINATOR --glue ../shared/data/glue --out DIR

With `--data`, the discriminator is first pretrained into OUT/pretrain (`--preset`, `--steps`,
`--precision` and any `--pretrain-set section.field=value`; a stopped run resumes where it was).
Each task runs `--seeds` fine-tunings per initialization with the paper's recipe (the median is
reported, as the paper does; `--finetune-set key=value` changes the recipe of both arms, for
example `epochs=10`). Every run's folder (results.json, predictions.jsonl, and summary.json for
the table) is kept under OUT/runs/, and after each run OUT/transfer.json and the table
OUT/transfer.md are rebuilt from all of them, so arms (`--inits`) or disjoint `--tasks` may run at
different times or side by side into one OUT; a finished run is not redone, and an interrupted one
keeps the seeds it finished. The table says, per
task, whether the pretrained arm beats random initialization by more than the seed spread (its
worst seed above random init's best).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from electra.atomic import write_json_atomic, write_text_atomic
from electra.finetuning.run import finetune
from electra.tasks.finetune_config import FinetuneConfig

TASKS = {"sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "cola": "CoLA", "rte": "RTE"}
INITS = ("pretrained", "random")


def pretrain_model(args, out: Path) -> Path:
    """Pretrains (or resumes) OUT/pretrain and returns its discriminator folder."""
    from electra.config import apply_overrides, preset
    from electra.pretraining.train import pretrain

    run = out / "pretrain"
    if (run / "discriminator").is_dir():
        return run / "discriminator"
    overrides = {
        "train.steps": args.steps,
        "train.precision": args.precision,
        "data.path": args.data,
        **dict(kv.split("=", 1) for kv in args.pretrain_set),
    }
    cfg = apply_overrides(preset(args.preset), overrides)
    start = time.perf_counter()
    pretrain(cfg, run, resume=(run / "checkpoints").is_dir())
    write_json_atomic(
        run / "transfer-pretrain.json",
        {"minutes_this_session": (time.perf_counter() - start) / 60, "overrides": overrides},
    )
    return run / "discriminator"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a pretrained run or discriminator folder (or use --data)")
    p.add_argument("--data", help="pretrain first on this prepared folder")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--precision", default="auto")
    p.add_argument("--pretrain-set", nargs="*", default=[], metavar="SECTION.FIELD=VALUE")
    p.add_argument("--glue", required=True, help="the folder holding SST-2/, MRPC/, ...")
    p.add_argument("--out", required=True)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--inits", nargs="+", default=list(INITS), choices=INITS)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seeds-large", type=int, default=3, help="seeds for SST-2")
    p.add_argument("--finetune-set", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--rerun", action="store_true", help="redo runs that already have a summary")
    args = p.parse_args()
    if not (args.model or args.data):
        p.error("pass --model (a pretrained discriminator) or --data (pretrain one first)")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = args.model or str(pretrain_model(args, out))
    changes = dict(kv.split("=", 1) for kv in args.finetune_set)
    for task in args.tasks:
        for init in args.inits:
            run_dir = out / "runs" / f"{task}-{init}"
            if (run_dir / "summary.json").is_file() and not args.rerun:
                continue
            seeds = args.seeds_large if task == "sst2" else args.seeds
            cfg = FinetuneConfig.from_values(
                {**changes, "seeds": seeds, "random_init": init == "random", "progress": False},
                source="--finetune-set",
            )
            start = time.perf_counter()
            results = finetune(
                model,
                task,
                Path(args.glue) / TASKS[task],
                run_dir,
                cfg,
                overwrite=True,
                resume=True,
            )
            metric = results["main_metric"]
            summary = {
                "task": task,
                "init": init,
                "model": model,
                "metric": metric,
                "seeds": seeds,
                "epochs": results["config"]["epochs"],
                "recipe_changes": {k: getattr(cfg, k) for k in changes},
                "median": results["metrics"][metric],
                "spread": results["spread"][metric],
                "per_seed": [s["metrics"][metric] for s in results["per_seed"]],
                "all_metrics": results["metrics"],
                "minutes": (time.perf_counter() - start) / 60,
            }
            write_json_atomic(run_dir / "summary.json", summary)
            print(f"{task} {init}: {metric} {results['metrics'][metric]:.2f}", flush=True)
            runs = {
                f"{r['task']}/{r['init']}": r
                for r in (
                    json.loads(f.read_text()) for f in sorted(out.glob("runs/*/summary.json"))
                )
            }
            write_json_atomic(out / "transfer.json", runs)
            write_table(out, runs)


def write_table(out: Path, runs: dict) -> None:
    lines = [
        "| task | metric | seeds | epochs | pretrained: median (min–max) | random init: median (min–max) | gain | beyond the spread |",
        "|---|---|---|---|---|---|---|---|",
    ]
    gains = []
    for task in TASKS:
        pre, rnd = runs.get(f"{task}/pretrained"), runs.get(f"{task}/random")
        if not (pre and rnd):
            continue
        cell = lambda r: f"{r['median']:.1f} ({r['spread']['min']:.1f}–{r['spread']['max']:.1f})"  # noqa: E731
        # Arms run at different times could use different recipes: show both, never hide it.
        epochs, seeds = pre.get("epochs", ""), pre["seeds"]
        if rnd.get("epochs", "") != epochs:
            epochs = f"{epochs} vs {rnd.get('epochs', '?')}"
        if rnd["seeds"] != seeds:
            seeds = f"{seeds} vs {rnd['seeds']}"
        apart = pre["spread"]["min"] > rnd["spread"]["max"]
        below = pre["spread"]["max"] < rnd["spread"]["min"]
        verdict = "yes" if apart else "no, below" if below else "no"
        gains.append((pre["median"], rnd["median"]))
        lines.append(
            f"| {task} | {pre['metric']} | {seeds} | {epochs} | {cell(pre)} | {cell(rnd)} | "
            f"{pre['median'] - rnd['median']:+.1f} | {verdict} |"
        )
    if gains:
        p, r = (sum(x) / len(gains) for x in zip(*gains, strict=True))
        lines.append(f"| **mean** | | | | **{p:.1f}** | **{r:.1f}** | **{p - r:+.1f}** | |")
    write_text_atomic(out / "transfer.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
