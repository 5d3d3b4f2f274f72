"""Our transfer results on the paper's curve: GLUE dev score against pretraining FLOPs.

    python benchmarks/paper_anchor.py --run "small 62.5k=bench/transfer-small" --out anchor.png

Each `--run NAME=DIR` is a `benchmarks/transfer.py` output folder: its point is the mean of the
pretrained arm's median dev scores over the tasks it ran, at the training FLOPs of the
discriminator it fine-tuned (the `train_flops` of the run's last logged step, counted as the
official counter counts, as in the paper's Table 1). The paper's points are docs/specification.md
§Published numbers, Table 1: ELECTRA-Small after 6.25%-100% of its 1M steps, BERT-Small, ELMo, GPT,
BERT-Base and ELECTRA-Base, averaged over the eight GLUE dev tasks. Our mean covers only the tasks
run (`../shared/data/glue` has no MNLI, QQP or QNLI training set), which the legend says.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PAPER = {  # name: (train FLOPs, GLUE dev), docs/specification.md §Published numbers
    "ELECTRA-Small 6.25%": (1.4e18 / 16, 74.1),
    "ELECTRA-Small 12.5%": (1.4e18 / 8, 76.0),
    "ELECTRA-Small 25%": (1.4e18 / 4, 77.7),
    "ELECTRA-Small 50%": (1.4e18 / 2, 79.0),
    "ELECTRA-Small": (1.4e18, 79.9),
    "BERT-Small": (1.4e18, 75.1),
    "ELMo": (3.3e18, 71.2),
    "GPT": (4.0e19, 78.8),
    "BERT-Base": (6.4e19, 82.2),
    "ELECTRA-Base": (6.4e19, 85.1),
}


def point(folder: Path) -> tuple[float, float, list[str]]:
    """(train FLOPs, mean pretrained dev score, tasks) of a transfer.py output folder."""
    runs = json.loads((folder / "transfer.json").read_text())
    pretrained = {k.split("/")[0]: r for k, r in runs.items() if k.endswith("/pretrained")}
    model = Path(next(iter(pretrained.values()))["model"])
    run = model.parent if (model.parent / "metrics.jsonl").is_file() else model
    last = (run / "metrics.jsonl").read_text().strip().splitlines()[-1]
    flops = json.loads(last)["train_flops"]
    scores = [r["median"] for r in pretrained.values()]
    return flops, sum(scores) / len(scores), sorted(pretrained)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", nargs="*", default=[], metavar="NAME=TRANSFER_DIR")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    small = [v for k, v in PAPER.items() if k.startswith("ELECTRA-Small")]
    ax.plot(
        *zip(*small, strict=True), "o-", color="C0", label="ELECTRA-Small over its schedule (paper)"
    )
    for name, (x, y) in PAPER.items():
        if not name.startswith("ELECTRA-Small") or name == "ELECTRA-Small 6.25%":
            ax.plot(x, y, "s", color="C0" if "ELECTRA" in name else "grey")
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, -10), fontsize=8)
    for spec in args.run:
        name, folder = spec.split("=", 1)
        x, y, tasks = point(Path(folder))
        ax.plot(x, y, "*", markersize=14, label=f"{name} (ours; mean of {', '.join(tasks)})")
    ax.set_xscale("log")
    ax.set_xlabel("pretraining FLOPs (official counter)")
    ax.set_ylabel("GLUE dev score")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
