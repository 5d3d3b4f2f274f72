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
from electra.finetuning.loading import finetuned_or_hf_dir, load_for_inference
from electra.finetuning.overlap import screen
from electra.finetuning.results import evaluate_sets, read_file
from electra.folders.finetuned import load_rows, read_finetune_info
from electra.jsonl import write_jsonl
from electra.locks import claim_output
from electra.tasks import get_task
from electra.tasks.base import Task
from electra.tasks.splits import DataSource, SplitFiles, source_paths


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
        sets[name], found[name] = screen(
            task, tokenizer, examples, trained, where, whose, drop, set_name=name
        )
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
    overwrite: bool = False,
) -> dict[str, Any]:
    """Predicts a split with a fine-tuned model: scores (where gold labels are known), per-example
    predictions and, for a test split of a benchmark with a submission format (GLUE's, SQuAD's),
    its submission files, labelled or not: a labelled SQuAD test file gets the official
    predictions.json and null_odds.json to score. A labelled test split is scored as dev is.
    `reading` ({"text_columns", "delimiter", "label_column"}) reads files of your own by other
    columns or separator than the training files' (`Task.read_with`). Rows the model trained on
    are refused, wherever they are, or with `drop_overlap` left out and counted
    (`without_training_rows`). The output folder (default MODEL/eval-SPLIT) is held for this
    process alone, and an existing one is replaced only with `overwrite`."""
    source = finetuned_or_hf_dir(model_path)
    out_dir = Path(out_dir) if out_dir else source / f"eval-{split}"
    reads = [source, *source_paths(data)]
    with claim_output(out_dir, overwrite, reads=reads, replaces=("results.json",)):
        task, sets, predictions, results = _scored(
            source, data, split, task_name, runtime, reading, drop_overlap
        )
        with atomic_dir(out_dir) as tmp:
            write_jsonl(tmp / "predictions.jsonl", predictions)
            results["submission_files"] = _submissions(task, split, sets, predictions, tmp)
            write_json_atomic(tmp / "results.json", results)
    return {**results, "out": str(out_dir)}


def _scored(source, data, split, task_name, runtime, reading, drop_overlap) -> tuple:
    """`evaluate`'s task, example sets, predictions and results, before anything is written."""
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
    cut = _say_cut(task, sets, encoded, tokenizer, cfg.max_seq_len)
    scores, predictions = evaluate_sets(task, model, sets, encoded, run_time)
    # None for a model fine-tuned before baselines were kept: its training set is not read here.
    baseline = baseline_scores(task, info.get("baseline"), sets)
    return (
        task,
        sets,
        predictions,
        {
            "task": task.name,
            "model": str(source),
            "split": split,
            "main_metric": task.main_metric,
            "metrics": scores,
            "baseline": baseline,
            **judge(task.main_metric, baseline, scores, predictions),
            "examples": {k: len(v) for k, v in sets.items()},
            **({"held_out_overlap": overlap} if overlap else {}),
            **({"truncated": cut} if cut else {}),
            "config": asdict(cfg),
        },
    )


def _say_cut(task, sets: dict, encoded: dict, tokenizer, max_len: int) -> dict[str, int]:
    """How many inputs of each set were longer than the model's length and cut to it, said on
    stderr as `predict` says it."""
    cut = {}
    for name, examples in sets.items():
        if n := task.truncated(examples, encoded[name], tokenizer, max_len):
            cut[name] = n
            note = task.truncation_note(max_len)
            print(f"warning: {name}: {n} of {len(examples)} inputs {note}", file=sys.stderr)
    return cut


def _submissions(task, split: str, sets: dict, predictions: list[dict], out: Path) -> list[str]:
    """Writes a test split's submission files (GLUE's, SQuAD's) to `out`; returns their names."""
    if split != "test" or not task.writes_submission:
        return []
    names = []
    for name in sets:
        rows = [p for p in predictions if p.get("set", name) == name]
        names.append(task.write_submission(rows, name, out).name)
    return names
