"""A PNG of a run's learning curves: generator and discriminator losses, the discriminator's AUC
and accuracy beside the always-"original" baseline, and a note where the AUC dips; with held-out
measurements (`pretrain --eval-data`), a third panel of them: held-out AUC and how alike the
discriminator's states have grown (mean cosine, effective rank as a share of the width)."""

from __future__ import annotations

from pathlib import Path

from electra.atomic import atomic_path
from electra.engine.tracking import HELDOUT, read_metrics
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

    heldout = read_metrics(run_dir, HELDOUT)
    fig, axes = plt.subplots(1, 3 if heldout else 2, figsize=(16 if heldout else 11, 4))
    left, right = axes[:2]
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
    if heldout:
        _heldout_panel(axes[2], heldout)
    fig.suptitle(f"ELECTRA pretraining: {run_dir.resolve().parent.name}/{run_dir.name}")
    fig.tight_layout()
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return out


def _baseline_and_dip(ax, steps: list, rows: list[dict], series) -> None:
    """What the discriminator's accuracy must beat (answering "original" everywhere scores one
    minus the replaced share), and why its AUC may fall after a peak: harder replacements, or a
    discriminator that has collapsed to answering the replaced share everywhere (docs/pretraining.md
    §Held-out health)."""
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
            "AUC dips as the generator improves (its replacements\nget harder to spot), or as the "
            "discriminator collapses\n(--eval-data measures which)",
            xy=(steps[at], peak),
            xytext=(0.35, 0.12),
            textcoords="axes fraction",
            arrowprops={"arrowstyle": "->", "color": "gray"},
            fontsize=8,
        )


def _heldout_panel(ax, rows: list[dict]) -> None:
    """The held-out measurements: ranking on unseen text, and the collapse figures (a mean cosine
    near 1 and few directions used: every token alike)."""
    steps = [r["step"] for r in rows]
    for key, label in (
        ("disc_auc", "held-out AUC"),
        ("mlm_acc", "held-out MLM accuracy"),
        ("mean_cosine", "mean cosine between tokens' states"),
    ):
        if any(r.get(key) is not None for r in rows):
            ax.plot(steps, [r.get(key, float("nan")) for r in rows], marker="o", label=label)
    ranks = [r["effective_rank"] / r["hidden_size"] for r in rows if r.get("hidden_size")]
    if len(ranks) == len(rows):
        ax.plot(steps, ranks, marker="o", label="effective rank / hidden size")
    ax.set_xlabel("step")
    ax.set_ylim(0, 1.05)
    ax.set_title("held-out text")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
