"""The plots of `electra experiment`: each arm's score against pretraining FLOPs, and its
encoder's and generator's losses on the same axis (every arm counted in the budget's convention)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from electra.atomic import atomic_path
from electra.config import RunConfig
from electra.engine.tracking import read_metrics
from electra.objectives.flops import train_flops

# The loss each family of objectives teaches its encoder, for the loss-curve plot.
ENCODER_LOSS = ("disc_loss", "main_loss", "mlm_loss")


def plot_experiment(
    ylabel: str, table: dict[str, list[dict[str, Any]]], out: Path, counted: str = "official"
) -> None:
    """glue_vs_flops.png: a line per arm, its points at FLOPs in the budget's convention."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label, rows in table.items():
        pts = [(r["train_flops"], r["glue"]) for r in rows if r["glue"] is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=label)
    ax.set_xscale("log")
    ax.set_xlabel(f"pretraining FLOPs ({counted} convention)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, out / "glue_vs_flops.png")


def loss_curves(
    out: Path, configs: dict[str, RunConfig], counted: str
) -> dict[str, dict[str, Any]]:
    """Each arm's (by label, `configs`' keys) logged losses against its FLOPs in the budget's convention `counted`:
    {label: {"key": the encoder's loss, "encoder": [(flops, loss)], "generator": [...]}}. The
    FLOPs are priced from each row's step rather than read from the log, where an arm's run may
    count in its own convention (an ELECTRA arm's in the official one, as runs of experiments
    that did not yet give theirs to `pretrain` did): the step means the same in every one."""
    curves = {}
    for label, cfg in configs.items():
        rows = read_metrics(out / "arms" / label / "pretrain")
        key = next((k for k in ENCODER_LOSS if any(k in r for r in rows)), None)
        if key is None:
            continue
        flops = {s: train_flops(cfg, counted, steps=s) for s in {r["step"] for r in rows}}
        generator = "mlm_loss" if key != "mlm_loss" else None  # else MLM is the encoder's loss
        curves[label] = {
            "key": key,
            "encoder": [(flops[r["step"]], r[key]) for r in rows if key in r],
            "generator": [(flops[r["step"]], r[generator]) for r in rows if generator in r],
        }
    return curves


# A line of at most this many logged points marks each: there are few enough to tell apart, and
# a run shorter than train.log_every logs only its last step, a point that a bare line never
# draws. Longer lines are drawn bare, their markers would hide the curve.
MARKED_POINTS = 25


def plot_losses(curves: dict[str, dict[str, Any]], out: Path, counted: str) -> None:
    """losses.png: each arm's encoder loss against FLOPs, and its generator's MLM loss, on the
    x-axis of the table's budget (one convention for every arm)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def draw(ax, pts: list[tuple], label: str) -> None:
        marker = "o" if len(pts) <= MARKED_POINTS else None
        ax.plot(*zip(*pts, strict=True), marker=marker, markersize=4, label=label)

    fig, (enc, gen) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, curve in curves.items():
        draw(enc, curve["encoder"], f"{label} ({curve['key']})")
        if curve["generator"]:
            draw(gen, curve["generator"], label)
    for ax, title in ((enc, "the encoder's loss"), (gen, "the generator's MLM loss")):
        ax.set_xlabel(f"pretraining FLOPs ({counted} convention)")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    _save(fig, out / "losses.png")


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
