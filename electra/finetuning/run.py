"""`finetune`: load the pretrained encoder and the task's data, then for each seed build the head,
train, predict the dev set and score it; report the median and spread over seeds, as the paper
does. Each seed's folder is a complete fine-tuned model with its `results.json`."""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
import torch

from electra.atomic import (
    replace_dir,
    temporary_dir,
    write_json_atomic,
)
from electra.engine.graphs import check_graphable
from electra.engine.runtime import Runtime
from electra.errors import ElectraError
from electra.finetuning.baselines import baseline_scores, baseline_warning, judge
from electra.finetuning.dev_split import (
    SPLIT_FILE,
    HeldOut,
    draw,
    file_sha256,
    no_dev_error,
    one_file_as_train,
    trained_on,
)
from electra.finetuning.loop import train_model
from electra.finetuning.overlap import row_keys, screen
from electra.finetuning.results import (
    check_unique_ids,
    evaluate_sets,
    read_split,
    read_train,
    summarize,
)
from electra.folders.finetuned import FINETUNE_FILE, save_finetuned
from electra.hf.from_transformers import load_encoder
from electra.jsonl import read_jsonl, write_jsonl
from electra.locks import claim_output
from electra.model.configs import AnyModelConfig
from electra.model.family import family_of
from electra.tasks import get_task
from electra.tasks.base import Encoded, Task
from electra.tasks.finetune_config import FinetuneConfig, resolve_recipe
from electra.tasks.splits import DataSource, SplitFiles, source_paths


def finished_seed(seed_dir: Path, cfg: FinetuneConfig, source: Path) -> dict | None:
    """The result of a seed an earlier run finished with this exact recipe and model, else None."""
    try:
        saved = json.loads((seed_dir / "results.json").read_text())
        pretrained = json.loads((seed_dir / FINETUNE_FILE).read_text())["pretrained"]
    except (OSError, ValueError, KeyError):
        return None
    if saved.get("config") != json.loads(json.dumps(asdict(cfg))) or pretrained != str(source):
        return None
    return {
        k: saved[k] for k in ("task", "seed", "metrics", "train_loss", "test_metrics") if k in saved
    }


@dataclass
class _Job:
    """What every seed of one `finetune` call shares: the task, the resolved recipe, the pretrained
    encoder, the runtime, and the data with its trivial baseline."""

    task: Task
    cfg: FinetuneConfig
    model_cfg: AnyModelConfig
    encoder_state: dict
    tokenizer: tokenizers.Tokenizer
    source: Path
    runtime: Runtime
    train: list
    dev: dict[str, list]
    fitted: dict | None
    baseline: dict | None
    train_data: Encoded
    dev_data: dict[str, Encoded]
    # An optional test split, predicted by every seed (the tasks on the user's own files).
    test: dict[str, list] = field(default_factory=dict)
    test_data: dict[str, Encoded] = field(default_factory=dict)
    # The files read, by split (and set): kept with each model, for its exported model card.
    data: dict[str, str] = field(default_factory=dict)
    # The training file ({"file", "sha256"}), which `evaluate` refuses to score, and the examples
    # of it held out as dev (`--dev-split`), if any.
    trained_on: dict[str, str] = field(default_factory=dict)
    held_out: HeldOut | None = None
    # The keys of the rows trained on (`electra.finetuning.overlap`), kept with each model, and
    # the dev and test rows found among them: {"dev_dev": {"file", "rows", "examples", "action"}}.
    training_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, "<u8"))
    overlap: dict[str, dict] = field(default_factory=dict)


def finetune(
    model_path: str | Path,
    task_name: str,
    data: DataSource,
    out_dir: str | Path,
    cfg: FinetuneConfig,
    overwrite: bool = False,
    resume: bool = False,
) -> dict[str, Any]:
    """Fine-tunes `cfg.seeds` times and scores each on the dev split; returns the summary that is
    also written to OUT/results.json. With `resume`, seeds that an interrupted run with the same
    recipe and model already finished (in OUT's hidden .tmp folder) are kept, not retrained."""
    out_dir = Path(out_dir)
    reads = [model_path, *source_paths(data)]
    # One writer; an existing OUT only with `overwrite`, and only a fine-tuned one.
    with claim_output(out_dir, overwrite, reads=reads, replaces=("results.json",)):
        job = _finetune_job(model_path, task_name, data, cfg)
        tmp = temporary_dir(out_dir)
        if not resume:
            shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True, exist_ok=True)
        if job.held_out:
            _keep_held_out(job.held_out, tmp / SPLIT_FILE)
        seeds = range(job.cfg.seed, job.cfg.seed + job.cfg.seeds)
        per_seed = [_finetune_seed(job, seed, tmp / f"seed_{seed}") for seed in seeds]

        results = _finetune_results(job, per_seed)
        write_json_atomic(tmp / "results.json", results)
        replace_dir(tmp, out_dir)
    return results


def _keep_held_out(held_out: HeldOut, path: Path) -> None:
    """Saves the dev split with the run; a resumed run must have drawn the same one."""
    if path.is_file() and HeldOut.from_json(json.loads(path.read_text())) != held_out:
        raise ElectraError(
            f"{held_out.file} changed since the interrupted run drew its dev split: fine-tune "
            "again without --resume"
        )
    write_json_atomic(path, held_out.to_json())


def _finetune_job(
    model_path: str | Path, task_name: str, data: DataSource, cfg: FinetuneConfig
) -> _Job:
    """Loads the encoder, resolves the recipe and device, reads and encodes the task's data."""
    task = get_task(task_name, cfg)
    model_cfg, encoder_state, tokenizer, source = load_encoder(model_path)
    cfg = resolve_recipe(cfg, model_cfg, task.epochs, task.max_seq_len)
    model_cfg = with_dropout(model_cfg, cfg.dropout)
    check_head(task, model_cfg)
    runtime = Runtime.from_config(cfg)
    runtime.check_model(model_cfg)  # its attention path: before anything is written
    check_graphable(cfg, runtime.device)

    files = task.resolve(one_file_as_train(data))  # the one look-up of the split files
    task, trained, train, dev, held_out = _train_and_dev(task, files, cfg, tokenizer)
    train = _train_examples(task, train, cfg)
    training_rows = row_keys(task, train, tokenizer)
    dev, test, overlap = _held_out_sets(task, tokenizer, files, training_rows, dev, held_out, cfg)
    fitted = task.baseline(train)
    baseline = baseline_scores(task, fitted, dev)
    train_data = task.encode(train, tokenizer, cfg.max_seq_len, training=True)
    dev_data = {
        k: task.encode(v, tokenizer, cfg.max_seq_len, training=False) for k, v in dev.items()
    }
    init = "random initialization" if cfg.random_init else str(source)
    print(
        f"{task.name}: {len(train)} training examples, {cfg.epochs} epochs, lr {cfg.lr:g}, "
        f"layer decay {cfg.layerwise_lr_decay:g}, from {init}",
        file=sys.stderr,
    )
    return _Job(
        task=task,
        cfg=cfg,
        model_cfg=model_cfg,
        encoder_state=encoder_state,
        tokenizer=tokenizer,
        source=source,
        runtime=runtime,
        train=train,
        dev=dev,
        fitted=fitted,
        baseline=baseline,
        train_data=train_data,
        dev_data=dev_data,
        test=test,
        test_data={
            k: task.encode(v, tokenizer, cfg.max_seq_len, training=False) for k, v in test.items()
        },
        data=data_files(
            files, ["train", *([] if held_out else ["dev"]), *(["test"] if test else [])]
        ),
        trained_on=trained,
        held_out=held_out,
        training_rows=training_rows,
        overlap=overlap,
    )


def with_dropout(model_cfg: AnyModelConfig, dropout: float) -> AnyModelConfig:
    """The encoder's config with the recipe's `dropout` everywhere it drops: its family's
    `dropout_fields`, so that --dropout means the same on every family."""
    names = family_of(model_cfg).dropout_fields
    return replace(model_cfg, **dict.fromkeys(names, dropout))


def check_head(task: Task, model_cfg: AnyModelConfig) -> None:
    """Refuses, before any data is read or anything written, a head the encoder's family has not
    (the official QA head on the modern family): the head is built once on the meta device, which
    costs nothing and draws no random numbers."""
    # Not fitted yet, a task may have no labels: its classifier has no outputs, a warning.
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        task.build_model(model_cfg)


def data_files(files: SplitFiles, splits: list[str]) -> dict[str, str]:
    """{split (or split_set, MNLI's dev_matched): the file read} of the splits read; a dev split
    held out of the training file is named as such."""
    read = {}
    if "dev" not in splits:
        read["dev"] = "held out of the training file by --dev-split"
    for split in splits:
        found = files[split]
        for name, path in found.items():
            read[split if len(found) == 1 else f"{split}_{name}"] = str(path)
    return read


def _held_out_sets(
    task: Task,
    tokenizer: tokenizers.Tokenizer,
    files: SplitFiles,
    training_rows: np.ndarray,
    dev: dict[str, list],
    held_out: HeldOut | None,
    cfg: FinetuneConfig,
) -> tuple[dict[str, list], dict[str, list], dict[str, dict]]:
    """The dev and test sets with no training row in them (`electra.finetuning.overlap.screen`:
    the rows found are refused, or dropped with --drop-overlap, or noted in a benchmark's
    published splits), and what was found, by set as `results.json`'s `examples` names them."""
    train_file = files.file("train")
    trained = np.unique(training_rows)
    whose = f"rows of the training file {train_file}"
    sets = {"dev": dev, "test": _test_examples(task, files)}
    found: dict[str, dict] = {}
    for split, by_name in sets.items():
        for name, examples in by_name.items():
            if split == "dev" and held_out:
                where = f"the dev split held out of {train_file}"
            else:
                where = str(files[split][name])
            by_name[name], found[f"{split}_{name}"] = screen(
                task, tokenizer, examples, trained, where, whose, cfg.drop_overlap, set_name=name
            )
    return sets["dev"], sets["test"], {k: v for k, v in found.items() if v}


def _test_examples(task: Task, files: SplitFiles) -> dict[str, list]:
    """The test split where the task predicts one while fine-tuning and the data holds one: read
    with the others, before anything is written, so that a bad test file stops the run too."""
    if not task.finetune_test or not files.has("test"):
        return {}
    return read_split(task, files, "test")


def _train_and_dev(
    task: Task, files: SplitFiles, cfg: FinetuneConfig, tokenizer: tokenizers.Tokenizer
) -> tuple[Task, dict[str, str], list, dict[str, list], HeldOut | None]:
    """The task fitted to the training file, the training file ({"file", "sha256"}, hashed once)
    and its examples, and the dev sets: the data's own dev files, or with `cfg.dev_split` a seeded
    part of the training examples held out (`electra.finetuning.dev_split`). Data without a dev
    split is refused unless `dev_split` says what to hold out."""
    task, train = read_train(task, files)
    train_file = files.file("train")
    trained = {"file": str(train_file), "sha256": file_sha256(train_file)}
    if files.has("dev"):
        if cfg.dev_split is not None:
            raise ElectraError(
                f"--dev-split holds out a dev split where the data has none, and "
                f"{files.file('dev')} is one: drop --dev-split, or pass the training file alone "
                "(--train FILE)"
            )
        for dev_file in files["dev"].values():
            if trained_on(dev_file, trained):
                raise ElectraError(
                    f"{dev_file} holds what the training file {train_file} holds: a dev score "
                    "on it would be on training examples; pass another --dev FILE, or "
                    "--dev-split 0.1 with the training file alone"
                )
        return task, trained, train, read_split(task, files, "dev"), None
    if cfg.dev_split is None:
        expected = [n for names in task.files.get("dev", {}).values() for n in names]
        raise no_dev_error(files.source, train_file, task.name, expected)
    if len(task.files.get("dev", {})) > 1:
        raise ElectraError(
            f"{task.name}'s dev split has {len(task.files['dev'])} sets "
            f"({', '.join(task.files['dev'])}): pass its folder as --data, not --dev-split"
        )
    keys = row_keys(task, train, tokenizer)
    held_out = draw(train_file, trained["sha256"], keys, cfg.dev_split, cfg.seed)
    train, dev = held_out.split(train)
    check_unique_ids(train_file, dev)
    print(held_out.describe(), file=sys.stderr)
    return task, trained, train, {task.dev_set: dev}, held_out


def _train_examples(task: Task, train: list, cfg: FinetuneConfig) -> list:
    """The training examples, doubled for unordered pairs and subsampled as the recipe says."""
    if cfg.double_unordered:
        train = task.double_unordered(train)
    if cfg.max_train_examples is not None and cfg.max_train_examples < len(train):
        keep = torch.randperm(len(train), generator=torch.Generator().manual_seed(cfg.seed))
        train = [train[i] for i in sorted(keep[: cfg.max_train_examples].tolist())]
    return train


def _finetune_seed(job: _Job, seed: int, seed_dir: Path) -> dict:
    """One seed's result, judged against the baseline: kept when an interrupted run finished it,
    else trained, scored and written to `seed_dir`."""
    task, cfg = job.task, job.cfg
    result = finished_seed(seed_dir, cfg, job.source)
    if result is not None and bool(job.test) != ("test_metrics" in result):
        # Finished with another set of files: keeping it would leave its test predictions out.
        print(f"seed {seed}: trained again, the test file differs from the run", file=sys.stderr)
        result = None
    if result is not None:
        predictions = read_jsonl(seed_dir / "predictions.jsonl")
        result |= judge(task.main_metric, job.baseline, result["metrics"], predictions)
        print(f"seed {seed}: kept from the interrupted run in {seed_dir}", file=sys.stderr)
    else:
        result, predictions = _train_seed(job, seed, seed_dir)
    if warning := baseline_warning(seed, task.main_metric, job.baseline, result, predictions, cfg):
        print(warning, file=sys.stderr)
    return result


def _train_seed(job: _Job, seed: int, seed_dir: Path) -> tuple[dict, list[dict]]:
    """Trains and scores one seed into a fresh `seed_dir`; its result and dev predictions."""
    task, cfg, runtime = job.task, job.cfg, job.runtime
    shutil.rmtree(seed_dir, ignore_errors=True)
    torch.manual_seed(seed)
    model = task.build_model(job.model_cfg)
    if not cfg.random_init:
        missing, unexpected = model.load_state_dict(job.encoder_state, strict=False)
        # Every encoder weight loads; the head is new, a pooler (BERT's) its first layer.
        prefix = f"{model.base_model_prefix}."
        encoder = [k for k in missing if k.startswith(prefix) and ".pooler." not in f".{k}"]
        assert not unexpected and not encoder, (unexpected, encoder)
    model = runtime.prepare(model)
    losses = train_model(task, model, job.train_data, cfg, runtime, seed)
    scores, predictions = evaluate_sets(task, model, job.dev, job.dev_data, runtime)
    if job.test:  # before the model leaves the device for saving
        test_scores, test_rows = evaluate_sets(task, model, job.test, job.test_data, runtime)
    save_finetuned(
        model.cpu(),
        task,
        job.tokenizer,
        cfg,
        seed_dir,
        job.source,
        job.fitted,
        job.data,
        job.trained_on,
        job.held_out.to_json() if job.held_out else None,
        job.training_rows,
    )
    write_jsonl(seed_dir / "predictions.jsonl", predictions)
    result = {"task": task.name, "seed": seed, "metrics": scores, "train_loss": losses}
    if job.test:
        write_jsonl(seed_dir / "test_predictions.jsonl", test_rows)
        result["test_metrics"] = test_scores  # empty for an unlabelled test file
    result |= judge(task.main_metric, job.baseline, scores, predictions)
    # Written last: a seed folder with results.json is complete (see finished_seed).
    write_json_atomic(seed_dir / "results.json", {**result, "config": asdict(cfg)})
    shown = ", ".join(f"{k} {v:.2f}" for k, v in scores.items())
    print(f"seed {seed}: {shown}", file=sys.stderr)
    return result, predictions


def _finetune_results(job: _Job, per_seed: list[dict]) -> dict[str, Any]:
    """The run's results.json: median and spread over seeds, the baseline, the best seed."""
    task, cfg = job.task, job.cfg
    medians, spread = summarize(per_seed)
    best = max(per_seed, key=lambda s: s["metrics"][task.main_metric])
    return {
        "task": task.name,
        "model": str(job.source),
        "random_init": cfg.random_init,
        "main_metric": task.main_metric,
        "metrics": medians,
        "spread": spread,
        "baseline": job.baseline,
        "seeds_not_beating_baseline": [s["seed"] for s in per_seed if s["beats_baseline"] is False],
        "seeds": [s["seed"] for s in per_seed],
        "per_seed": per_seed,
        "best_seed_dir": f"seed_{best['seed']}",
        "examples": {
            "train": len(job.train),
            **{f"dev_{k}": len(v) for k, v in job.dev.items()},
            **{f"test_{k}": len(v) for k, v in job.test.items()},
        },
        **_test_summary(per_seed),
        **({"dev_split": job.held_out.describe()} if job.held_out else {}),
        **({"held_out_overlap": job.overlap} if job.overlap else {}),
        "config": asdict(cfg),
    }


def _test_summary(per_seed: list[dict]) -> dict[str, Any]:
    """The median test metrics over seeds, where a labelled test file was predicted."""
    if not all(s.get("test_metrics") for s in per_seed):
        return {}
    medians, spread = summarize([{"metrics": s["test_metrics"]} for s in per_seed])
    return {"test_metrics": medians, "test_spread": spread}
