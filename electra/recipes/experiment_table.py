"""`electra experiment`'s results.md: each arm's last point, fine-tuned (task medians over the
seeds, a median no better than the task's trivial baseline marked) and probed frozen (each pooling
beside the same architecture's random weights)."""

from __future__ import annotations

from typing import Any

from electra.scoring.spread import MIN_SEEDS, compared
from electra.tasks.glue import GLUE


def score_name(plan: Any) -> str:
    """What the mean of the task medians is called: GLUE when every task is GLUE's."""
    return "GLUE" if all(t in GLUE for t in plan.tasks) else "mean"


def counted_in(resolved: dict[str, Any]) -> str:
    """The convention the budget counts in (experiment.json names it only where it is not the
    official one, so that an ELECTRA-only experiment.json reads as before)."""
    return resolved.get("convention", "official")


# The mark of a task median at or below the task's trivial baseline, explained under the table.
AT_BASELINE = "†"


def at_baseline(row: dict[str, Any]) -> bool:
    """Whether a task's median is no better than its trivial baseline's score (a model answering
    one class everywhere scores exactly that). A summary without a baseline is never marked."""
    return row.get("baseline") is not None and row["median"] <= row["baseline"]


def table_lines(
    plan: Any, resolved: dict[str, Any], table: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """results.md: the budget, then the fine-tuning table, the probe table or both, as the plan
    scores its points."""
    budget = (
        f"Budget: {resolved['budget']:.3g} training FLOPs per arm "
        f"({counted_in(resolved)} convention)."
    )
    finetuned = finetune_lines(plan, resolved, table) if plan.score != "probe" else []
    probed = probe_lines(plan, resolved, table) if plan.score != "finetune" else []
    return [budget, "", *finetuned, *([""] if finetuned and probed else []), *probed]


def last_point(rows: list[dict[str, Any]], info: dict[str, Any]) -> dict[str, Any] | None:
    """An arm's point at its whole budget, once scored."""
    return rows[-1] if rows and rows[-1]["step"] == info["steps"] else None


def finetune_lines(
    plan: Any, resolved: dict[str, Any], table: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """Each arm's last point fine-tuned, a median at or below its baseline marked and the
    baselines it failed to beat named under the table."""
    archs = any("arch" in info for info in resolved["arms"].values())  # a modern arm: say which
    lines = [
        f"Fine-tuned: median of {plan.seeds} fine-tuning seeds (min–max); {score_name(plan)} = "
        "mean of the task medians.",
        "",
        "| arm | "
        + ("arch | " if archs else "")
        + "objective | steps | train FLOPs | "
        + " | ".join(plan.tasks)
        + f" | {score_name(plan)} |",
        "|---|---|---|---|" + "---|" * (len(plan.tasks) + archs) + "---|",
    ]
    failed: dict[str, dict[str, Any]] = {}  # task -> a marked row (its baseline and rule)
    first = last_point(table[plan.arms[0].label], resolved["arms"][plan.arms[0].label])
    compared_any = False
    for arm in plan.arms:
        info = resolved["arms"][arm.label]
        arch = f"{info['arch']} | " if archs else ""
        last = last_point(table[arm.label], info)
        cells = []
        for task in plan.tasks:
            r = last["tasks"].get(task) if last else None
            if r is None:
                cells.append("…")
                continue
            marked = at_baseline(r)
            if marked:
                failed.setdefault(task, r)
            mark = f" {AT_BASELINE}" if marked else ""
            ref = (first or {}).get("tasks", {}).get(task)
            if ref is not None and arm is not plan.arms[0]:
                mark += compared(r, ref).mark
                compared_any = True
            cells.append(f"{r['median']:.1f} ({r['min']:.1f}–{r['max']:.1f}){mark}")
        glue = f"{last['glue']:.1f}" if last and last["glue"] is not None else "…"
        lines.append(
            f"| {arm.label} | {arch}{info['objective']} | {info['steps']} | "
            f"{info['train_flops']:.3g} | " + " | ".join(cells) + f" | {glue} |"
        )
    return (
        lines
        + spread_note(f"the first arm's ({plan.arms[0].label})", compared_any)
        + baseline_note(failed)
    )


def spread_note(against: str, shown: bool) -> list[str]:
    """The footnote to ▲ and ▼, where a table compares scores over seeds."""
    if not shown:
        return []
    return [
        "",
        f"▲ ▼ Above or below {against} beyond the seed spread: every seed's score on one side "
        f"of every seed's on the other, with {MIN_SEEDS} or more seeds a side (docs/objectives.md "
        "§Differences beyond the seed spread). An unmarked difference is within the spread: no "
        "difference shown.",
    ]


def baseline_note(failed: dict[str, dict[str, Any]]) -> list[str]:
    """The footnote to the marked medians: each task's baseline and what it predicts."""
    if not failed:
        return []
    bars = "; ".join(
        f"{task} {r['baseline']:.1f}"
        + (f", by predicting {r['baseline_rule']}" if r.get("baseline_rule") else "")
        for task, r in failed.items()
    )
    return [
        "",
        f"{AT_BASELINE} At or below the trivial baseline ({bars}): no better than one answer "
        "for every example (results.json lists the seeds that did not beat it), so the arm's "
        "pretraining gave that task nothing its fine-tuning could use.",
    ]


def probe_lines(
    plan: Any, resolved: dict[str, Any], table: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """Each arm's last point probed frozen: per task and pooling, the pretrained features'
    median beside the same architecture's random weights', and the difference."""
    lines = [
        f"Probed frozen (`electra probe`): a linear classifier on each pooling of the final states, "
        f"median of {plan.seeds} seeds (min–max) of the task's metric, beside the arm's "
        "architecture from random weights.",
        "",
        "| arm | objective | task | pooling | pretrained | random weights | difference |",
        "|---|---|---|---|---|---|---|",
    ]
    spread = "{0[median]:.1f} ({0[min]:.1f}–{0[max]:.1f})"
    compared_any = False
    for arm in plan.arms:
        info = resolved["arms"][arm.label]
        last = last_point(table[arm.label], info)
        for task in plan.tasks:
            row = (last or {}).get("probes", {}).get(task)
            if row is None:
                lines.append(f"| {arm.label} | {info['objective']} | {task} | … | … | … | … |")
                continue
            for pooling, got in sorted(row["features"].items(), key=_pooling_order):
                random = row["random"].get(pooling)
                cells = [spread.format(got), spread.format(random) if random else "–"]
                if random:
                    d = compared(got, random)
                    cells.append(f"{d.gain:+.1f}{d.mark}")
                    compared_any = True
                else:
                    cells.append("–")
                lines.append(
                    f"| {arm.label} | {info['objective']} | {task} | {pooling} | "
                    + " | ".join(cells)
                    + " |"
                )
    return lines + spread_note("random weights", compared_any)


def _pooling_order(item: tuple[str, Any]) -> int:
    """Mean-pooled before first-token, as `electra probe` shows them; any other kind after."""
    return ("mean", "first").index(item[0]) if item[0] in ("mean", "first") else 2
