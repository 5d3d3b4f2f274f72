"""How well the held-out verdict predicts transfer: each arm of an `electra experiment` folder
(scored with `--score finetune` or `both`), its held-out history judged again by today's
`electra.scoring.verdict`, beside its fine-tuned score against the same architecture's random
weights (`electra finetune --random-init` folders, one per family), compared by the seed-spread
rule (`electra.scoring.spread`), and its mean-pooled probe beside random weights where the
experiment probed too. It prints a markdown table and how often "collapsed" was said of
the arms that fine-tune worse than random weights, and of those that do not.

    python benchmarks/instruments.py XP --task sst2 \\
        --random electra=random-ft-electra --random modernbert=random-ft-modern
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from electra.engine.tracking import HELDOUT, read_metrics
from electra.scoring.health import Health
from electra.scoring.spread import BETTER, WORSE, compared, difference
from electra.scoring.verdict import judge


def seeds_of(results: Path) -> list[float]:
    """A fine-tuned folder's main metric, seed by seed."""
    r = json.loads(results.read_text())
    return [s["metrics"][r["main_metric"]] for s in r["per_seed"]]


def arm_row(arm: Path, info: dict, task: str, random: dict[str, list[float]]) -> dict | None:
    history = [(r["step"], Health.from_record(r)) for r in read_metrics(arm / "pretrain", HELDOUT)]
    tuned = arm / f"step_{info['steps']}" / "finetune" / task / "results.json"
    if not history or not tuned.is_file():
        return None
    start, last = history[0][1], history[-1][1]
    scores, base = seeds_of(tuned), random[info.get("arch", "electra")]
    d = difference(scores, base)
    verdict = judge(history)
    probed = tuned.parents[2] / "probe" / task / "summary.json"
    probe = None
    if probed.is_file():  # the mean-pooled probe beside the same architecture's random weights
        row = json.loads(probed.read_text())
        probe = compared(row["features"]["mean"], row["random"]["mean"])
    return {
        "arm": arm.name,
        "auc": last.disc_auc,
        "fixed": last.disc_auc_fixed,
        "mlm": f"{start.mlm_loss:.2f} → {last.mlm_loss:.2f}",
        "cosine": f"{start.mean_cosine:.2f} → {last.mean_cosine:.2f}",
        "rank": f"{start.effective_rank:.0f} → {last.effective_rank:.0f}",
        "verdict": verdict.name
        + (f" ({verdict.history.split(':')[0]})" if verdict.history else ""),
        "tuned": scores,
        "vs_random": d,
        "below": statistics.median(scores) < statistics.median(base),
        "probe": probe,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("xp", type=Path)
    p.add_argument("--task", default="sst2")
    p.add_argument("--random", action="append", required=True, help="ARCH=FINETUNED_FOLDER")
    args = p.parse_args()
    random = {a: seeds_of(Path(f) / "results.json") for a, f in (x.split("=") for x in args.random)}
    arms = json.loads((args.xp / "experiment.json").read_text())["arms"]
    rows = [arm_row(args.xp / "arms" / n, i, args.task, random) for n, i in sorted(arms.items())]
    rows = [r for r in rows if r and r["auc"] is not None]  # RTD arms: a discriminator judged
    print(
        "| arm | held-out AUC | fixed | generator MLM loss | mean cosine | effective rank |"
        f" verdict | {args.task} fine-tuned | vs random weights | probe vs random |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s, d, pr = r["tuned"], r["vs_random"], r["probe"]
        print(
            f"| {r['arm']} | {r['auc']:.3f} | {r['fixed']:.3f} | {r['mlm']} | {r['cosine']} | "
            f"{r['rank']} | {r['verdict']} | {statistics.median(s):.1f} ({min(s):.1f}–{max(s):.1f})"
            f" | {d.gain:+.1f}{d.mark} | " + (f"{pr.gain:+.1f}{pr.mark} |" if pr else "– |")
        )
    for a, s in random.items():
        print(f"random weights ({a}): {statistics.median(s):.1f} ({min(s):.1f}–{max(s):.1f})")
    said = [r for r in rows if r["verdict"].startswith("collapsed")]
    worse = [r for r in rows if r["vs_random"].shown == WORSE]
    below = [r for r in rows if r["below"]]
    print(
        f"\n{len(rows)} arms; collapsed said of {len(said)}. Worse than random weights beyond the"
        f" seed spread: {len(worse)}, of which collapsed {sum(r in said for r in worse)}; median"
        f" below random's: {len(below)}, of which collapsed {sum(r in said for r in below)}; "
        f"collapsed but not below: {sum(r not in below for r in said)}; better beyond the spread: "
        f"{sum(r['vs_random'].shown == BETTER for r in rows)}."
    )


if __name__ == "__main__":
    main()
