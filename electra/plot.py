"""A PNG of a run's learning curves: generator and discriminator losses, and the discriminator's AUC."""

from __future__ import annotations

from pathlib import Path

from electra.errors import ElectraError
from electra.tracking import read_metrics


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    if not rows:
        raise ElectraError(f"{run_dir}/metrics.jsonl has no metrics yet: train first")
    out = Path(out) if out else run_dir / "learning_curves.png"
    steps = [r["step"] for r in rows]

    def series(key: str) -> list[float]:
        return [float("nan") if r.get(key) is None else r[key] for r in rows]

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(steps, series("mlm_loss"), label="generator MLM loss")
    if any(r.get("disc_loss") is not None for r in rows):
        left.plot(steps, series("disc_loss"), label="discriminator loss (RTD)")
    left.set_xlabel("step")
    left.set_ylabel("loss")
    left.set_yscale("log")
    left.legend()
    left.grid(alpha=0.3)
    for key, label in (
        ("disc_auc", "discriminator AUC"),
        ("disc_acc", "discriminator accuracy"),
        ("mlm_acc", "generator MLM accuracy"),
    ):
        if any(r.get(key) is not None for r in rows):
            right.plot(steps, series(key), label=label)
    right.set_xlabel("step")
    right.set_ylim(0, 1)
    right.legend()
    right.grid(alpha=0.3)
    fig.suptitle(f"ELECTRA pretraining: {run_dir.resolve().parent.name}/{run_dir.name}")
    fig.tight_layout()
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)
    return out
