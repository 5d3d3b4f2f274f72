"""A PNG of a run's learning curves: generator and discriminator losses, the discriminator's AUC
and accuracy beside the always-"original" baseline, and a note where the AUC dips."""

from __future__ import annotations

from pathlib import Path

from electra.atomic import atomic_path
from electra.engine.tracking import read_metrics
from electra.errors import ElectraError


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
    _baseline_and_dip(right, steps, rows, series)
    right.set_xlabel("step")
    right.set_ylim(0, 1)
    right.legend()
    right.grid(alpha=0.3)
    fig.suptitle(f"ELECTRA pretraining: {run_dir.resolve().parent.name}/{run_dir.name}")
    fig.tight_layout()
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return out


def _baseline_and_dip(ax, steps: list, rows: list[dict], series) -> None:
    """What the discriminator's accuracy must beat (answering "original" everywhere scores one
    minus the replaced share), and why its AUC may fall after a peak."""
    if any(r.get("replaced_frac") is not None for r in rows):
        always = [1 - f for f in series("replaced_frac")]
        ax.plot(steps, always, ":", color="gray", label='always "original" (accuracy baseline)')
    aucs = series("disc_auc")
    finite = [(a, i) for i, a in enumerate(aucs) if a == a]  # NaN != NaN
    if not finite:
        return
    peak, at = max(finite)
    if aucs[-1] < peak - 0.02:
        ax.annotate(
            "AUC dips as the generator improves:\nits replacements get harder to spot",
            xy=(steps[at], peak),
            xytext=(0.35, 0.12),
            textcoords="axes fraction",
            arrowprops={"arrowstyle": "->", "color": "gray"},
            fontsize=8,
        )
