"""Fine-tuning throughput: `electra finetune`'s loop against `transformers`' `Trainer`.

    python benchmarks/finetune_throughput.py --preset small --glue ../shared/data/glue --task sst2
    python benchmarks/finetune_throughput.py --model RUN/discriminator --glue ... --device cuda

The Trainer needs `pip install transformers accelerate` (neither is a dependency of electra).

Both fine-tune the same weights (`--model`, or a random discriminator of `--preset` with a WordPiece
vocabulary trained on the task's training text) on the same training examples, batch 32, max length
128, and predict the whole dev set, on the same device and precision (bf16 autocast on GPU, fp32 on
CPU, as `electra finetune` defaults to):

- ours: `electra.finetuning.loop.train_model` and `electra.finetuning.inference.predict` (training batches packed several examples
  to a row, `--no-pack` trims each to its longest row instead; prediction batched by length;
  `--compile` compiles the model; `--cuda-graph` pads batches to a few widths and captures the
  training step and the prediction forward per shape, its captures timed with the rest);
- Trainer: `ElectraForSequenceClassification.from_pretrained`, `AutoTokenizer` and the
  `DataCollatorWithPadding` that pads each batch to its longest row, as `run_glue.py` sets it up
  (`--compile` sets `torch_compile`), with AdamW, linear warmup and decay, and clipping at 1.0.

Training is timed over `--steps` optimizer steps after `--warmup` untimed ones (examples/s = steps x
batch / seconds); prediction over the dev set after one untimed pass. `--rounds` alternate the two,
and the median of the rounds is reported. On CPU both run with the malloc setting `electra finetune`
applies (`electra.engine.host_memory`) and `--threads` threads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from electra.config import RuntimeConfig, preset
from electra.data.tokenizer import train_tokenizer
from electra.engine.runtime import Runtime, configure_process, prepare_model
from electra.finetuning.inference import predict
from electra.finetuning.loop import train_model
from electra.folders.model_folder import save_pretrained
from electra.hf.from_transformers import load_encoder
from electra.model.electra.modeling import ElectraForPreTraining
from electra.tasks import get_task
from electra.tasks.finetune_config import FinetuneConfig, resolve_recipe

GLUE_DIRS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE"}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def random_model(args, task, train_file: Path, out: Path) -> Path:
    """A random discriminator of the preset, its vocabulary trained on the task's own text."""
    text = out / "text.txt"
    rows = task.read(train_file, "train")
    text.write_text("\n".join(" ".join(t for t in (e.text_a, e.text_b) if t) for e in rows))
    tokenizer = train_tokenizer([text], vocab_size=30522)
    cfg = replace(preset(args.preset).model, vocab_size=tokenizer.get_vocab_size())
    torch.manual_seed(0)
    save_pretrained(ElectraForPreTraining(cfg), out / "model", tokenizer)
    return out / "model"


class Ours:
    name = "ours"

    def __init__(self, args, model_dir: Path, task, train_rows, dev_rows, device):
        self.task, self.device, self.args = task, device, args
        model_cfg, self.state, tokenizer, _ = load_encoder(model_dir)
        cfg = FinetuneConfig(
            batch_size=args.batch,
            precision=args.precision,
            compile=args.compile,
            pack=args.pack,
            cuda_graph=args.cuda_graph,
        )
        self.cfg = replace(resolve_recipe(cfg, model_cfg, 1, 128), epochs=1, progress=False)
        self.model_cfg = model_cfg
        self.dev_rows = dev_rows
        self.warm = task.encode(train_rows[: args.batch * args.warmup], tokenizer, 128, True)
        self.timed = task.encode(train_rows, tokenizer, 128, True)
        self.dev = task.encode(dev_rows, tokenizer, 128, False)
        self.runtime = Runtime.of(self.cfg, device)
        self.model = self._fresh()

    def _fresh(self):
        model = self.task.build_model(self.model_cfg)
        model.load_state_dict(self.state, strict=False)
        return prepare_model(model, self.device, self.cfg.kernels)

    def train(self) -> float:
        self.model = self._fresh()
        train_model(self.task, self.model, self.warm, self.cfg, self.runtime, seed=0)
        sync(self.device)
        start = time.perf_counter()
        train_model(self.task, self.model, self.timed, self.cfg, self.runtime, seed=1)
        sync(self.device)
        return len(self.timed) / (time.perf_counter() - start)

    def predict(self) -> float:
        for _ in range(2):  # the second pass is timed
            sync(self.device)
            start = time.perf_counter()
            predict(
                self.task,
                self.model,
                self.dev_rows,
                self.dev,
                Runtime.of(
                    RuntimeConfig(precision=self.args.precision, cuda_graph=self.args.cuda_graph),
                    self.device,
                ),
            )
            sync(self.device)
        return len(self.dev_rows) / (time.perf_counter() - start)


class HFTrainer:
    name = "trainer"

    def __init__(self, args, model_dir: Path, task, train_rows, dev_rows, device):
        import transformers as tf

        tf.logging.set_verbosity_error()  # not the head's "newly initialized" report each round
        self.tf, self.args, self.device, self.model_dir = tf, args, device, model_dir
        self.tokenizer = tf.AutoTokenizer.from_pretrained(model_dir)
        self.num_labels = 1 if task.regression else len(task.spec.labels)

        def encode(rows):
            texts = [(e.text_a, e.text_b) if e.text_b else (e.text_a,) for e in rows]
            out = []
            for e, t in zip(rows, texts, strict=True):
                features = self.tokenizer(*t, truncation=True, max_length=128)
                label = e.label if task.regression else task.spec.labels.index(e.label)
                out.append({**features, "labels": label})
            return out

        self.train_set, self.dev_set = encode(train_rows), encode(dev_rows)
        self.trainer = None

    def _trainer(self, steps: int):
        tf = self.tf
        model = tf.ElectraForSequenceClassification.from_pretrained(
            self.model_dir, num_labels=self.num_labels
        )
        bf16 = self.device.type == "cuda" and self.args.precision != "fp32"
        training = tf.TrainingArguments(
            output_dir=tempfile.mkdtemp(),
            per_device_train_batch_size=self.args.batch,
            per_device_eval_batch_size=64,
            max_steps=steps,
            learning_rate=3e-4,
            warmup_steps=0.1,  # a ratio of the steps
            weight_decay=0.01,
            adam_epsilon=1e-6,
            max_grad_norm=1.0,
            bf16=bf16 or self.args.precision == "bf16",
            use_cpu=self.device.type == "cpu",
            torch_compile=self.args.compile,
            logging_strategy="no",
            save_strategy="no",
            eval_strategy="no",
            report_to=[],
            disable_tqdm=True,
            seed=0,
        )
        collator = tf.DataCollatorWithPadding(self.tokenizer)
        return tf.Trainer(
            model=model, args=training, train_dataset=self.train_set, data_collator=collator
        )

    def train(self) -> float:
        timing = step_clock(self.tf, self.args.warmup, self.device)
        self.trainer = self._trainer(self.args.warmup + self.args.steps)
        self.trainer.add_callback(timing)
        self.trainer.train()
        return self.args.steps * self.args.batch / timing.seconds

    def predict(self) -> float:
        self.trainer.predict(self.dev_set)
        sync(self.device)
        start = time.perf_counter()
        self.trainer.predict(self.dev_set)
        sync(self.device)
        return len(self.dev_set) / (time.perf_counter() - start)


def step_clock(tf, warmup: int, device: torch.device):
    """A Trainer callback timing the steps after the first `warmup`."""

    class StepClock(tf.TrainerCallback):
        def __init__(self):
            self.start = self.seconds = None

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == warmup:
                sync(device)
                self.start = time.perf_counter()

        def on_train_end(self, args, state, control, **kwargs):
            sync(device)
            self.seconds = time.perf_counter() - self.start

    return StepClock()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, help="a pretrained discriminator folder")
    p.add_argument("--preset", default="small", help="without --model: a random one of this size")
    p.add_argument("--glue", type=Path, required=True, help="the folder holding SST-2/, ...")
    p.add_argument("--task", default="sst2", choices=sorted(GLUE_DIRS))
    p.add_argument("--impls", nargs="+", default=["ours", "trainer"], choices=["ours", "trainer"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--dev-examples", type=int, default=0, help="0: the whole dev set")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--cuda-graph", action="store_true", help="ours: captured steps (one GPU)")
    p.add_argument(
        "--pack", action=argparse.BooleanOptionalAction, default=True, help="ours: packed batches"
    )
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    p.add_argument("--out", type=Path, help="append the result as a JSON line here")
    args = p.parse_args()

    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    configure_process(device)
    task = get_task(args.task)
    folder = args.glue / GLUE_DIRS[args.task]
    work = Path(tempfile.mkdtemp())
    model_dir = args.model or random_model(args, task, folder / "train.tsv", work)
    rows = task.read(folder / "train.tsv", "train")
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))
    train_rows = [rows[i] for i in order[: args.batch * (args.warmup + args.steps)].tolist()]
    dev_rows = task.read(folder / "dev.tsv", "dev")[: args.dev_examples or None]
    impls = {
        c.name: c(args, model_dir, task, train_rows, dev_rows, device)
        for c in (Ours, HFTrainer)
        if c.name in args.impls
    }
    results = {name: {"train": [], "predict": []} for name in impls}
    for r in range(args.rounds):
        for name, impl in impls.items():
            results[name]["train"].append(impl.train())
            results[name]["predict"].append(impl.predict())
            print(
                f"round {r}: {name}: train {results[name]['train'][-1]:.1f} ex/s, "
                f"predict {results[name]['predict'][-1]:.1f} ex/s",
                file=sys.stderr,
            )
    summary = {
        "task": args.task,
        "model": str(args.model or f"random {args.preset}"),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "precision": args.precision,
        "compile": args.compile,
        "pack": args.pack,
        "cuda_graph": args.cuda_graph,
        "batch": args.batch,
        "steps": args.steps,
        "dev_examples": len(dev_rows),
        **{
            f"{name}_{kind}_per_s": statistics.median(values)
            for name, kinds in results.items()
            for kind, values in kinds.items()
        },
    }
    if {"ours", "trainer"} <= set(impls):
        for kind in ("train", "predict"):
            summary[f"{kind}_ratio"] = (
                summary[f"ours_{kind}_per_s"] / summary[f"trainer_{kind}_per_s"]
            )
    print(json.dumps(summary))
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main()
