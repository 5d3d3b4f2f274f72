"""Does pretraining transfer? Fine-tunes one pretrained discriminator and the same architecture
from random initialization on GLUE tasks with the same recipe, and tabulates dev scores.

    python benchmarks/transfer.py --model runs/wiki-tiny --glue ../shared/data/glue --out bench/transfer

Each task runs `--seeds` fine-tunings per initialization (median reported, as the paper does);
`--seeds-large` applies to SST-2, the one large training set. Writes OUT/transfer.json and
OUT/transfer.md, and keeps every run's folder (results.json, predictions.jsonl) under OUT/runs/.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from electra.config import FinetuneConfig
from electra.finetune import finetune

TASKS = {"sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "cola": "CoLA", "rte": "RTE"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a pretrained run or discriminator folder")
    p.add_argument("--glue", required=True, help="the folder holding SST-2/, MRPC/, ...")
    p.add_argument("--out", required=True)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seeds-large", type=int, default=1)
    args = p.parse_args()

    out = Path(args.out)
    rows = []
    for task in args.tasks:
        seeds = args.seeds_large if task == "sst2" else args.seeds
        row = {"task": task, "seeds": seeds}
        for init in ("pretrained", "random"):
            cfg = FinetuneConfig(seeds=seeds, random_init=init == "random", progress=False)
            start = time.perf_counter()
            results = finetune(
                args.model,
                task,
                Path(args.glue) / TASKS[task],
                out / "runs" / f"{task}-{init}",
                cfg,
                overwrite=True,
            )
            metric = results["main_metric"]
            row.update(
                metric=metric,
                **{
                    init: results["metrics"][metric],
                    f"{init}_spread": results["spread"][metric],
                    f"{init}_all": results["metrics"],
                    f"{init}_minutes": (time.perf_counter() - start) / 60,
                },
            )
            print(f"{task} {init}: {metric} {results['metrics'][metric]:.2f}", flush=True)
        rows.append(row)
        write(out, rows, args)


def write(out: Path, rows: list[dict], args) -> None:
    (out / "transfer.json").write_text(json.dumps({"model": args.model, "rows": rows}, indent=2))
    lines = [
        "| task | metric | seeds | pretrained | random init | gain |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['metric']} | {r['seeds']} | {r['pretrained']:.1f} "
            f"({r['pretrained_spread']['min']:.1f}–{r['pretrained_spread']['max']:.1f}) | "
            f"{r['random']:.1f} ({r['random_spread']['min']:.1f}–{r['random_spread']['max']:.1f}) | "
            f"{r['pretrained'] - r['random']:+.1f} |"
        )
    mean = lambda k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    lines.append(
        f"| **mean** | | | **{mean('pretrained'):.1f}** | **{mean('random'):.1f}** | "
        f"**{mean('pretrained') - mean('random'):+.1f}** |"
    )
    (out / "transfer.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
