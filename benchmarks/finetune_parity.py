"""Fine-tuning parity: `electra finetune` against a plain Hugging Face loop, from the same weights.

    python benchmarks/finetune_parity.py --model RUN/discriminator --glue ../shared/data/glue \\
        --out ft-parity --impl reference --tasks cola sst2 mrpc stsb rte --seeds 0 1 2
    python benchmarks/finetune_parity.py ... --impl ours
    python benchmarks/finetune_parity.py --out ft-parity --report

The reference is `transformers`' `ElectraForSequenceClassification` loaded with `from_pretrained`
from the same model folder, its tokenizer loaded with `AutoTokenizer`, the GLUE files read here, and
a training loop written from docs/specification.md §Fine-tuning (the paper's Table 7 recipe),
importing nothing from `electra.*`:

- the paper's head (`--head paper`, the default): dropout and one Glorot-initialised linear layer
  on the final [CLS] vector, in place of HF's two-layer head (`--head hf` keeps HF's);
- Adam with decoupled weight decay 0 (none on LayerNorm and biases), β 0.9/0.999, ε 1e-6, and no
  bias correction (the official optimizer; `bias_correction=true` adds it); LR 3e-4 for a
  small-class model (hidden < 512), 1e-4 base, 5e-5 large; layer-wise decay 0.8 (large 0.9) by depth
  (embeddings 0, layer i at i + 1, the head at the top with the full LR; `layerwise_off_by_one`
  puts the head one level higher, as the official code does); 10% warmup times a linear decay from
  step 0; batch 32, a seeded shuffle per epoch; dropout 0.1; clipping at 1.0; per-example losses
  summed over the batch (`loss_reduction=mean` averages); 3 epochs, RTE and STS-B 10;
  pairs truncated longest-first to 128 tokens; STS-B regressed on score / 5 with squared error;
- dev metrics from scikit-learn and scipy: MCC for CoLA, accuracy, Spearman for STS-B (x 100).

`ours` runs `electra.finetuning.run.finetune` with its defaults. `--set key=value` (FinetuneConfig
names) changes the recipe of both, so a factor can be varied in each. Every run writes
OUT/ARM/TASK/seed_N/result.json (ARM: `--arm`, by default the implementation and head); `--report`,
also run after every run, writes OUT/finetune_parity.md: per task and arm the median and range of
the main metric over seeds, the share of dev predictions in the majority class (1.0 is a collapse
to it), and the last epoch's mean training loss.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from reference import ReferenceAdam, decayed, official_lr

TASKS = {  # folder, text columns (positions where the file has no header), label column, labels
    "cola": ("CoLA", (3, None), 1, ("0", "1"), "mcc", 3),
    "sst2": ("SST-2", ("sentence", None), "label", ("0", "1"), "accuracy", 3),
    "mrpc": ("MRPC", ("#1 String", "#2 String"), "Quality", ("0", "1"), "accuracy", 3),
    "stsb": ("STS-B", ("sentence1", "sentence2"), "score", None, "spearman", 10),
    "rte": (
        "RTE",
        ("sentence1", "sentence2"),
        "label",
        ("entailment", "not_entailment"),
        "accuracy",
        10,
    ),
}
# docs/specification.md §Fine-tuning; 0 means "by model size" (lr, decay) or "by task" (epochs)
RECIPE = dict(
    lr=0.0,
    layerwise_lr_decay=0.0,
    layerwise_off_by_one=False,
    weight_decay=0.0,
    warmup_proportion=0.1,
    batch_size=32,
    epochs=0,
    max_seq_len=128,
    dropout=0.1,
    clip_norm=1.0,
    adam_beta1=0.9,
    adam_beta2=0.999,
    adam_eps=1e-6,
    bias_correction=False,
    loss_reduction="sum",
)


def read_task(glue: Path, task: str, split: str) -> tuple[list[tuple[str, str | None]], list]:
    folder, (a, b), label, labels, _, _ = TASKS[task]
    with open(glue / folder / f"{split}.tsv", encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if isinstance(a, str):
        header = rows.pop(0)
        a, label = header.index(a), header.index(label)
        b = header.index(b) if b else None
    texts = [(r[a], r[b] if b is not None else None) for r in rows]
    gold = [float(r[label]) if labels is None else labels.index(r[label]) for r in rows]
    return texts, gold


def score(task: str, gold: list, pred: list) -> float:
    from scipy.stats import spearmanr
    from sklearn.metrics import accuracy_score, matthews_corrcoef

    metric = TASKS[task][4]
    if metric == "mcc":
        return 100 * matthews_corrcoef(gold, pred)
    if metric == "spearman":
        return 100 * spearmanr(gold, pred).statistic
    return 100 * accuracy_score(gold, pred)


class PaperHead(torch.nn.Module):
    """docs/specification.md §Fine-tuning: the final [CLS] vector, dropout, one dense layer (Glorot
    init, TF's default)."""

    def __init__(self, hidden: int, outputs: int, dropout: float):
        super().__init__()
        self.dropout = torch.nn.Dropout(dropout)
        self.out = torch.nn.Linear(hidden, outputs)
        torch.nn.init.xavier_uniform_(self.out.weight)
        torch.nn.init.zeros_(self.out.bias)

    def forward(self, sequence_output: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(sequence_output[:, 0]))


def run_reference(args, task: str, seed: int, recipe: dict, out: Path) -> dict:
    import transformers

    _, _, _, labels, _, task_epochs = TASKS[task]
    outputs = 1 if labels is None else len(labels)
    torch.manual_seed(seed)
    drop = recipe["dropout"]
    model = transformers.ElectraForSequenceClassification.from_pretrained(
        args.model, num_labels=outputs, hidden_dropout_prob=drop, attention_probs_dropout_prob=drop
    )
    if args.random_init:
        from reference import bert_init

        bert_init(model)
    if args.head == "paper":
        model.classifier = PaperHead(model.config.hidden_size, outputs, drop)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    size = (
        "large"
        if model.config.hidden_size >= 1024
        else "base"
        if model.config.hidden_size >= 512
        else "small"
    )
    lr = recipe["lr"] or {"small": 3e-4, "base": 1e-4, "large": 5e-5}[size]
    decay = recipe["layerwise_lr_decay"] or (0.9 if size == "large" else 0.8)
    epochs = recipe["epochs"] or task_epochs
    n_layers = model.config.num_hidden_layers
    top = n_layers + (2 if recipe["layerwise_off_by_one"] else 1)

    def depth(name: str) -> int:
        if name.startswith("electra.embeddings"):  # the tables, their LayerNorm and the projection
            return 0
        if name.startswith("electra.encoder.layer."):
            return int(name.split(".")[3]) + 1
        return top

    groups = [
        (p, recipe["weight_decay"] if decayed(n) else 0.0, decay ** (top - depth(n)))
        for n, p in model.named_parameters()
    ]
    optimizer = ReferenceAdam(
        groups,
        betas=(recipe["adam_beta1"], recipe["adam_beta2"]),
        eps=recipe["adam_eps"],
        bias_correction=recipe["bias_correction"],
    )

    def encode(texts):
        a = [t[0] for t in texts]
        b = [t[1] for t in texts] if texts[0][1] is not None else None
        return tokenizer(a, b, truncation="longest_first", max_length=recipe["max_seq_len"])

    def batch(enc, rows):
        picked = {
            k: [enc[k][i] for i in rows] for k in ("input_ids", "token_type_ids", "attention_mask")
        }
        return {k: torch.tensor(v) for k, v in tokenizer.pad(picked).items()}

    train_texts, train_gold = read_task(Path(args.glue), task, "train")
    dev_texts, dev_gold = read_task(Path(args.glue), task, "dev")
    train_enc, dev_enc = encode(train_texts), encode(dev_texts)
    targets = torch.tensor(train_gold) / 5.0 if labels is None else torch.tensor(train_gold)
    bs = recipe["batch_size"]
    total = math.ceil(len(train_gold) / bs) * epochs
    warmup = int(recipe["warmup_proportion"] * total)
    order = torch.Generator().manual_seed(seed)
    params = list(model.parameters())
    step, epoch_losses = 0, []
    model.train()
    for _ in range(epochs):
        loss_sum = 0.0
        for rows in torch.randperm(len(train_gold), generator=order).split(bs):
            logits = model(**batch(train_enc, rows.tolist())).logits.float()
            y = targets[rows]
            if labels is None:
                losses = (logits.squeeze(-1) - y) ** 2
            else:
                losses = F.cross_entropy(logits, y, reduction="none")
            loss = losses.sum() if recipe["loss_reduction"] == "sum" else losses.mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, recipe["clip_norm"])
            optimizer.step(official_lr(step, lr, total, warmup))
            loss_sum += losses.sum().item()
            step += 1
        epoch_losses.append(loss_sum / len(train_gold))
    model.eval()
    preds = []
    with torch.no_grad():
        for rows in torch.arange(len(dev_gold)).split(64):
            logits = model(**batch(dev_enc, rows.tolist())).logits.float()
            preds += (
                (logits.squeeze(-1) * 5).tolist() if labels is None else logits.argmax(-1).tolist()
            )
    return {
        "metric": score(task, dev_gold, preds),
        "preds": preds,
        "gold": dev_gold,
        "train_loss": epoch_losses,
    }


def run_ours(args, task: str, seed: int, recipe: dict, out: Path) -> dict:
    from electra.finetuning.run import finetune
    from electra.tasks.finetune_config import FinetuneConfig

    cfg = FinetuneConfig(seed=seed, seeds=1, progress=False, random_init=args.random_init, **recipe)
    folder = TASKS[task][0]
    results = finetune(args.model, task, Path(args.glue) / folder, out / "run", cfg, overwrite=True)
    rows = [
        json.loads(x)
        for x in (out / "run" / f"seed_{seed}" / "predictions.jsonl").read_text().splitlines()
    ]
    labels = TASKS[task][3]
    preds = [r["prediction"] if labels is None else labels.index(r["prediction"]) for r in rows]
    gold = [r["label"] if labels is None else labels.index(r["label"]) for r in rows]
    return {
        "metric": results["metrics"][results["main_metric"]],
        "preds": preds,
        "gold": gold,
        "train_loss": results["per_seed"][0]["train_loss"],
    }


def report(out: Path) -> None:
    found: dict[tuple[str, str], list[dict]] = {}
    for f in sorted(out.glob("*/*/seed_*/result.json")):
        r = json.loads(f.read_text())
        found.setdefault((r["task"], r["arm"]), []).append(r)
    if not found:
        return
    arms = sorted({a for _, a in found}, key=lambda a: (not a.startswith("reference"), a))
    lines = [
        "Cells: median (min–max) of the dev metric over seeds; then the median share of dev "
        "predictions in the majority class (classification; 1.00 = collapsed to it) and the median "
        "last-epoch training loss per example.",
        "",
        "| task | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    for task in TASKS:
        cells = []
        for arm in arms:
            runs = found.get((task, arm))
            if not runs:
                cells.append("")
                continue
            v = [r["metric"] for r in runs]
            cell = f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f}), n={len(v)}"
            if runs[0].get("majority_share") is not None:
                cell += f"; maj {statistics.median(r['majority_share'] for r in runs):.2f}"
            cell += f"; loss {statistics.median(r['train_loss'][-1] for r in runs):.3f}"
            cells.append(cell)
        if any(cells):
            lines.append(f"| {task} | " + " | ".join(cells) + " |")
    (out / "finetune_parity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a pretrained discriminator folder (ours or Hugging Face's)")
    p.add_argument("--glue", help="the folder holding CoLA/, SST-2/, ...")
    p.add_argument("--out", required=True)
    p.add_argument("--impl", choices=("ours", "reference"))
    p.add_argument("--head", choices=("paper", "hf"), default="paper", help="the reference's head")
    p.add_argument("--arm", help="the runs' folder under OUT (default: IMPL, or reference-hf)")
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="recipe changes for both"
    )
    p.add_argument(
        "--random-init", action="store_true", help="the same architecture, random weights"
    )
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--report", action="store_true", help="only rebuild OUT/finetune_parity.md")
    args = p.parse_args()
    out = Path(args.out)
    if not args.report:
        if not (args.impl and args.model and args.glue):
            p.error("--impl, --model and --glue are needed unless --report")
        if args.threads:
            torch.set_num_threads(args.threads)
        changes = {}
        for kv in args.set:
            key, value = kv.split("=", 1)
            if key not in RECIPE:
                p.error(f"unknown recipe key {key}: use one of {', '.join(RECIPE)}")
            kind = type(RECIPE[key])
            changes[key] = (value.lower() in ("1", "true")) if kind is bool else kind(value)
        arm = args.arm or (
            args.impl + ("-hf" if args.impl == "reference" and args.head == "hf" else "")
        )
        for task in args.tasks:
            for seed in args.seeds:
                seed_dir = out / arm / task / f"seed_{seed}"
                if (seed_dir / "result.json").is_file():
                    continue
                seed_dir.mkdir(parents=True, exist_ok=True)
                start = time.perf_counter()
                if args.impl == "reference":
                    r = run_reference(args, task, seed, {**RECIPE, **changes}, seed_dir)
                else:
                    r = run_ours(args, task, seed, changes, seed_dir)
                labels = TASKS[task][3]
                majority = None
                if labels is not None:
                    majority = float(np.mean(np.array(r["preds"]) == statistics.mode(r["gold"])))
                result = {
                    "task": task,
                    "arm": arm,
                    "seed": seed,
                    "metric": r["metric"],
                    "majority_share": majority,
                    "train_loss": r["train_loss"],
                    "changes": changes,
                    "random_init": args.random_init,
                    "model": args.model,
                    "minutes": (time.perf_counter() - start) / 60,
                }
                (seed_dir / "result.json").write_text(json.dumps(result, indent=1))
                print(
                    f"{arm} {task} seed {seed}: {r['metric']:.2f} ({result['minutes']:.1f} min)",
                    file=sys.stderr,
                )
    report(out)


if __name__ == "__main__":
    main()
