"""The analysis commands of `electra`, which read a model without training it: each one's parser
(`add_NAME(sub)`, called by `electra.cli.main.build_parser`) beside its command function
(`cmd_NAME(args)`, a thin layer over its function in `electra.api`)."""

from __future__ import annotations

import argparse
from pathlib import Path

# --- electra probe ------------------------------------------------------------------------------


def add_probe(sub: argparse._SubParsersAction) -> None:
    pr = sub.add_parser(
        "probe",
        help="a linear probe on a model's frozen features, beside random weights of its architecture",
        epilog="The recipe (docs/objectives.md §Probing frozen features): per seed, a draw of "
        "training examples, standardized features, logistic regression (C=1, 1000 iterations), "
        "dev scored with the task's metric; median and range over seeds, in OUT/results.json.",
    )
    pr.add_argument(
        "--model", required=True, help="a pretrained model folder, run folder or HF folder"
    )
    pr.add_argument(
        "--task",
        required=True,
        help="cola sst2 mrpc qqp mnli qnli rte wnli conll2003, or on your own files: "
        "classification tagging (docs/finetuning.md)",
    )
    pr.add_argument(
        "--data", help="the task's folder (train.* and dev.*), or its training file with --dev"
    )
    for split in ("train", "dev"):
        pr.add_argument(f"--{split}", metavar="FILE", help=f"the {split} file (instead of --data)")
    pr.add_argument("--out", required=True)
    pr.add_argument("--overwrite", action="store_true", help="replace an earlier probe in --out")
    pr.add_argument("--seeds", type=int, default=3, help="probes, each on its own draw (default 3)")
    pr.add_argument(
        "--train-examples",
        type=int,
        metavar="N",
        help="training examples per probe (tagging: sentences), all where fewer "
        "(default 2000; tagging 1000)",
    )
    pr.add_argument(
        "--max-seq-len", type=int, metavar="N", help="default: the task's, at most the model's"
    )
    pr.add_argument(
        "--no-random",
        dest="random_weights",
        action="store_false",
        help="skip the random-weights baseline",
    )
    pr.set_defaults(func=cmd_probe)


def cmd_probe(args: argparse.Namespace) -> None:
    from electra.api import probe
    from electra.probing.probe import table

    results = probe(
        args.model,
        args.task,
        _probe_data(args),
        args.out,
        seeds=args.seeds,
        train_examples=args.train_examples,
        max_seq_len=args.max_seq_len,
        random_weights=args.random_weights,
        overwrite=args.overwrite,
    )
    for line in table(results):
        print(line)
    print(f"results -> {Path(args.out) / 'results.json'}")


def _probe_data(args: argparse.Namespace):
    """--data (a folder, or the training file with --dev), or --train and --dev."""
    from electra.errors import ElectraError

    files = {s: getattr(args, s) for s in ("train", "dev") if getattr(args, s)}
    if args.data and files:
        if Path(args.data).is_file() and list(files) == ["dev"]:
            return {"train": args.data, **files}  # a lone training file, its dev file beside
        raise ElectraError(
            f"--data {args.data} and --{' --'.join(files)} exclude each other: pass a folder, "
            "or the files (--train FILE --dev FILE)"
        )
    if args.data:
        return args.data
    if "train" not in files:
        raise ElectraError("no data: pass --data FOLDER, or --train FILE and --dev FILE")
    return files


# --- electra health -----------------------------------------------------------------------------


def add_health(sub: argparse._SubParsersAction) -> None:
    he = sub.add_parser(
        "health",
        help="a pretraining run's discriminator on held-out text: learned, not yet, collapsed "
        "or drifting",
        epilog="The figures (docs/pretraining.md §Held-out health): held-out AUC on the run's "
        "own generator's samples and on a corruption fixed by the held-out rows, average "
        "precision and gain over the replaced share, the generator's MLM loss, and the spread "
        "of the discriminator's final states; judged against the run's start and the history it "
        "logged.",
    )
    he.add_argument("run", help="a pretraining run's folder (--out of electra pretrain)")
    he.add_argument("--data", required=True, help="held-out text prepared with the run's tokenizer")
    he.add_argument("--step", type=int, help="a checkpoint of the run (default: its models)")
    he.add_argument("--rows", type=int, help="held-out rows scored (default 256)")
    he.add_argument("--json", action="store_true", help="print the record as JSON")
    he.set_defaults(func=cmd_health)


def cmd_health(args: argparse.Namespace) -> None:
    import json

    from electra.api import health

    found = health(args.run, args.data, step=args.step, max_rows=args.rows)
    if args.json:
        print(json.dumps(found))
        return
    print(f"{args.run} ({found['scored']}) on {found['tokens']} held-out word pieces:")
    print(found["in_words"])
