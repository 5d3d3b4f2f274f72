"""The `electra` command: tokenizer, prepare, pretrain, experiment, detect, score-text, export,
finetune, evaluate, predict, score, plot, presets, demo.

Settings resolve in this order: a preset, then `--config FILE` (JSON or TOML), then the flags. Every
config field has a flag generated from its dataclass, with the field's comment as its help:
`--section.field VALUE` for pretraining (`--train.lr 1e-4`, with short forms for the common ones:
`--steps`, `--batch-size`, ...) and `--field-name VALUE` for fine-tuning (`--lr 1e-4`). A user error
prints one line and exits with 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Collection
from dataclasses import fields
from pathlib import Path
from typing import Any

from electra.errors import ElectraError, Interrupted


def _out_dir_guard(out: Path, overwrite: bool) -> None:
    if out.exists() and not overwrite:
        raise ElectraError(f"{out} already exists: pass --overwrite or another --out")


def cmd_tokenizer_train(args: argparse.Namespace) -> None:
    from electra.atomic import atomic_dir
    from electra.corpus import resolve_paths
    from electra.tokenizer import save_tokenizer, train_tokenizer

    out = Path(args.out)
    _out_dir_guard(out, args.overwrite)
    paths = resolve_paths(args.corpus)
    tok = train_tokenizer(
        paths, args.vocab_size, lowercase=not args.cased, min_frequency=args.min_frequency
    )
    if tok.get_vocab_size() <= 5:
        raise ElectraError(
            f"no text found in {', '.join(args.corpus)}: the tokenizer learned no tokens"
        )
    with atomic_dir(out) as tmp:
        save_tokenizer(tok, tmp, lowercase=not args.cased)
    size = tok.get_vocab_size()
    print(f"{_short_vocab_note(size, args)}tokenizer with {size} tokens -> {out}")


def _short_vocab_note(size: int, args: argparse.Namespace) -> str:
    # --vocab-size is a ceiling, not a target: a small corpus runs out of pairs to merge first.
    if size >= args.vocab_size:
        return ""
    times = "time" if args.min_frequency == 1 else "times"
    return (
        f"note: the corpus gave {size} tokens, fewer than --vocab-size {args.vocab_size} "
        f"(WordPiece stops when no pair of pieces occurs --min-frequency {args.min_frequency} "
        f"{times}); "
    )


def cmd_prepare(args: argparse.Namespace) -> None:
    from electra.data import prepare

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
    )


def parse_overrides(extra: list[str]) -> dict[str, str]:
    """`--train.lr 1e-4` or `--train.lr=1e-4` -> {"train.lr": "1e-4"}."""
    out: dict[str, str] = {}
    i = 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("--") or "." not in arg.split("=")[0]:
            raise ElectraError(
                f"unrecognised argument {arg!r}: config overrides look like --train.lr 1e-4"
            )
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(extra):
                raise ElectraError(f"override --{key} needs a value")
            value = extra[i + 1]
            i += 1
        out[key] = value
        i += 1
    return out


def resolve_run_config(args: argparse.Namespace, extra: list[str]):
    from electra.config import RunConfig, apply_overrides, flatten, preset, read_config_file

    if args.resume:
        saved = Path(args.resume) / "config.json"
        if not saved.is_file():
            raise ElectraError(
                f"{args.resume} is not a run folder (no config.json): check the path"
            )
        cfg = RunConfig.load(saved)
    else:
        file_values = flatten(read_config_file(args.config)) if args.config else {}
        name = args.preset or file_values.pop("preset", None) or "small"
        file_values.pop("preset", None)
        cfg = apply_overrides(preset(str(name)), file_values, source=args.config or "config")
    # Every field has its flag (`add_config_flags`); what is left over gets the did-you-mean
    # of `apply_overrides`.
    overrides: dict[str, Any] = config_flags_given(args)
    overrides.update(parse_overrides(extra))
    cfg = apply_overrides(cfg, overrides, source="command line")
    if args.resume:
        return cfg  # the run's saved config holds what was filled in when it started
    return _fill_unset(cfg, given={*file_values, *overrides})


def _fill_unset(cfg, given: set[str]):
    """Settings the user did not set (`given`: the section.field keys they did) that follow from
    others, each change named on stderr: the data's sequence length, the objective's needs."""
    from electra.objectives import fill_objective_settings

    cfg = _seq_len_from_data(cfg, given)
    cfg, note = fill_objective_settings(cfg, given)
    if note:
        print(note, file=sys.stderr)
    return cfg


def _seq_len_from_data(cfg, given: set[str]):
    # A preset's seq_len is only a default: the data folder was prepared at one length.
    if "data.seq_len" in given or not cfg.data.path:
        return cfg
    from dataclasses import replace

    from electra.data import PretrainingData

    seq_len = PretrainingData(cfg.data.path).seq_len
    if seq_len == cfg.data.seq_len:
        return cfg
    print(
        f"using seq len {seq_len} from the data folder {cfg.data.path} "
        f"(the {cfg.preset} preset's is {cfg.data.seq_len})",
        file=sys.stderr,
    )
    return replace(cfg, data=replace(cfg.data, seq_len=seq_len))


def cmd_pretrain(args: argparse.Namespace, extra: list[str]) -> None:
    from electra.train import pretrain

    cfg = resolve_run_config(args, extra)
    out = args.resume or args.out or f"runs/{cfg.preset}"
    pretrain(cfg, out, resume=bool(args.resume))


def cmd_detect(args: argparse.Namespace) -> None:
    from electra.detect import detect, format_table

    results = detect(args.model, args.text)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results))
        return
    for text, tokens in zip(args.text, results, strict=True):
        print(f"{text}\n{format_table(tokens)}\n")


def cmd_score_text(args: argparse.Namespace) -> None:
    from electra.pll import pseudo_log_likelihood

    results = pseudo_log_likelihood(args.model, args.text)
    if args.json:
        print(json.dumps(results))
        return
    for r in results:
        print(f"{r['pll']:10.3f}  {r['tokens']:4d} tokens  {r['text']}")


def cmd_experiment(args: argparse.Namespace) -> None:
    from electra.experiment import Plan, parse_arm, run_experiment

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
        glue=args.glue or "",
        arms=[parse_arm(a) for a in args.arm],
        tasks=[*tasks, *([args.task] if args.task else [])],
        seeds=args.seeds,
        flops=args.flops or 0.0,
        steps=args.steps or 0,
        points=args.points,
        pretrain_set=pairs(args.pretrain_set, "--pretrain-set"),
        finetune_set=pairs(args.finetune_set, "--finetune-set"),
        task_data={args.task: args.task_data} if args.task else {},
    )
    run_experiment(plan, args.out)
    print((Path(args.out) / "results.md").read_text(), end="")


def cmd_export(args: argparse.Namespace) -> None:
    from electra.export import export_hf

    for path in export_hf(args.model, args.out, overwrite=args.overwrite, step=args.step):
        arch = json.loads((path / "config.json").read_text())["architectures"][0]
        loader = AUTO_CLASSES.get(arch, arch)
        print(f"{path}: loads with transformers' {loader} and AutoTokenizer.from_pretrained")


# The Auto class that loads each exported architecture (its task's pipeline takes the folder too).
AUTO_CLASSES = {
    "ElectraForSequenceClassification": "AutoModelForSequenceClassification",
    "ElectraForTokenClassification": "AutoModelForTokenClassification",
    "ElectraForQuestionAnswering": "AutoModelForQuestionAnswering",
}


def cmd_plot(args: argparse.Namespace) -> None:
    from electra.plot import plot_run

    print(plot_run(args.run, args.out))


def cmd_presets(args: argparse.Namespace) -> None:
    import torch

    from electra.config import PRESETS, generator_config, preset
    from electra.model import (
        ElectraForMaskedLM,
        ElectraForPreTraining,
        count_parameters,
        format_count,
    )

    print(
        f"{'preset':<8} {'disc (emb+enc)':>14} {'gen not shared':>14} {'H':>5} {'L':>3} {'E':>5} {'gen H':>5}  seq  batch  lr"
    )
    for name in PRESETS:
        c = preset(name)
        with torch.device("meta"):  # sizes only, no memory
            d = ElectraForPreTraining(c.model)
            g = ElectraForMaskedLM(generator_config(c.model, c.objective), d.electra.embeddings)
        gh = generator_config(c.model, c.objective).hidden_size
        print(
            f"{name:<8} {format_count(count_parameters(d.electra)):>14} "
            f"{format_count(count_parameters(d, g) - count_parameters(d)):>14} {c.model.hidden_size:>5} "
            f"{c.model.num_hidden_layers:>3} {c.model.embedding_size:>5} {gh:>5}  {c.data.seq_len:>3} "
            f"{c.train.batch_size:>6}  {c.train.lr:g}"
        )


def cmd_demo(args: argparse.Namespace) -> None:
    from electra.demo import run_demo

    run_demo(args.out, steps=args.steps)


def _finetune_settings(args: argparse.Namespace):
    """The recipe's fields from their `--field-name` flags (only those given replace defaults)."""
    from electra.finetune import finetune_config

    return finetune_config(config_flags_given(args), source="the command line")


def _add_finetune_flags(parser: argparse.ArgumentParser) -> None:
    from electra.config import FinetuneConfig, OptimConfig, RuntimeConfig

    recipe = parser.add_argument_group(
        "recipe (docs/specification.md §Fine-tuning; 0 = the task's or model size's default)"
    )
    shared = {f.name for f in fields(OptimConfig)} | {f.name for f in fields(RuntimeConfig)}
    add_config_flags(recipe, FinetuneConfig, skip=shared)
    recipe_defaults = FinetuneConfig()
    for name, cls in (("optimizer", OptimConfig), ("runtime", RuntimeConfig)):
        add_config_flags(parser.add_argument_group(name), cls, defaults=recipe_defaults)


# Short flags for the pretraining settings set most often: `--steps 100` for `--train.steps 100`.
PRETRAIN_ALIASES = {
    "data.path": "--data",
    "data.seq_len": "--seq-len",
    "train.steps": "--steps",
    "train.batch_size": "--batch-size",
    "train.seed": "--seed",
    "train.device": "--device",
    "train.precision": "--precision",
    "train.compile": "--compile",
    "train.cuda_graph": "--cuda-graph",
    "train.init_from": "--init-from",
}
_CONFIG_FLAG = "config_flag:"  # the prefix of a generated flag's dest, to find them again


def add_config_flags(
    group,
    cls: type,
    prefix: str = "",
    aliases: dict[str, str] | None = None,
    *,
    skip: Collection[str] = (),
    defaults: Any = None,
    show_defaults: bool = True,
) -> None:
    """A flag for each field of the config dataclass `cls`, its help the field's comment
    (`electra.config.field_docs`) and its default: `--PREFIXfield` (`--train.lr`) or, without a
    prefix, `--field-name`. A prefixed bool flag alone means true (`--compile`) or takes a value
    (`--train.compile false`); an unprefixed one is `--pack` / `--no-pack`. A tuple field takes
    several values. Values stay strings here and are typed by the config's own parser
    (`electra.config.with_values`), so that a bad value gets the error every other source of
    settings gets. `skip` leaves fields out; `defaults` is the config whose values the help shows
    (a preset's, or a subclass's; default `cls()`), unless `show_defaults` is false."""
    from electra.config import field_docs

    defaults = defaults or cls()
    docs = field_docs(type(defaults))  # a subclass's comments: what its defaults mean
    for f in fields(cls):
        if f.name in skip:
            continue
        key = prefix + f.name
        names = [f"--{key}" if prefix else f"--{f.name.replace('_', '-')}"]
        names += [aliases[key]] if aliases and key in aliases else []
        default = getattr(defaults, f.name)
        shown = " ".join(default) if isinstance(default, tuple) else default
        help_text = f"{docs[f.name]} (default {shown!r})" if show_defaults else docs[f.name]
        help_text = help_text.lstrip().replace("%", "%%")
        group.add_argument(
            *names, dest=_CONFIG_FLAG + key, default=None, help=help_text, **_flag_kind(f, prefix)
        )


def _flag_kind(f, prefix: str) -> dict[str, Any]:
    """How a field's flag takes its value, by the field's declared type."""
    typ = str(f.type)
    if typ == "bool" and not prefix:  # --pack / --no-pack
        return {"action": argparse.BooleanOptionalAction}
    if typ == "bool":  # --train.compile alone, or --train.compile false
        return {"nargs": "?", "const": "true", "metavar": "BOOL"}
    if typ.startswith("tuple"):
        return {"nargs": "+", "metavar": "VALUE"}
    return {"metavar": "N" if typ.startswith("int") else "X" if "float" in typ else "TEXT"}


def config_flags_given(args: argparse.Namespace) -> dict[str, Any]:
    """{field key: value} of the generated flags the user gave."""
    return {
        k[len(_CONFIG_FLAG) :]: v
        for k, v in vars(args).items()
        if k.startswith(_CONFIG_FLAG) and v is not None
    }


def cmd_finetune(args: argparse.Namespace) -> None:
    from electra.finetune import finetune, summary_lines

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


def cmd_evaluate(args: argparse.Namespace) -> None:
    from electra.finetune import evaluate, summary_lines

    split = _evaluated_split(args)
    data = _data_source(args, (split,))
    results = evaluate(
        args.model, data, split, args.out, args.task, runtime=config_flags_given(args)
    )
    for line in summary_lines(results, split):
        print(line)
    for name in results["submission_files"]:
        print(f"submission file: {Path(results['out']) / name}")
    print(f"predictions -> {Path(results['out']) / 'predictions.jsonl'}")


def cmd_predict(args: argparse.Namespace) -> None:
    from electra.predict import predict_inputs

    n = predict_inputs(
        args.model,
        args.inputs,
        out=args.out,
        all_scores=args.all_scores,
        batch_size=args.batch_size,
        runtime=config_flags_given(args),
        reading={"text_columns": args.text_columns, "delimiter": args.delimiter},
    )
    if args.out:
        print(f"{n} predictions -> {args.out}", file=sys.stderr)


def cmd_score(args: argparse.Namespace) -> None:
    from electra.finetune import score_predictions
    from electra.tasks import get_task
    from electra.tasks.squad import SquadTask, score_file

    task = get_task(args.task)
    path = Path(args.predictions)
    if not path.is_file():
        raise ElectraError(f"predictions file not found: {path}")
    if path.suffix == ".jsonl":
        scores = score_predictions(task, path)
    elif isinstance(task, SquadTask):
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="electra", description="Pretrain ELECTRA text encoders.")
    sub = p.add_subparsers(dest="command", required=True)
    _add_tokenizer(sub)
    _add_prepare(sub)
    _add_pretrain(sub)
    _add_experiment(sub)
    _add_detect(sub)
    _add_score_text(sub)
    _add_export(sub)
    _add_finetune(sub)
    _add_evaluate(sub)
    _add_predict(sub)
    _add_score(sub)
    _add_plot(sub)
    _add_presets(sub)
    _add_demo(sub)
    _add_threads(sub)
    return p


def _add_tokenizer(sub: argparse._SubParsersAction) -> None:
    tok = sub.add_parser("tokenizer", help="train a WordPiece tokenizer")
    tok_sub = tok.add_subparsers(dest="action", required=True)
    t = tok_sub.add_parser("train", help="train WordPiece on a corpus (uncased unless --cased)")
    t.add_argument("corpus", nargs="+", help="text/jsonl/gz files, globs or folders")
    t.add_argument("--vocab-size", type=int, default=30522)
    t.add_argument("--out", required=True)
    t.add_argument("--cased", action="store_true", help="keep case and accents")
    t.add_argument("--min-frequency", type=int, default=2)
    t.add_argument("--overwrite", action="store_true")
    t.set_defaults(func=cmd_tokenizer_train)


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    pr = sub.add_parser("prepare", help="tokenize and pack a corpus into a sharded token store")
    pr.add_argument("corpus", nargs="+", help="text/jsonl/gz files, globs or folders")
    pr.add_argument(
        "--tokenizer", required=True, help="a tokenizer folder, tokenizer.json or vocab.txt"
    )
    pr.add_argument("--seq-len", type=int, default=128)
    pr.add_argument("--out", required=True)
    pr.add_argument("--seed", type=int, default=12345)
    pr.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    pr.add_argument(
        "--packing",
        choices=["carry", "official"],
        default="carry",
        help="carry (default): a line's overflow opens the next example, nothing is dropped; "
        "official: Google's builder bit for bit, which discards each example's overflow",
    )
    pr.add_argument("--overwrite", action="store_true")
    pr.set_defaults(func=cmd_prepare)


def _add_pretrain(sub: argparse._SubParsersAction) -> None:
    from electra.config import RunConfig, field_types, preset

    pt = sub.add_parser(
        "pretrain",
        usage="electra pretrain [--preset NAME] [--data DIR] [--out RUN] [--resume RUN] "
        "[--section.field VALUE ...]",
        help="pretrain an ELECTRA discriminator and generator",
        epilog="Any config field can be set as --section.field VALUE, e.g. --train.lr 1e-4.",
    )
    pt.add_argument("--preset", help="tiny, small, small++, base or large (default small)")
    pt.add_argument("--config", help="a JSON or TOML config file")
    pt.add_argument("--out", help="run folder (default runs/PRESET)")
    pt.add_argument(
        "--resume", metavar="RUN", help="continue the run in this folder from its last checkpoint"
    )
    small = preset("small")
    for name, section in field_types(RunConfig).items():
        if name == "preset":
            continue
        group = pt.add_argument_group(f"{name} settings (defaults: the small preset's)")
        add_config_flags(
            group, section, f"{name}.", PRETRAIN_ALIASES, defaults=getattr(small, name)
        )
    pt.set_defaults(func=cmd_pretrain, takes_overrides=True)


def _add_experiment(sub: argparse._SubParsersAction) -> None:
    xp = sub.add_parser(
        "experiment",
        help="pretrain arms at equal training FLOPs, fine-tune each on GLUE, table and plots",
        epilog="An arm is an objective name (electra, mlm, ...) or LABEL:section.field=value,... "
        "Run the same command again to continue a stopped experiment.",
    )
    xp.add_argument("--arm", action="append", required=True, help="repeat for each arm")
    xp.add_argument("--data", required=True, help="a folder written by `electra prepare`")
    xp.add_argument("--glue", help="the folder holding CoLA/, SST-2/, ... (for GLUE tasks)")
    xp.add_argument("--out", required=True)
    xp.add_argument("--preset", default="tiny")
    budget = xp.add_mutually_exclusive_group(required=True)
    budget.add_argument("--flops", type=float, help="training FLOPs per arm")
    budget.add_argument("--steps", type=int, help="the first arm's steps set the budget")
    xp.add_argument("--tasks", nargs="+", help="GLUE tasks (default mrpc stsb rte, without --task)")
    xp.add_argument(
        "--task",
        help="a task on your own files too: classification, multilabel, regression, tagging or qa "
        "(columns and labels with --finetune-set text_columns=A,B label_column=NAME ...)",
    )
    xp.add_argument("--task-data", help="--task's folder holding train.* and dev.*")
    xp.add_argument("--seeds", type=int, default=3)
    xp.add_argument(
        "--points", type=int, default=1, help="checkpoints fine-tuned per arm (a GLUE curve)"
    )
    xp.add_argument("--pretrain-set", nargs="*", default=[], metavar="SECTION.FIELD=VALUE")
    xp.add_argument("--finetune-set", nargs="*", default=[], metavar="KEY=VALUE")
    xp.set_defaults(func=cmd_experiment)


def _add_detect(sub: argparse._SubParsersAction) -> None:
    de = sub.add_parser("detect", help="per-token probability of 'replaced'")
    de.add_argument("--model", required=True, help="a run folder or a discriminator model folder")
    de.add_argument("text", nargs="+")
    de.add_argument("--json", action="store_true", help="print a JSON list of {token, p_replaced}")
    de.set_defaults(func=cmd_detect)


def _add_score_text(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser(
        "score-text", help="Electric's pseudo-log-likelihood of each text (for re-ranking)"
    )
    st.add_argument("--model", required=True, help="a run pretrained with objective.name=electric")
    st.add_argument("text", nargs="+")
    st.add_argument("--json", action="store_true", help="print {text, pll, tokens, energies}")
    st.set_defaults(func=cmd_score_text)


def _add_export(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser("export", help="write Hugging Face model folders")
    ex.add_argument(
        "--model",
        required=True,
        help="a run folder, a pair folder or a model folder; or a fine-tuned model (a finetune "
        "--out folder: its best seed, or a seed folder) for AutoModelFor* and pipeline()",
    )
    ex.add_argument("--format", choices=["hf"], default="hf")
    ex.add_argument(
        "--step",
        type=int,
        help="export the run's checkpoint at this step (RUN/checkpoints/step_N), finished or not",
    )
    ex.add_argument("--out", required=True)
    ex.add_argument("--overwrite", action="store_true")
    ex.set_defaults(func=cmd_export)


def _add_finetune(sub: argparse._SubParsersAction) -> None:
    ft = sub.add_parser(
        "finetune",
        help="fine-tune on a GLUE, SQuAD or NER task, or a task on your own files, and score dev",
    )
    ft.add_argument(
        "--model", required=True, help="a pretrained model folder, run folder or HF folder"
    )
    ft.add_argument(
        "--task",
        required=True,
        help="cola sst2 mrpc stsb qqp mnli qnli rte wnli squad1 squad2 conll2003, or on your own "
        "files: classification multilabel regression tagging qa (docs/finetuning.md)",
    )
    ft.add_argument(
        "--data",
        help="the task's folder (e.g. glue/SST-2; your own: train.*, dev.*, optional test.* as "
        ".csv .tsv .jsonl .parquet)",
    )
    _add_split_files(ft, "train", "dev", "test")
    ft.add_argument("--out", required=True)
    ft.add_argument("--overwrite", action="store_true")
    ft.add_argument(
        "--resume",
        action="store_true",
        help="keep the seeds an interrupted run of the same recipe already finished",
    )
    _add_finetune_flags(ft)
    ft.set_defaults(func=cmd_finetune)


def _add_split_files(parser: argparse.ArgumentParser, *splits: str) -> None:
    """--train/--dev/--test FILE: a task's files one by one, instead of --data FOLDER."""
    for split in splits:
        parser.add_argument(
            f"--{split}", metavar="FILE", help=f"the {split} file (instead of --data)"
        )


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("evaluate", help="predict and score a split with a fine-tuned model")
    ev.add_argument(
        "--model",
        required=True,
        help="a finetune --out folder (its best seed), a seed folder, or a Hugging Face ELECTRA "
        "classifier, tagger or QA folder",
    )
    ev.add_argument("--task", help="checked against the model's task")
    ev.add_argument("--data", help="the task's folder, or the split's file")
    _add_split_files(ev, "train", "dev", "test")
    ev.add_argument(
        "--split",
        choices=["train", "dev", "test"],
        help="the split to evaluate (default: the one split file given, else dev)",
    )
    ev.add_argument("--out", help="default: MODEL/eval-SPLIT")
    _add_inference_runtime(ev, skip=("progress",))
    ev.set_defaults(func=cmd_evaluate)


def _add_predict(sub: argparse._SubParsersAction) -> None:
    pr = sub.add_parser(
        "predict",
        help="run a fine-tuned model on new inputs and write JSONL, one record per input",
        epilog="Records: classification {id, label, score} (--all-scores adds scores), "
        "multilabel {id, labels, scores}, regression {id, value}, tagging {id, words, tags, "
        "entities}, qa {id, answer, start, score, no_answer, null_score}.",
    )
    pr.add_argument(
        "--model",
        required=True,
        help="a finetune --out folder (its best seed), a seed folder, or a Hugging Face ELECTRA "
        "classifier, tagger or QA folder",
    )
    pr.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="files in the task's format (labels ignored), or - for standard input: a text per "
        "line, a pair (qa: question and context) TAB-separated",
    )
    pr.add_argument("--out", help="the JSONL file to write (default: standard output)")
    pr.add_argument(
        "--all-scores", action="store_true", help="every label's probability (classification)"
    )
    pr.add_argument(
        "--batch-size", type=int, default=0, help="rows per batch (default: the task's, 64 or 8)"
    )
    pr.add_argument(
        "--text-columns",
        nargs="+",
        metavar="NAME",
        help="your own files: the text column (or pair) to read, where it is named otherwise "
        "than in the training file",
    )
    pr.add_argument(
        "--delimiter",
        choices=[",", ";", "|", "tab"],
        help="your own CSV files: the field separator (default: the one the header holds most)",
    )
    _add_inference_runtime(pr)
    pr.set_defaults(func=cmd_predict)


def _add_inference_runtime(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """The runtime flags of a command that runs a fine-tuned model (`INFERENCE_RUNTIME`)."""
    from electra.config import INFERENCE_RUNTIME, RuntimeConfig

    group = parser.add_argument_group(
        "runtime",
        "unset: as the model was fine-tuned, on the device auto picks, with a progress bar",
    )
    unused = [f.name for f in fields(RuntimeConfig) if f.name not in INFERENCE_RUNTIME]
    add_config_flags(group, RuntimeConfig, skip=(*unused, *skip), show_defaults=False)


def _add_score(sub: argparse._SubParsersAction) -> None:
    sc = sub.add_parser("score", help="score a predictions file as the official scripts do")
    sc.add_argument("--task", required=True)
    sc.add_argument(
        "--predictions", required=True, help="predictions.jsonl, or SQuAD's predictions.json"
    )
    sc.add_argument("--data", help="SQuAD: the questions' JSON file")
    sc.add_argument("--null-odds", help="SQuAD 2.0: {id: null score} (the official na_prob file)")
    sc.add_argument(
        "--null-threshold", type=float, default=1.0, help="SQuAD 2.0 (official default 1.0)"
    )
    sc.set_defaults(func=cmd_score)


def _add_plot(sub: argparse._SubParsersAction) -> None:
    pl = sub.add_parser("plot", help="plot a run's learning curves to PNG")
    pl.add_argument("run")
    pl.add_argument("--out")
    pl.set_defaults(func=cmd_plot)


def _add_presets(sub: argparse._SubParsersAction) -> None:
    ps = sub.add_parser("presets", help="list the presets and their parameter counts")
    ps.set_defaults(func=cmd_presets)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    dm = sub.add_parser("demo", help="the whole pipeline on a built-in corpus, on CPU, in minutes")
    dm.add_argument("--out", default="electra-demo")
    dm.add_argument("--steps", type=int, help="pretraining steps (default: the tiny preset's)")
    dm.set_defaults(func=cmd_demo)


def _add_threads(sub: argparse._SubParsersAction) -> None:
    """--threads for the commands that run torch."""
    for name in (
        "pretrain",
        "experiment",
        "detect",
        "score-text",
        "finetune",
        "evaluate",
        "predict",
        "demo",
    ):
        sub.choices[name].add_argument(
            "--threads",
            help="CPU threads for torch (default auto: one per core; idle threads wait briefly, "
            "then sleep, so a machine shared with other jobs degrades gracefully)",
        )


def main(argv: list[str] | None = None) -> int:
    from electra.cpu_threads import default_wait

    default_wait()  # before anything imports torch
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    try:
        from electra.cpu_threads import apply_threads

        apply_threads(getattr(args, "threads", None))
        if getattr(args, "takes_overrides", False):
            args.func(args, extra)
        else:
            if extra:
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
            args.func(args)
    except Interrupted as e:
        print(f"electra: {e}", file=sys.stderr)
        return 130
    except ElectraError as e:
        print(f"electra: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("electra: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_gone()
    return 0


def _reader_gone() -> int:
    """The reader of our standard output left (`electra predict ... | head`): stop quietly, as
    Unix tools do, with SIGPIPE's status; stdout goes to /dev/null so that the interpreter's last
    flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + 13


def _exit(code: int) -> None:
    """Exits with `code`. A torchrun worker (WORLD_SIZE > 1, started as `-m electra.cli`) whose
    command succeeded skips the interpreter's shutdown: gloo's worker threads drop each collective's tensors a moment after
    the caller's wait returns, and one that does so while the interpreter shuts down takes the GIL
    and aborts the process ("terminate called without an active exception", SIGABRT, about 1 run
    in 100 on a busy CPU: a core dump shows ~AsyncAllgatherCoalescedWork in
    ProcessGroupGloo::runLoop during Py_FinalizeEx). By then the process group is destroyed and
    every file the run wrote is closed and renamed into place. A failed command exits as usual, so
    that whatever it left open is still flushed."""
    world_size = os.environ.get("WORLD_SIZE", "1")
    if code == 0 and world_size.isdigit() and int(world_size) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())
