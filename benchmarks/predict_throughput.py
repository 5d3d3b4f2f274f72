"""Prediction throughput: `electra predict` against `transformers.pipeline` on the same model.

    python benchmarks/predict_throughput.py --glue ../shared/data/glue/SST-2
    python benchmarks/predict_throughput.py --glue ../shared/data/glue/SST-2 --threads 2 --rounds 3

A `small`-preset (`--preset`) classifier (a random discriminator with a WordPiece vocabulary trained on SST-2's
training text, fine-tuned `--steps` steps, its decision boundary then moved to the median of some
training sentences' logits so that the two labels are about equally frequent) is saved as a
fine-tuned model, exported with `electra export` (`electra.hf.export.export_finetuned`), and both
predict the same real sentences, SST-2 dev then train up to `--examples`, on the CPU in fp32:

- ours: `electra.finetuning.predict.Predictor` (what `electra predict` runs): the examples encoded at the
  recipe's maximum length, batched by length (`--batch-size`, default the task's 64), each batch
  trimmed to exactly its longest row (on a CPU; a multiple of 8 elsewhere), the last layer at
  [CLS] only, records with the label and its probability;
- pipeline: `transformers.pipeline("text-classification", model=EXPORT, device=-1)` on the list
  of sentences, at each of `--hf-batch-sizes` (it pads each batch to its longest row), its best
  kept.

Each is timed after one untimed pass over 64 sentences (loading is not timed; tokenization and the
post-processing are), `--rounds` times alternating, the median kept. Reported: examples/s of each,
the ratio, and the share of sentences given the same label.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from electra.config import preset
from electra.data.tokenizer import train_tokenizer
from electra.engine.runtime import Runtime, configure_process
from electra.finetuning.loop import train_model
from electra.finetuning.predict import Predictor
from electra.folders.finetuned import save_finetuned
from electra.folders.model_folder import save_pretrained
from electra.hf.export import export_finetuned
from electra.model.electra.modeling import ElectraForPreTraining
from electra.tasks import get_task
from electra.tasks.finetune_config import FinetuneConfig, resolve_recipe


def sentences(glue: Path, n: int) -> list[str]:
    """SST-2 dev, then train, up to `n` sentences."""
    task = get_task("sst2")
    rows = task.read(glue / "dev.tsv", "dev") + task.read(glue / "train.tsv", "train")
    return [e.text_a for e in rows[:n]]


def build_model(glue: Path, out: Path, steps: int, size: str = "small") -> Path:
    """An SST-2 classifier of the preset `size`, fine-tuned `steps` steps from random weights, saved as
    `electra finetune` saves a seed (out/ft)."""
    task = get_task("sst2")
    train = task.read(glue / "train.tsv", "train")
    (out / "text.txt").write_text("\n".join(e.text_a for e in train))
    tokenizer = train_tokenizer([out / "text.txt"], vocab_size=30522, min_frequency=2)
    model_cfg = replace(preset(size).model, vocab_size=tokenizer.get_vocab_size())
    torch.manual_seed(0)
    save_pretrained(ElectraForPreTraining(model_cfg), out / "pretrained", tokenizer)
    cfg = resolve_recipe(FinetuneConfig(device="cpu", progress=False), model_cfg, 3, 128)
    model = task.build_model(model_cfg)
    examples = train[: steps * cfg.batch_size]
    data = task.encode(examples, tokenizer, cfg.max_seq_len, training=True)
    runtime = Runtime.of(cfg, torch.device("cpu"))
    if steps:
        train_model(task, model, data, replace(cfg, epochs=1), runtime, seed=0)
    center_labels(task, model.eval(), tokenizer, train[-512:], cfg.max_seq_len)
    save_finetuned(model, task, tokenizer, cfg, out / "ft", out / "pretrained")
    return out / "ft"


@torch.no_grad()
def center_labels(task, model, tokenizer, examples, max_len: int) -> None:
    """Moves the decision boundary to the median of some training sentences' logit differences,
    so that about half the sentences get each label: a short fine-tuning (or none) otherwise
    labels nearly all of them alike, and the labels' agreement would say little."""
    data = task.encode(examples, tokenizer, max_len, training=False)
    logits = task.infer(model, data.tensors)["logits"]
    model.classifier.bias[1] -= (logits[:, 1] - logits[:, 0]).median()


def time_ours(model_dir: Path, texts: list[str], batch_size: int) -> tuple[float, list[str]]:
    predictor = Predictor.load(model_dir, device="cpu")
    predictor(texts[:64], batch_size=batch_size, progress=False)  # warm: the first allocations
    start = time.perf_counter()
    records = predictor(texts, batch_size=batch_size, progress=False)
    return time.perf_counter() - start, [r["label"] for r in records]


def time_pipeline(export_dir: Path, texts: list[str], batch_size: int) -> tuple[float, list[str]]:
    import transformers

    pipe = transformers.pipeline("text-classification", model=str(export_dir), device=-1)
    pipe(texts[:64], batch_size=batch_size, truncation=True)
    start = time.perf_counter()
    out = pipe(texts, batch_size=batch_size, truncation=True)
    return time.perf_counter() - start, [r["label"] for r in out]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--glue", type=Path, default=Path("../shared/data/glue/SST-2"))
    p.add_argument("--examples", type=int, default=2500)
    p.add_argument("--preset", default="small", help="the classifier's size (tiny: a toy run)")
    p.add_argument("--steps", type=int, default=30, help="fine-tuning steps before timing")
    p.add_argument("--batch-size", type=int, default=None, help="ours (default: the task's, 64)")
    p.add_argument("--hf-batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configure_process(torch.device("cpu"))
    texts = sentences(args.glue, args.examples)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(args.glue, Path(tmp), args.steps, args.preset)
        export_dir = export_finetuned(model_dir, Path(tmp) / "hf")
        ours, theirs = [], {b: [] for b in args.hf_batch_sizes}
        for _ in range(args.rounds):
            seconds, our_labels = time_ours(model_dir, texts, args.batch_size)
            ours.append(seconds)
            for b in args.hf_batch_sizes:
                seconds, hf_labels = time_pipeline(export_dir, texts, b)
                theirs[b].append(seconds)
    report(args, texts, ours, theirs, our_labels, hf_labels)


def report(args, texts, ours, theirs, our_labels, hf_labels) -> None:
    n = len(texts)
    ours_rate = n / statistics.median(ours)
    rates = {b: n / statistics.median(s) for b, s in theirs.items()}
    best = max(rates, key=rates.__getitem__)
    agree = sum(a == b for a, b in zip(our_labels, hf_labels, strict=True)) / n
    counts = {label: our_labels.count(label) for label in sorted(set(our_labels))}
    results = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads",
        "examples": n,
        "ours_examples_per_s": round(ours_rate, 1),
        "pipeline_examples_per_s": {b: round(r, 1) for b, r in rates.items()},
        "pipeline_best_batch": best,
        "ratio": round(ours_rate / rates[best], 2),
        "label_agreement": agree,
        "our_label_counts": counts,
    }
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
