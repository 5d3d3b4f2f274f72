"""The `electra` command line: the parser and the entry point."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import textwrap
from dataclasses import fields

from electra.cli.analysis import add_health, add_probe
from electra.cli.commands import (
    _add_finetune_flags,
    cmd_demo,
    cmd_detect,
    cmd_evaluate,
    cmd_export,
    cmd_finetune,
    cmd_plot,
    cmd_predict,
    cmd_prepare,
    cmd_presets,
    cmd_pretrain,
    cmd_score,
    cmd_score_text,
    cmd_tokenizer_train,
)
from electra.cli.flags import (
    PRETRAIN_ALIASES,
    add_config_flags,
    add_no_progress,
    add_progress_off,
    only_overrides,
)
from electra.cli.recipes import add_adapt, add_experiment
from electra.errors import ElectraError, Interrupted
from electra.tasks.settings import DELIMITERS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="electra", description="Pretrain ELECTRA text encoders.")
    sub = p.add_subparsers(dest="command", required=True)
    _add_tokenizer(sub)
    _add_prepare(sub)
    _add_pretrain(sub)
    add_experiment(sub, WholeNamesFormatter, preset_names())
    add_adapt(sub, WholeNamesFormatter)
    _add_detect(sub)
    _add_score_text(sub)
    _add_export(sub)
    _add_finetune(sub)
    _add_evaluate(sub)
    _add_predict(sub)
    _add_score(sub)
    add_probe(sub)
    add_health(sub)
    _add_plot(sub)
    _add_presets(sub)
    _add_demo(sub)
    _add_threads(sub)
    _add_quiet(sub)
    return p


def _add_tokenizer(sub: argparse._SubParsersAction) -> None:
    tok = sub.add_parser("tokenizer", help="train a WordPiece, BPE or Unigram tokenizer")
    tok_sub = tok.add_subparsers(dest="action", required=True)
    t = tok_sub.add_parser("train", help="train a tokenizer on a corpus (WordPiece by default)")
    t.add_argument("corpus", nargs="+", help="text/jsonl/gz files, globs or folders")
    # Checked by the library, so that a wrong kind is one `electra: error:` line.
    t.add_argument(
        "--model",
        default="wordpiece",
        metavar="{wordpiece,bpe,unigram}",
        help="WordPiece as BERT's (default), byte-level BPE as RoBERTa's, or Unigram as "
        "DeBERTa-v3's",
    )
    t.add_argument("--vocab-size", type=int, default=30522)
    t.add_argument("--out", required=True)
    case = t.add_mutually_exclusive_group()
    case.add_argument(
        "--cased",
        dest="lowercase",
        action="store_false",
        default=None,
        help="keep case (and accents): the default of bpe and unigram",
    )
    case.add_argument(
        "--uncased",
        dest="lowercase",
        action="store_true",
        default=None,
        help="lowercase (WordPiece strips accents too): the default of wordpiece",
    )
    t.add_argument(
        "--min-frequency",
        type=int,
        default=None,
        help="WordPiece and BPE: the least count of a merged pair (default 2)",
    )
    t.add_argument("--overwrite", action="store_true")
    t.set_defaults(func=cmd_tokenizer_train)


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    pr = sub.add_parser("prepare", help="tokenize and pack a corpus into a sharded token store")
    pr.add_argument("corpus", nargs="+", help="text/jsonl/gz files, globs or folders")
    pr.add_argument(
        "--tokenizer",
        required=True,
        help="a tokenizer folder, tokenizer.json (WordPiece, BPE or Unigram) or BERT vocab.txt",
    )
    pr.add_argument("--seq-len", type=int, default=128)
    pr.add_argument("--out", required=True)
    pr.add_argument("--seed", type=int, default=12345)
    pr.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    pr.add_argument(
        "--packing",
        choices=["carry", "official", "documents"],
        default="carry",
        help="carry (default): a line's overflow opens the next example, nothing is dropped; "
        "official: Google's builder bit for bit, which discards each example's overflow; "
        "documents: several whole documents per row, one segment each, document numbers kept "
        "for document masking (the modern family, long --seq-len)",
    )
    pr.add_argument("--overwrite", action="store_true")
    pr.set_defaults(func=cmd_prepare)


def _add_pretrain(sub: argparse._SubParsersAction) -> None:
    from electra.config import DEFAULT_PRESET, RunConfig, preset
    from electra.overrides import field_types

    pt = sub.add_parser(
        "pretrain",
        usage="electra pretrain [--preset NAME] [--data DIR] [--out RUN] [--resume RUN] "
        "[--section.field VALUE ...]",
        help="pretrain an ELECTRA discriminator and generator",
        epilog="Any config field can be set as --section.field VALUE, e.g. --train.lr 1e-4.",
        formatter_class=WholeNamesFormatter,
    )
    pt.add_argument(
        "--preset",
        help=f"{preset_names()} (default small; with --init-from, the folder family's of its size)",
    )
    pt.add_argument("--config", help="a JSON or TOML config file")
    pt.add_argument("--out", help="run folder (default runs/PRESET)")
    pt.add_argument(
        "--resume", metavar="RUN", help="continue the run in this folder from its last checkpoint"
    )
    pt.add_argument(
        "--overwrite",
        action="store_true",
        help="start a new run over an earlier run in --out (not while a process writes it)",
    )
    add_no_progress(pt)
    base = preset(DEFAULT_PRESET)
    for name, section in field_types(RunConfig).items():
        if name == "preset":
            continue
        if name == "model":  # the default family's config; the others' own fields below
            section = type(base.model)
        group = pt.add_argument_group(f"{name} settings (defaults: the {base.preset} preset's)")
        helps = {"arch": arch_help()} if name == "model" else {}
        add_config_flags(
            group, section, f"{name}.", PRETRAIN_ALIASES, defaults=getattr(base, name), helps=helps
        )
    _add_family_flags(pt, base)
    pt.set_defaults(func=cmd_pretrain, takes_overrides=True)


def _add_family_flags(pt: argparse.ArgumentParser, base) -> None:
    """The `--model.*` fields of every other family (model.arch=NAME) that no family before it
    has, their defaults those of its preset of the default one's schedule."""
    from electra.config import preset
    from electra.model.family import families

    shown = {f.name for f in dataclasses.fields(base.model)}
    for family in families().values():
        if family.name == base.model.arch:
            continue
        like = [n for n, p in family.presets.items() if p.schedule_of == base.preset]
        name = (like or list(family.presets) or [None])[0]
        defaults = preset(name).model if name else family.config()
        whose = f"the {name} preset's" if name else "its config's"
        group = pt.add_argument_group(
            f"model settings of model.arch={family.name} (defaults: {whose})"
        )
        add_config_flags(group, family.config, "model.", skip=shown, defaults=defaults)
        shown |= {f.name for f in dataclasses.fields(family.config)}


def arch_help() -> str:
    """`--model.arch`'s help: every registered family and what it is (its record's `summary`)."""
    from electra.model.family import families

    *others, last = (
        f"{f.name} ({f.summary})" if f.summary else f.name for f in families().values()
    )
    listed = f"{', '.join(others)} or {last}" if others else last
    return f"The architecture family: {listed}."


class WholeNamesFormatter(argparse.HelpFormatter):
    """argparse's help, its lines wrapped between words only: a name with a hyphen
    (`modern-small`, `--no-progress`) is never cut in two."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.wrap(text, width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.fill(
            text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )


def preset_names() -> str:
    """Every preset of electra.config.presets(), both families': "tiny, small, ... or modern-large"."""
    from electra.config import presets

    *names, last = presets()
    return f"{', '.join(names)} or {last}"


def _add_detect(sub: argparse._SubParsersAction) -> None:
    de = sub.add_parser("detect", help="per-token probability of 'replaced'")
    de.add_argument("--model", required=True, help="a run folder or a discriminator model folder")
    de.add_argument("text", nargs="+")
    de.add_argument(
        "--json",
        action="store_true",
        help="print JSON: a list with one entry per text, each a list of {token, p_replaced}",
    )
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
        epilog="A task family's setting can also be set as --section.field VALUE, e.g. "
        "--classification.label_column NAME (sections: qa, classification, tagging); the flags "
        "and these override the --config file.",
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
    ft.add_argument(
        "--config",
        help="a JSON or TOML settings file: the recipe's fields, a task family's in its own "
        "table ([classification] text_columns = [...]), as finetune.json saves them",
    )
    _add_finetune_flags(ft)
    ft.set_defaults(func=cmd_finetune, takes_overrides="section.field")


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
        help="a finetune --out folder (its best seed), a seed folder, or a Hugging Face "
        "classifier, tagger or QA folder of any supported type (docs/any-encoder.md)",
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
    ev.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    _add_reading(ev)
    ev.add_argument(
        "--label-column",
        metavar="NAME",
        help="your own files: the label column, where it is named otherwise than in the training "
        "file (default for a Hugging Face folder: label)",
    )
    ev.add_argument(
        "--drop-overlap",
        action="store_true",
        help="leave rows the model trained on (the same text, in any file) out of the score and "
        "count them, instead of refusing",
    )
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
        help="a finetune --out folder (its best seed), a seed folder, or a Hugging Face "
        "classifier, tagger or QA folder of any supported type (docs/any-encoder.md)",
    )
    pr.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="files in the task's format (labels ignored), or - for standard input: a text per "
        "line, a pair (qa: question and context) TAB-separated",
    )
    pr.add_argument("--out", help="the JSONL file to write (default: standard output)")
    pr.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    pr.add_argument(
        "--all-scores", action="store_true", help="every label's probability (classification)"
    )
    pr.add_argument(
        "--batch-size", type=int, default=None, help="rows per batch (default: the task's, 64 or 8)"
    )
    _add_reading(pr)
    _add_inference_runtime(pr)
    pr.set_defaults(func=cmd_predict)


def _add_reading(parser: argparse.ArgumentParser) -> None:
    """--text-columns and --delimiter: how `predict` and `evaluate` read files of your own."""
    parser.add_argument(
        "--text-columns",
        nargs="+",
        metavar="NAME",
        help="your own files: the text column (or pair) to read, where it is named otherwise "
        "than in the training file; a Hugging Face classifier folder reads one column or two "
        "(default: text, else text_a and text_b)",
    )
    parser.add_argument(
        "--delimiter",
        choices=[d for d in DELIMITERS if d != "\t"],  # a TAB is hard to type: "tab"
        help="your own CSV files: the field separator (default: the one the header holds most)",
    )


def _add_inference_runtime(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """The runtime flags of a command that runs a fine-tuned model (`InferenceRuntime`'s fields),
    with `RuntimeConfig`'s help."""
    from electra.config import InferenceRuntime, RuntimeConfig

    group = parser.add_argument_group(
        "runtime",
        "unset: as the model was fine-tuned, on the device auto picks, with progress on stderr",
    )
    used = {f.name for f in fields(InferenceRuntime)}
    unused = [f.name for f in fields(RuntimeConfig) if f.name not in used]
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
    ps = sub.add_parser(
        "presets", help="list the presets and their parameter counts (at the vocab column's size)"
    )
    ps.add_argument(
        "--vocab-size",
        type=int,
        metavar="N",
        help="count with a vocabulary of N tokens (default: each family's, ELECTRA's 30522 and "
        "ModernBERT's 50368; a run takes its data's tokenizer's)",
    )
    ps.set_defaults(func=cmd_presets)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    dm = sub.add_parser("demo", help="the whole pipeline on a built-in corpus, on CPU, in minutes")
    dm.add_argument("--out", default="electra-demo")
    dm.add_argument("--steps", type=int, help="pretraining steps (default: the tiny preset's)")
    add_progress_off(dm, "while it pretrains")
    dm.set_defaults(func=cmd_demo)


def _add_quiet(sub: argparse._SubParsersAction) -> None:
    """--no-progress on the commands that show none, so that a script may pass it to every
    command alike."""
    for name, parser in sub.choices.items():
        if name == "tokenizer":
            parser = parser._subparsers._group_actions[0].choices["train"]
        if not any("--no-progress" in a.option_strings for a in parser._actions):
            parser.add_argument(
                "--no-progress", action="store_true", help="accepted: this command shows none"
            )


def _add_threads(sub: argparse._SubParsersAction) -> None:
    """--threads for the commands that run torch."""
    for name in (
        "pretrain",
        "experiment",
        "adapt",
        "detect",
        "score-text",
        "finetune",
        "evaluate",
        "predict",
        "demo",
        "probe",
        "health",
    ):
        sub.choices[name].add_argument(
            "--threads",
            help="CPU threads for torch (default auto: one per core; idle threads wait briefly, "
            "then sleep, so a machine shared with other jobs degrades gracefully)",
        )


def main(argv: list[str] | None = None) -> int:
    from electra.engine.cpu_threads import default_wait

    default_wait()  # before anything imports torch
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    try:
        from electra.engine.cpu_threads import apply_threads

        apply_threads(getattr(args, "threads", None))
        if getattr(args, "takes_overrides", False):
            if args.takes_overrides == "section.field" and not only_overrides(extra):
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
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
    except OSError as e:  # a read-only or full disk, a path under a file: one line, not a trace
        from electra.cli.os_errors import os_error_line

        print(f"electra: error: {os_error_line(e)}", file=sys.stderr)
        return 2
    return 0


def _reader_gone() -> int:
    """The reader of our standard output left (`electra predict ... | head`): stop quietly, as
    Unix tools do, with SIGPIPE's status; stdout goes to /dev/null so that the interpreter's last
    flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + 13


def exit_with(code: int) -> None:
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
    exit_with(main())
