"""One figure from several `electra experiment` folders: GLUE and STS-B against pretraining FLOPs,
a line per arm, and the spread of the arms that share an objective (pretraining seeds) as a band.

    python benchmarks/table5_plot.py OUT1 OUT2 ... --band electra --out figure.png

Arms are named `folder/arm`; `--band OBJ` shades min–max over every arm whose objective is OBJ
(read from the folder's experiment.json) and draws those arms thin.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def load(folders: list[str]) -> list[tuple[str, str, list[dict]]]:
    """(label, objective, points) for every arm of every folder."""
    arms = []
    for folder in map(Path, folders):
        plan = json.loads((folder / "experiment.json").read_text())
        results = json.loads((folder / "results.json").read_text())
        for arm, points in results["arms"].items():
            objective = plan["arms"][arm]["objective"]
            arms.append(
                (f"{folder.name}/{arm}", objective, [p for p in points if p["glue"] is not None])
            )
    return arms


def value(point: dict, metric: str) -> float:
    """The point's GLUE mean, or one task's median."""
    return point["glue"] if metric == "glue" else point["tasks"][metric]["median"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--band", default="electra", help="objective whose arms make the band")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    arms = load(args.folders)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, metric in zip(axes, ("glue", "stsb"), strict=True):
        # The band spans every band arm's value at each budget point any of them reached.
        at: dict[float, list[float]] = {}
        for _, objective, points in arms:
            if objective == args.band:
                for p in points:
                    at.setdefault(p["train_flops"], []).append(value(p, metric))
        if at:
            flops = sorted(at)
            lows, highs = [min(at[f]) for f in flops], [max(at[f]) for f in flops]
            ax.fill_between(flops, lows, highs, alpha=0.2, color="C0", label=f"{args.band} runs")
        others = sorted({a[1] for a in arms} - {args.band})
        for label, objective, points in arms:
            xs = [p["train_flops"] for p in points]
            ys = [value(p, metric) for p in points]
            if objective == args.band:
                ax.plot(xs, ys, marker="o", lw=0.8, color="C0")
            else:  # arms of one objective share a colour
                color = f"C{others.index(objective) % 9 + 1}"
                ax.plot(xs, ys, marker="o", lw=1.8, color=color, label=label)
        ax.set_xscale("log")
        ax.set_xlabel("pretraining FLOPs (official convention)")
        ax.set_ylabel(
            "GLUE dev, mean of task medians" if metric == "glue" else "STS-B Spearman, median"
        )
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
