"""Does pretraining transfer? Fine-tunes one pretrained discriminator and the same architecture
from random initialization on GLUE tasks with the same recipe, and tabulates dev scores.

    python benchmarks/transfer.py --model runs/wiki-tiny --glue ../shared/data/glue --out bench/transfer

Each task runs `--seeds` fine-tunings per initialization (the median is reported, as the paper
does); `--seeds-large` applies to SST-2, the one large training set. `--epochs` and
`--epochs-large` shorten the recipe's epochs where the budget is a CPU's. Every run's folder
(results.json, predictions.jsonl, and summary.json for the table) is kept under OUT/runs/, and
after each run OUT/transfer.json and the table OUT/transfer.md are rebuilt from all of them, so
`--inits random` and `--inits pretrained` (or disjoint `--tasks`) may run at different times or
side by side into one OUT.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from electra.config import FinetuneConfig, write_json_atomic, write_text_atomic
from electra.finetune import finetune

TASKS = {"sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "cola": "CoLA", "rte": "RTE"}
INITS = ("pretrained", "random")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a pretrained run or discriminator folder")
    p.add_argument("--glue", required=True, help="the folder holding SST-2/, MRPC/, ...")
    p.add_argument("--out", required=True)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--inits", nargs="+", default=list(INITS), choices=INITS)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seeds-large", type=int, default=1)
    p.add_argument(
        "--epochs", type=int, default=0, help="epochs for every task but SST-2 (0: the recipe's)"
    )
    p.add_argument("--epochs-large", type=int, default=0, help="epochs for SST-2 (0: the recipe's)")
    args = p.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for task in args.tasks:
        for init in args.inits:
            large = task == "sst2"
            seeds = args.seeds_large if large else args.seeds
            epochs = args.epochs_large if large else args.epochs
            cfg = FinetuneConfig(
                seeds=seeds, epochs=epochs, random_init=init == "random", progress=False
            )
            start = time.perf_counter()
            run_dir = out / "runs" / f"{task}-{init}"
            results = finetune(
                args.model, task, Path(args.glue) / TASKS[task], run_dir, cfg, overwrite=True
            )
            metric = results["main_metric"]
            summary = {
                "task": task,
                "init": init,
                "model": args.model,
                "metric": metric,
                "seeds": seeds,
                "epochs": results["config"]["epochs"],
                "median": results["metrics"][metric],
                "spread": results["spread"][metric],
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
        "| task | metric | seeds | epochs | pretrained: median (min–max) | random init: median (min–max) | gain |",
        "|---|---|---|---|---|---|---|",
    ]
    gains = []
    for task in TASKS:
        pre, rnd = runs.get(f"{task}/pretrained"), runs.get(f"{task}/random")
        if not (pre and rnd):
            continue
        cell = lambda r: f"{r['median']:.1f} ({r['spread']['min']:.1f}–{r['spread']['max']:.1f})"  # noqa: E731
        # Arms run at different times could use different epochs: show both, never hide it.
        epochs = pre.get("epochs", "")
        if rnd.get("epochs", "") != epochs:
            epochs = f"{epochs} vs {rnd.get('epochs', '?')}"
        gains.append((pre["median"], rnd["median"]))
        lines.append(
            f"| {task} | {pre['metric']} | {pre['seeds']} | {epochs} | {cell(pre)} | {cell(rnd)} | "
            f"{pre['median'] - rnd['median']:+.1f} |"
        )
    if gains:
        p, r = (sum(x) / len(gains) for x in zip(*gains, strict=True))
        lines.append(f"| **mean** | | | | **{p:.1f}** | **{r:.1f}** | **{p - r:+.1f}** |")
    write_text_atomic(out / "transfer.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
