"""The parsers of the recipe commands: `electra experiment` and `electra adapt` (whole runs
composed of the steps, `electra.recipes`)."""

from __future__ import annotations

import argparse

from electra.cli.commands import cmd_adapt, cmd_experiment
from electra.cli.flags import add_progress_off


def add_experiment(sub: argparse._SubParsersAction, formatter: type, presets: str) -> None:
    """`electra experiment`: arms pretrained at equal FLOPs, scored on tasks."""
    xp = sub.add_parser(
        "experiment",
        help="pretrain arms at equal training FLOPs, fine-tune each on GLUE, table and plots",
        epilog="An arm is an objective name (electra, mlm, ...) or LABEL:section.field=value,... "
        "(section.field=value, here and in --pretrain-set, is shorthand for pretrain's "
        "--section.field VALUE; --finetune-set's field=value for finetune's --field-name VALUE); "
        "an arm's preset=NAME starts it from another preset than --preset's "
        "(modern-rtd:preset=modern-tiny,objective.name=electra). "
        "Run the same command again to continue a stopped experiment.",
        formatter_class=formatter,
    )
    xp.add_argument("--arm", action="append", required=True, help="repeat for each arm")
    xp.add_argument("--data", required=True, help="a folder written by `electra prepare`")
    xp.add_argument("--glue", help="the folder holding CoLA/, SST-2/, ... (for GLUE tasks)")
    xp.add_argument("--out", required=True)
    xp.add_argument("--preset", default="tiny", help=f"{presets} (default tiny)")
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
        "--score",
        choices=("finetune", "probe", "both"),
        default="finetune",
        help="fine-tune each point, probe its frozen features (electra probe), or both",
    )
    xp.add_argument(
        "--points", type=int, default=1, help="checkpoints fine-tuned per arm (a GLUE curve)"
    )
    xp.add_argument("--pretrain-set", nargs="*", default=[], metavar="SECTION.FIELD=VALUE")
    xp.add_argument("--finetune-set", nargs="*", default=[], metavar="KEY=VALUE")
    add_progress_off(xp, "while the arms pretrain")
    xp.set_defaults(func=cmd_experiment)


def add_adapt(sub: argparse._SubParsersAction, formatter: type) -> None:
    """`electra adapt`: a checkpoint as it is, continued with RTD and with MLM, on a task."""
    ad = sub.add_parser(
        "adapt",
        help="continue a checkpoint on unlabelled text (RTD, MLM) and show, with seeds, whether "
        "it helped your task",
        epilog="Arms: none (the checkpoint as it is), electra and mlm (continued at equal "
        "training FLOPs), each fine-tuned and probed on the task over --seeds. Without "
        "--corpus, the task's training text (labels dropped) is pretrained on; no dev or test "
        "row ever is. Run the same command again to continue a stopped run.",
        formatter_class=formatter,
    )
    ad.add_argument("--model", required=True, help="the checkpoint: a model folder")
    ad.add_argument("--task", required=True, help="a task (classification, tagging, sst2, ...)")
    ad.add_argument("--data", required=True, help="the task's folder of train.* and dev.* files")
    ad.add_argument("--out", required=True)
    ad.add_argument("--corpus", nargs="+", help="unlabelled text files (default: the task's)")
    ad.add_argument("--arms", nargs="+", default=["none", "electra", "mlm"])
    ad.add_argument("--steps", type=int, default=200, help="electra's steps; mlm's match its FLOPs")
    ad.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per model")
    ad.add_argument("--pretrain-seeds", type=int, default=1, help="continuations per arm")
    ad.add_argument("--batch-size", type=int, default=16, help="pretraining sequences per step")
    ad.add_argument("--seq-len", type=int, default=128, help="pretraining sequence length")
    ad.add_argument("--no-probe", action="store_true", help="fine-tune only, no frozen probe")
    ad.add_argument("--text-columns", help="your own files: the text columns, A,B")
    ad.add_argument("--label-column", help="your own files: the label column")
    ad.add_argument("--max-train-examples", type=int, help="fine-tune on the first N rows")
    ad.add_argument("--pretrain-set", nargs="*", default=[], metavar="SECTION.FIELD=VALUE")
    ad.add_argument("--finetune-set", nargs="*", default=[], metavar="KEY=VALUE")
    add_progress_off(ad, "while the arms pretrain")
    ad.set_defaults(func=cmd_adapt)
