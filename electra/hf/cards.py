"""The model card (README.md) of an exported fine-tuned model: what it is, where it came from, how
it was trained, how well it did on dev (per seed), and how to run it with `transformers`."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from electra.model.hf_names import family_of_type, hf_families


def model_card(source: Path, task, info: dict, config: dict, cfg) -> str:
    """README.md for the export: what the model is, where it came from, how it was trained, how
    well it did on dev (per seed), and how to run it."""
    arch = config["architectures"][0]
    family = hf_families()[config["model_type"]]
    pipeline = family.task_head(arch).pipeline
    labels = list(config.get("id2label", {}).values())
    lines = [
        "---",
        "library_name: transformers",
        f"pipeline_tag: {pipeline}",
        f"tags: [{family.model_type}]",
        "---",
        "",
        f"# {_title(config)} fine-tuned for {task.name}",
        "",
        f"- **Task:** {task.name} ({config.get('problem_type') or task.family}), "
        f"`{arch}` in `transformers`",
        f"- **Base model:** `{info.get('pretrained', 'unknown')}`",
        f"- **Labels:** {', '.join(f'`{x}`' for x in labels) if labels else 'answer spans'}",
        f"- **Data:** {_data_line(source, info)}",
        f"- **Exported from:** `{source}` by `electra export`",
        "",
        *_head_note(pipeline, config),
        "## Dev results",
        "",
        *_metric_lines(source, task),
        "",
        "## Recipe",
        "",
        "```json",
        json.dumps(asdict(cfg), indent=2, sort_keys=True),
        "```",
        "",
        "## Use",
        "",
        "```python",
        "from transformers import pipeline",
        f'model = pipeline("{pipeline}", model="PATH/TO/THIS/FOLDER")',
        "# truncation=True cuts inputs longer than the model's "
        f"{cfg.max_seq_len} tokens, as fine-tuning did",
        "```",
        "",
    ]
    return "\n".join(lines)


def _data_line(source: Path, info: dict) -> str:
    data = info.get("data")
    if data is None:
        run = _run_results(source)
        data = (run or {}).get("data")
    if not data:
        return "not recorded with the model (see the fine-tuning command)"
    if isinstance(data, dict):
        return ", ".join(f"{split}: `{path}`" for split, path in data.items())
    return f"`{data}`"


def _title(config: dict) -> str:
    """What the encoder is, by its family (how it was pretrained, RTD or a hub model's MLM, the
    base model line says)."""
    names = hf_families()[config["model_type"]]
    return names.card_title or family_of_type(names.model_type).title


def _head_note(pipeline: str, config: dict) -> list[str]:
    """The family's paragraph on how the shipped head relates to the fine-tuned one."""
    note = hf_families()[config["model_type"]].card_note
    return note(pipeline, config) if note is not None else []


def _run_results(source: Path) -> dict | None:
    """The finetune --out folder's results.json, when `source` is one of its seeds."""
    for path in (source / "results.json", source.parent / "results.json"):
        try:
            results = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if "per_seed" in results:
            return results
    return None


def _metric_lines(source: Path, task) -> list[str]:
    run = _run_results(source)
    if run is None:
        try:
            seed = json.loads((source / "results.json").read_text())
        except (OSError, ValueError):
            return ["No dev results were kept with the model."]
        run = {"per_seed": [seed], "metrics": seed.get("metrics", {})}
    per_seed = run["per_seed"]
    names = list(per_seed[0].get("metrics", {}))
    rows = ["| seed | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for s in per_seed:
        values = " | ".join(f"{s['metrics'][n]:.2f}" for n in names)
        mark = " (this model)" if f"seed_{s.get('seed')}" == source.name else ""
        rows.append(f"| {s.get('seed')}{mark} | {values} |")
    if len(per_seed) > 1:
        rows.append("| median | " + " | ".join(f"{run['metrics'][n]:.2f}" for n in names) + " |")
    return [f"Main metric: {task.main_metric}.", "", *rows]
