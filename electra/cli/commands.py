"""The commands of `electra`: each one reads its flags, calls its function of the Python API
(`electra.api`; `predict` and `demo` the modules that do the work) and prints what it returns."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import fields
from pathlib import Path

from electra.cli.flags import (
    add_config_flags,
    config_flags_given,
    parse_overrides,
    run_config_from_args,
)
from electra.errors import ElectraError


def cmd_tokenizer_train(args: argparse.Namespace) -> None:
    from electra.api import train_tokenizer

    done = train_tokenizer(
        args.corpus,
        args.out,
        vocab_size=args.vocab_size,
        model=args.model,
        lowercase=args.lowercase,
        min_frequency=args.min_frequency,
        overwrite=args.overwrite,
    )
    note = f"note: {done['note']}; " if done["note"] else ""
    print(f"{note}tokenizer with {done['tokens']} tokens -> {done['out']}")


def cmd_prepare(args: argparse.Namespace) -> None:
    from electra.api import prepare

    s = prepare(
        args.corpus,
        args.tokenizer,
        args.out,
        seq_len=args.seq_len,
        seed=args.seed,
        workers=args.workers,
        packing=args.packing,
        overwrite=args.overwrite,
    )
    text = s["text_tokens"]
    kept = text["kept"] / max(text["read"], 1)
    print(
        f"{s['examples']} examples, {s['tokens']} tokens in {s['shards']} shards from "
        f"{s['documents']} documents (seq len {args.seq_len}) -> {args.out}\n"
        f"corpus tokens: {text['read']} read, {text['kept']} kept ({kept:.1%}), "
        f"{text['dropped']} dropped"
        + (
            f"\n{s['documents_per_row']} documents per row on average (packing documents)"
            if s["documents_per_row"]
            else ""
        )
    )


def cmd_pretrain(args: argparse.Namespace, extra: list[str]) -> None:
    from electra.api import pretrain

    if args.resume and args.out and Path(args.out).resolve() != Path(args.resume).resolve():
        raise ElectraError(
            f"--out {args.out} and --resume {args.resume} name two run folders: a resumed run "
            "stays in its own folder; drop --out"
        )
    cfg, given = run_config_from_args(args, extra)
    out = args.resume or args.out or f"runs/{cfg.preset}"
    pretrain(cfg, out=out, resume=bool(args.resume), given=given, overwrite=args.overwrite)


def cmd_detect(args: argparse.Namespace) -> None:
    from electra.api import detect
    from electra.scoring.detect import format_table

    results = detect(args.model, args.text)
    if args.json:
        print(json.dumps(results))  # one entry per text, one text or several
        return
    for text, tokens in zip(args.text, results, strict=True):
        print(f"{text}\n{format_table(tokens)}\n")


def cmd_score_text(args: argparse.Namespace) -> None:
    from electra.api import score_text

    results = score_text(args.model, args.text)
    if args.json:
        print(json.dumps(results))
        return
    for r in results:
        print(f"{r['pll']:10.3f}  {r['tokens']:4d} tokens  {r['text']}")


def cmd_experiment(args: argparse.Namespace) -> None:
    from electra.api import experiment

    experiment(
        args.out,  # (not a setting of the plan: a continuation may differ)
        args.arm,
        args.data,
        flops=args.flops,
        steps=args.steps,
        preset=args.preset,
        glue=args.glue,
        tasks=args.tasks,
        task=args.task,
        task_data=args.task_data,
        seeds=args.seeds,
        score=args.score,
        points=args.points,
        pretrain_set=_pairs(args.pretrain_set, "--pretrain-set"),
        finetune_set=_pairs(args.finetune_set, "--finetune-set"),
        progress=not args.no_progress,
    )
    print((Path(args.out) / "results.md").read_text(), end="")


def cmd_adapt(args: argparse.Namespace) -> None:
    from electra.api import adapt

    own = {
        "text_columns": args.text_columns,
        "label_column": args.label_column,
        "max_train_examples": args.max_train_examples,
    }
    adapt(
        args.model,
        args.task,
        args.data,
        args.out,
        corpus=args.corpus,
        arms=args.arms,
        steps=args.steps,
        seeds=args.seeds,
        pretrain_seeds=args.pretrain_seeds,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        probe=not args.no_probe,
        pretrain_set=_pairs(args.pretrain_set, "--pretrain-set"),
        finetune_set={**_pairs(args.finetune_set, "--finetune-set"), **own},
        progress=not args.no_progress,
    )
    print((Path(args.out) / "results.md").read_text(), end="")


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    """--pretrain-set/--finetune-set KEY=VALUE ... as {key: value}."""
    bad = [kv for kv in items if "=" not in kv]
    if bad:
        raise ElectraError(f"{flag} {bad[0]!r}: write key=value")
    return dict(kv.split("=", 1) for kv in items)


def cmd_export(args: argparse.Namespace) -> None:
    from electra.api import export
    from electra.model.hf_names import auto_class

    for path in export(args.model, args.out, overwrite=args.overwrite, step=args.step):
        arch = json.loads((path / "config.json").read_text())["architectures"][0]
        loader = auto_class(arch)
        print(f"{path}: loads with transformers' {loader} and AutoTokenizer.from_pretrained")


def cmd_plot(args: argparse.Namespace) -> None:
    from electra.api import plot

    print(plot(args.run, args.out))


def cmd_presets(args: argparse.Namespace) -> None:
    from electra.api import preset_sizes
    from electra.model.layers import format_count

    rows = preset_sizes(args.vocab_size)
    # The counts are made with the vocabulary of the last column: each family's default, or
    # --vocab-size (a run's is its data's tokenizer's).
    w = max(8, *(len(r["preset"]) for r in rows))  # the names' column
    print(
        f"{'preset':<{w}} {'disc (emb+enc)':>14} {'gen not shared':>14} {'H':>5} {'L':>3} {'E':>5} {'gen H':>5}  seq  batch  lr      vocab"
    )
    for r in rows:
        print(
            f"{r['preset']:<{w}} {format_count(r['discriminator']):>14} "
            f"{format_count(r['generator_not_shared']):>14} {r['hidden_size']:>5} "
            f"{r['layers']:>3} {r['embedding_size']:>5} {r['generator_hidden_size']:>5}  "
            f"{r['seq_len']:>3} {r['batch_size']:>6}  {r['lr']:<6g}  {r['vocab_size']}"
        )


def cmd_demo(args: argparse.Namespace) -> None:
    from electra.engine.progress import progress_off
    from electra.recipes.demo import run_demo

    with progress_off() if args.no_progress else contextlib.nullcontext():
        run_demo(args.out, steps=args.steps)


def _finetune_settings(args: argparse.Namespace, extra: list[str] | None = None):
    """The recipe: the defaults, then the --config file, then the `--field-name` flags given and
    the `--section.field` overrides (`electra.api.finetune_settings`)."""
    from electra.api import finetune_settings

    values = {**config_flags_given(args), **parse_overrides(extra or [])}
    return finetune_settings(args.config, values, source="the command line")


def _add_finetune_flags(parser: argparse.ArgumentParser) -> None:
    from electra.config import OptimConfig, RuntimeConfig
    from electra.tasks.finetune_config import FinetuneConfig
    from electra.tasks.settings import (
        FAMILIES,
        ClassificationSettings,
        QaSettings,
        TaggingSettings,
    )

    recipe = parser.add_argument_group(
        "recipe (docs/specification.md §Fine-tuning; None = the task's or model size's default)"
    )
    shared = {f.name for f in fields(OptimConfig)} | {f.name for f in fields(RuntimeConfig)}
    add_config_flags(recipe, FinetuneConfig, skip={*shared, *FAMILIES})
    # Each task family's settings, flat (`--qa-head`), in the order the flags have always had.
    add_config_flags(recipe, QaSettings, skip=("qa_head",))
    add_config_flags(recipe, ClassificationSettings)
    add_config_flags(recipe, TaggingSettings)
    add_config_flags(
        recipe, QaSettings, skip=[f.name for f in fields(QaSettings) if f.name != "qa_head"]
    )
    recipe_defaults = FinetuneConfig()
    for name, cls in (("optimizer", OptimConfig), ("runtime", RuntimeConfig)):
        add_config_flags(parser.add_argument_group(name), cls, defaults=recipe_defaults)


def cmd_finetune(args: argparse.Namespace, extra: list[str]) -> None:
    from electra.api import finetune
    from electra.finetuning.baselines import summary_lines

    results = finetune(
        args.model,
        args.task,
        _data_source(args, ("train",)),
        args.out,
        _finetune_settings(args, extra),
        overwrite=args.overwrite,
        resume=args.resume,
    )
    for line in summary_lines(results, "dev"):
        print(line)
    for name, value in results.get("test_metrics", {}).items():  # a labelled test file of yours
        print(f"{results['task']} test {name}: {value:.2f} (median over seeds)")
    print(f"results and models -> {args.out}")


def _data_source(args: argparse.Namespace, needed: tuple[str, ...]):
    """--data (a folder, or one file), or the split files one by one: {split: file}."""
    files = {s: getattr(args, s) for s in ("train", "dev", "test") if getattr(args, s)}
    if args.data and files:
        given = " ".join(f"--{s}" for s in files)
        raise ElectraError(f"--data and {given} exclude each other: pass a folder or the files")
    if args.data:
        return args.data
    missing = [f"--{s} FILE" for s in needed if s not in files]
    if missing:
        raise ElectraError(
            f"no data: pass --data FOLDER (holding the split files) or {' and '.join(missing)}"
        )
    return files


def _evaluated_split(args: argparse.Namespace) -> str:
    """--split, else the split of the one file given (`--test FILE` evaluates test), else dev."""
    if args.split:
        return args.split
    given = [s for s in ("train", "dev", "test") if getattr(args, s)]
    return given[0] if len(given) == 1 and not args.data else "dev"


def _reading(args: argparse.Namespace) -> dict:
    """How `evaluate` and `predict` read files of your own: the reading flags given."""
    names = ("text_columns", "delimiter", "label_column")
    return {name: getattr(args, name) for name in names if getattr(args, name, None)}


def cmd_evaluate(args: argparse.Namespace) -> None:
    from electra.api import evaluate
    from electra.finetuning.baselines import summary_lines

    split = _evaluated_split(args)
    data = _data_source(args, (split,))
    results = evaluate(
        args.model,
        data,
        split,
        args.out,
        args.task,
        _inference_runtime(args),
        _reading(args),
        drop_overlap=args.drop_overlap,
        overwrite=args.overwrite,
    )
    for line in summary_lines(results, split):
        print(line)
    for name in results["submission_files"]:
        print(f"submission file: {Path(results['out']) / name}")
    print(f"predictions -> {Path(results['out']) / 'predictions.jsonl'}")


def cmd_predict(args: argparse.Namespace) -> None:
    from electra.finetuning.predict import predict_inputs

    n = predict_inputs(
        args.model,
        args.inputs,
        out=args.out,
        overwrite=args.overwrite,
        all_scores=args.all_scores,
        batch_size=args.batch_size,
        runtime=_inference_runtime(args),
        reading=_reading(args),
    )
    if args.out:
        print(f"{n} predictions -> {args.out}", file=sys.stderr)


def _inference_runtime(args: argparse.Namespace):
    """The runtime flags of `evaluate` and `predict`, typed (`electra.config.InferenceRuntime`)."""
    from electra.config import InferenceRuntime
    from electra.overrides import with_values

    return with_values(InferenceRuntime(), config_flags_given(args), "the command line")


def cmd_score(args: argparse.Namespace) -> None:
    from electra.api import score

    scores = score(args.task, args.predictions, args.data, args.null_odds, args.null_threshold)
    print(json.dumps(scores, indent=2))
