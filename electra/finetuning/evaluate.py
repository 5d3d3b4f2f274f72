"""`evaluate`: score a fine-tuned model on a split it did not train on: no row of any split it
reads is one the model trained on (`electra.finetuning.overlap`), whatever file it is in."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import tokenizers

from electra.atomic import (
    atomic_dir,
    write_json_atomic,
)
from electra.config import InferenceRuntime
from electra.errors import ElectraError
from electra.finetuning.baselines import baseline_scores, judge
from electra.finetuning.dev_split import (
    HeldOut,
    trained_on,
)
from electra.finetuning.overlap import load_rows, screen
from electra.finetuning.results import evaluate_sets, read_file
from electra.hf.finetuned import (
    finetuned_dir,
    load_for_inference,
    read_finetune_info,
)
from electra.jsonl import write_jsonl
from electra.tasks import get_task
from electra.tasks.base import Task
from electra.tasks.splits import DataSource, SplitFiles


def unseen_sets(
    task: Task, data: SplitFiles, split: str, info: dict[str, Any], source: Path
) -> tuple[dict[str, list], dict[str, Path]]:
    """The examples of a split that `evaluate` scores, and their files, by set: `read_split`'s,
    except that the file the model trained on is refused, or, where its dev split was held out of
    that file (or the data has no dev file), stands for the held-out examples only
    (`electra.finetuning.dev_split`)."""
    held = HeldOut.from_json(info["dev_split"]) if info.get("dev_split") else None
    if split == "dev" and held and not data.has("dev"):  # a folder without dev.*
        files = {task.dev_set: data.file("train")}
    else:
        files = data[split]
    sets = {}
    for name, path in files.items():
        if not trained_on(path, info.get("trained_on")):
            sets[name] = read_file(task, path, split)
        elif held and split == "dev":
            sets[name] = held.split(read_file(task, path, "train"))[1]
            print(
                f"{path}: scoring the {len(sets[name])} examples held out as dev", file=sys.stderr
            )
        else:
            raise ElectraError(
                f"{path} is the file {source} was fine-tuned on: a score on it would be on "
                "training examples; pass a file it did not train on"
            )
    return sets, files


def without_training_rows(
    task: Task,
    tokenizer: tokenizers.Tokenizer,
    sets: dict[str, list],
    files: dict[str, Path],
    source: Path,
    info: dict[str, Any],
    drop: bool,
) -> dict[str, dict]:
    """Screens each set against the keys of the rows the model trained on (in place: the rows
    found are refused, or dropped with `drop`; a benchmark's published splits keep theirs, noted);
    what was found, by set. A model folder from before the keys were kept has only its training
    file checked (`unseen_sets`), and says so."""
    trained = load_rows(source)
    if trained is None:
        if info.get("trained_on"):
            print(
                f"note: {source} keeps no record of the rows it trained on (fine-tuned by an "
                "earlier version): only its training file itself is refused, not its rows in "
                "another file; fine-tune it again to check row by row",
                file=sys.stderr,
            )
        return {}
    found = {}
    whose = f"rows {source} was fine-tuned on"
    for name, examples in sets.items():
        where = str(files[name])
        sets[name], found[name] = screen(task, tokenizer, examples, trained, where, whose, drop)
    return {k: v for k, v in found.items() if v}


def evaluate(
    model_path: str | Path,
    data: DataSource,
    split: str = "dev",
    out_dir: str | Path | None = None,
    task_name: str | None = None,
    runtime: InferenceRuntime | None = None,
    reading: dict[str, Any] | None = None,
    drop_overlap: bool = False,
) -> dict[str, Any]:
    """Predicts a split with a fine-tuned model: scores (where gold labels are known), per-example
    predictions and, for a test split of a benchmark with a submission format (GLUE's, SQuAD's),
    its submission files, labelled or not: a labelled SQuAD test file gets the official
    predictions.json and null_odds.json to score. A labelled test split is scored as dev is.
    `reading` ({"text_columns", "delimiter", "label_column"}) reads files of your own by other
    columns or separator than the training files' (`Task.read_with`). Rows the model trained on
    are refused, wherever they are, or with `drop_overlap` left out and counted
    (`without_training_rows`)."""
    source = finetuned_dir(model_path)
    task, model, tokenizer, cfg, run_time = load_for_inference(source, runtime)
    if task_name and get_task(task_name).name != task.name:
        raise ElectraError(f"{source} was fine-tuned for {task.name}, not {task_name}")
    if reading and any(reading.values()):  # a value left unset reads as the training files did
        task.read_with(**{k: v for k, v in reading.items() if v})
    files = task.resolve(data)  # the one look-up of the split files
    info = read_finetune_info(source)  # {} for a Hugging Face folder: no baseline, no train file
    sets, set_files = unseen_sets(task, files, split, info, source)
    overlap = without_training_rows(task, tokenizer, sets, set_files, source, info, drop_overlap)
    encoded = {
        k: task.encode(v, tokenizer, cfg.max_seq_len, training=False) for k, v in sets.items()
    }
    scores, predictions = evaluate_sets(task, model, sets, encoded, run_time)
    # None for a model fine-tuned before baselines were kept: its training set is not read here.
    fitted = info.get("baseline")
    baseline = baseline_scores(task, fitted, sets)
    out_dir = Path(out_dir) if out_dir else source / f"eval-{split}"
    with atomic_dir(out_dir) as tmp:
        write_jsonl(tmp / "predictions.jsonl", predictions)
        files = []
        for name in sets:
            rows = [p for p in predictions if p.get("set", name) == name]
            if split == "test" and task.writes_submission:
                files.append(task.write_submission(rows, name, tmp).name)
        results = {
            "task": task.name,
            "model": str(source),
            "split": split,
            "main_metric": task.main_metric,
            "metrics": scores,
            "baseline": baseline,
            **judge(task.main_metric, baseline, scores, predictions),
            "examples": {k: len(v) for k, v in sets.items()},
            **({"held_out_overlap": overlap} if overlap else {}),
            "submission_files": files,
            "config": asdict(cfg),
        }
        write_json_atomic(tmp / "results.json", results)
    return {**results, "out": str(out_dir)}
