"""The commands of `electra`: each one reads its flags and calls the library."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import fields, replace
from pathlib import Path

from electra.cli.flags import add_config_flags, config_flags_given, run_config_from_args
from electra.errors import ElectraError


def cmd_tokenizer_train(args: argparse.Namespace) -> None:
    from electra.atomic import atomic_dir
    from electra.data.corpus import resolve_paths
    from electra.data.tokenizer import lowercases, model_specials, save_tokenizer, train_tokenizer
    from electra.locks import claim_output

    model_specials(args.model)  # a wrong kind is refused before the corpus is read
    out = Path(args.out)
    claim = claim_output(  # before the corpus is read: one writer, nothing lost
        out, args.overwrite, reads=args.corpus, replaces=("tokenizer.json", "vocab.txt")
    )
    with claim:
        paths = resolve_paths(args.corpus)
        tok = train_tokenizer(
            paths,
            args.vocab_size,
            lowercase=args.lowercase,
            min_frequency=args.min_frequency,
            model=args.model,
        )
        with atomic_dir(out) as tmp:
            save_tokenizer(tok, tmp, lowercase=lowercases(tok))
    size = tok.get_vocab_size()
    print(f"{_short_vocab_note(size, args)}tokenizer with {size} tokens -> {out}")


def _short_vocab_note(size: int, args: argparse.Namespace) -> str:
    # --vocab-size is a ceiling, not a target: a small corpus runs out of pairs to merge first.
    if size >= args.vocab_size:
        return ""
    if args.model == "unigram":
        why = "Unigram keeps no more pieces than the corpus's frequent substrings give"
    else:
        from electra.data.tokenizer import DEFAULT_MIN_FREQUENCY

        least = DEFAULT_MIN_FREQUENCY if args.min_frequency is None else args.min_frequency
        times = "time" if least == 1 else "times"
        kind = "WordPiece" if args.model == "wordpiece" else "BPE"
        why = f"{kind} stops when no pair of pieces occurs --min-frequency {least} {times}"
    return (
        f"note: the corpus gave {size} tokens, fewer than --vocab-size {args.vocab_size} ({why}); "
    )


def cmd_prepare(args: argparse.Namespace) -> None:
    from electra.data.prepare import prepare

    s = prepare(
        args.corpus,
        args.tokenizer,
        seq_len=args.seq_len,
        out_dir=args.out,
        seed=args.seed,
        workers=args.workers,
        overwrite=args.overwrite,
        packing=args.packing,
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
    from electra.scoring.detect import detect, format_table

    results = detect(args.model, args.text)
    if args.json:
        print(json.dumps(results))  # one entry per text, one text or several
        return
    for text, tokens in zip(args.text, results, strict=True):
        print(f"{text}\n{format_table(tokens)}\n")


def cmd_score_text(args: argparse.Namespace) -> None:
    from electra.scoring.pll import pseudo_log_likelihood

    results = pseudo_log_likelihood(args.model, args.text)
    if args.json:
        print(json.dumps(results))
        return
    for r in results:
        print(f"{r['pll']:10.3f}  {r['tokens']:4d} tokens  {r['text']}")


def cmd_experiment(args: argparse.Namespace) -> None:
    from electra.engine.progress import progress_off
    from electra.recipes.experiment import Plan, parse_arm, run_experiment

    def pairs(items: list[str], flag: str) -> dict[str, str]:
        bad = [kv for kv in items if "=" not in kv]
        if bad:
            raise ElectraError(f"{flag} {bad[0]!r}: write key=value")
        return dict(kv.split("=", 1) for kv in items)

    if bool(args.task) != bool(args.task_data):
        raise ElectraError(
            "--task and --task-data go together: the task and the folder of its files"
        )
    tasks = args.tasks or ([] if args.task else ["mrpc", "stsb", "rte"])
    plan = Plan(
        preset=args.preset,
        data=args.data,
        glue=args.glue,
        arms=[parse_arm(a) for a in args.arm],
        tasks=[*tasks, *([args.task] if args.task else [])],
        seeds=args.seeds,
        flops=args.flops,
        steps=args.steps,
        points=args.points,
        pretrain_set=pairs(args.pretrain_set, "--pretrain-set"),
        finetune_set=pairs(args.finetune_set, "--finetune-set"),
        task_data={args.task: args.task_data} if args.task else {},
    )
    with progress_off() if args.no_progress else contextlib.nullcontext():
        run_experiment(plan, args.out)  # (not a setting of the plan: a continuation may differ)
    print((Path(args.out) / "results.md").read_text(), end="")


def cmd_export(args: argparse.Namespace) -> None:
    from electra.api import export
    from electra.model.hf_names import auto_class

    for path in export(args.model, args.out, overwrite=args.overwrite, step=args.step):
        arch = json.loads((path / "config.json").read_text())["architectures"][0]
        loader = auto_class(arch)
        print(f"{path}: loads with transformers' {loader} and AutoTokenizer.from_pretrained")


def cmd_plot(args: argparse.Namespace) -> None:
    from electra.engine.plot import plot_run

    print(plot_run(args.run, args.out))


def cmd_presets(args: argparse.Namespace) -> None:
    import torch

    from electra.config import generator_config, preset, presets
    from electra.model.family import encoder_of
    from electra.model.layers import count_parameters, format_count
    from electra.objectives.sharing import build_pair

    if args.vocab_size is not None and args.vocab_size < 1:
        raise ElectraError(f"--vocab-size {args.vocab_size}: give at least 1")
    # The counts are made with the vocabulary of the last column: each family's default, or
    # --vocab-size (a run's is its data's tokenizer's).
    w = max(8, *map(len, presets()))  # the names' column
    print(
        f"{'preset':<{w}} {'disc (emb+enc)':>14} {'gen not shared':>14} {'H':>5} {'L':>3} {'E':>5} {'gen H':>5}  seq  batch  lr      vocab"
    )
    for name in presets():
        c = preset(name)
        if args.vocab_size is not None:  # the padding id only has to be a token of it
            c.model = replace(c.model, vocab_size=args.vocab_size, pad_token_id=0)
        with torch.device("meta"):  # sizes only, no memory
            # The pair as the preset's sharing builds it, in its family (electra.model.family).
            g, d = build_pair(c.model, c.objective)
        gh = generator_config(c.model, c.objective).hidden_size
        e = getattr(c.model, "embedding_size", "-")  # the modern family has no separate E
        print(
            f"{name:<{w}} {format_count(count_parameters(encoder_of(d))):>14} "
            f"{format_count(count_parameters(d, g) - count_parameters(d)):>14} {c.model.hidden_size:>5} "
            f"{c.model.num_hidden_layers:>3} {e:>5} {gh:>5}  {c.data.seq_len:>3} "
            f"{c.train.batch_size:>6}  {c.train.lr:<6g}  {c.model.vocab_size}"
        )


def cmd_demo(args: argparse.Namespace) -> None:
    from electra.engine.progress import progress_off
    from electra.recipes.demo import run_demo

    with progress_off() if args.no_progress else contextlib.nullcontext():
        run_demo(args.out, steps=args.steps)


def _finetune_settings(args: argparse.Namespace):
    """The recipe's fields from their `--field-name` flags (only those given replace defaults)."""
    from electra.finetuning.config import FinetuneConfig

    return FinetuneConfig.from_values(config_flags_given(args), source="the command line")


def _add_finetune_flags(parser: argparse.ArgumentParser) -> None:
    from electra.config import OptimConfig, RuntimeConfig
    from electra.finetuning.config import FinetuneConfig
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


def cmd_finetune(args: argparse.Namespace) -> None:
    from electra.api import finetune
    from electra.finetuning.baselines import summary_lines

    results = finetune(
        args.model,
        args.task,
        _data_source(args, ("train",)),
        args.out,
        _finetune_settings(args),
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
    from electra.finetuning.results import score_predictions
    from electra.tasks import get_task
    from electra.tasks.qa import QaTask
    from electra.tasks.squad import score_file

    task = get_task(args.task)
    path = Path(args.predictions)
    if not path.is_file():
        raise ElectraError(f"predictions file not found: {path}")
    if path.suffix == ".jsonl":
        scores = score_predictions(task, path)
    elif isinstance(task, QaTask):
        if not args.data:
            raise ElectraError(
                "scoring a SQuAD predictions.json needs the questions: pass --data FILE"
            )
        scores = score_file(
            task.version, Path(args.data), path, args.null_odds, args.null_threshold
        )
    else:
        raise ElectraError(
            f"{path}: pass the predictions.jsonl of a {task.name} run (SQuAD also takes the "
            "official predictions.json)"
        )
    print(json.dumps(scores, indent=2))
