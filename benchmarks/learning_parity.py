"""Pretraining parity: our ELECTRA against an independent reference, curve by curve, over seeds.

    python benchmarks/learning_parity.py --data wiki-128 --out parity --impl reference --seeds 0 1 2
    python benchmarks/learning_parity.py --data wiki-128 --out parity --impl ours --seeds 0 1 2
    python benchmarks/learning_parity.py --out parity --report

The reference is built only from Hugging Face's `ElectraForMaskedLM` (the generator) and
`ElectraForPreTraining` (the discriminator); everything around them is written here from
docs/specification.md §Replaced token detection and §Pretraining data, not from `electra.*`
modules:

- generator dimensions by `RP.get_generator_config` (hidden = round(H * fraction), FFN 4x, heads
  hidden // 64), the word, position and token-type tables and the embedding LayerNorm shared
  between the two networks, the generator's output layer tied to the word table;
- BERT's init: truncated normal (std 0.02) for weights and tables, zero biases, the
  discriminator's last layer Glorot-uniform;
- `PH.mask`: N = int((mask_prob + 0.005) * T) slots drawn uniformly *with replacement* among real,
  non-special tokens, round(real tokens * mask_prob) of them used, 85% of the used ones [MASK] and
  15% kept; the MLM loss is Σ w·nll / Σ w over the slots;
- `PH.sample_from_softmax`: Gumbel-max in fp32 at every used slot; "replaced" only where the sample
  differs from the original; the discriminator's sigmoid cross-entropy as a mean over all real
  tokens; loss = gen_weight * MLM + disc_weight * RTD;
- `OPT`: Adam with decoupled weight decay added to the update, no decay on LayerNorm and bias
  variables, bias correction only if the run's config asks for it (the official optimizer has
  none); LR = peak * (1 - step / total) * min(1, step / warmup); global clipping over both networks;
- batches: the prepared shards read with numpy, a seeded permutation per epoch, the tail dropped.

Both implementations take the same `RunConfig` (a preset plus `--set section.field=value`
overrides) and the same seed policy (the seed sets the initialisation, the masking draws and the
data order), and log the same window means every `train.log_every` steps: MLM loss and accuracy,
discriminator loss, AUC and accuracy, and the fraction of real tokens replaced. Runs are kept under
OUT/ARM/seed_N/ (ARM defaults to the implementation's name), so arms and seeds can run at different
times or side by side; `--report` (also run after every run) writes OUT/parity.md, a table of every
metric at chosen steps (median and range over seeds per arm, and whether the ranges overlap), and
OUT/parity.png with each arm's median curve and min-max band.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from reference import ReferenceAdam, bert_init, decayed, official_lr

METRICS = ("mlm_loss", "mlm_acc", "disc_loss", "disc_auc", "disc_acc", "replaced_frac")


# --- the reference --------------------------------------------------------------------------------


class ReferenceData:
    """The prepared folder read with numpy: token ids [n, T] and (len([CLS] A [SEP]), real length)."""

    def __init__(self, path: Path, seed: int, batch_size: int):
        meta = json.loads((path / "meta.json").read_text())
        self.seq_len = meta["seq_len"]
        self.vocab_size = meta["vocab_size"]
        self.ids = np.concatenate([np.load(path / s["ids"]) for s in meta["shards"]])
        self.lengths = np.concatenate([np.load(path / s["lengths"]) for s in meta["shards"]])
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path / "tokenizer" / "tokenizer.json"))
        self.special = {t: tok.token_to_id(f"[{t.upper()}]") for t in ("pad", "cls", "sep", "mask")}
        self.seed, self.batch_size = seed, batch_size
        self.epoch, self.order = -1, np.array([], dtype=np.int64)

    def batches(self):
        while True:
            self.epoch += 1
            order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.ids))
            for start in range(0, len(order) - self.batch_size + 1, self.batch_size):
                rows = np.sort(order[start : start + self.batch_size])
                ids = torch.from_numpy(self.ids[rows].astype(np.int64))
                pos = torch.arange(self.seq_len)
                first, real = (
                    torch.from_numpy(self.lengths[rows, i].astype(np.int64)) for i in (0, 1)
                )
                mask = (pos < real[:, None]).long()
                types = ((pos >= first[:, None]) & mask.bool()).long()
                yield ids, types, mask


def reference_models(cfg, vocab_size: int):
    import transformers

    m, o = cfg.model, cfg.objective
    common = dict(
        vocab_size=vocab_size,
        embedding_size=m.embedding_size,
        hidden_act=m.hidden_act,
        hidden_dropout_prob=m.hidden_dropout_prob,
        attention_probs_dropout_prob=m.attention_probs_dropout_prob,
        max_position_embeddings=m.max_position_embeddings,
        type_vocab_size=m.type_vocab_size,
        layer_norm_eps=m.layer_norm_eps,
    )
    disc = transformers.ElectraForPreTraining(
        transformers.ElectraConfig(
            hidden_size=m.hidden_size,
            num_hidden_layers=m.num_hidden_layers,
            num_attention_heads=m.num_attention_heads,
            intermediate_size=m.intermediate_size,
            **common,
        )
    )
    g_hidden = round(m.hidden_size * o.generator_hidden_fraction)
    gen = transformers.ElectraForMaskedLM(
        transformers.ElectraConfig(
            hidden_size=g_hidden,
            num_hidden_layers=round(m.num_hidden_layers * o.generator_layers_fraction),
            num_attention_heads=max(1, g_hidden // 64),
            intermediate_size=4 * g_hidden,
            **common,
        )
    )
    for model in (disc, gen):
        bert_init(model, m.initializer_range)
    torch.nn.init.xavier_uniform_(disc.discriminator_predictions.dense_prediction.weight)
    gen.electra.embeddings = disc.electra.embeddings
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    return gen, disc


def reference_mask(ids, mask, special, o, n_slots):
    """PH.mask: slot positions drawn with replacement, the used ones, and the generator's input."""
    candidate = mask.bool()
    for t in ("cls", "sep", "mask"):
        candidate &= ids != special[t]
    count = torch.round(mask.sum(1) * o.mask_prob).long().clamp(1, n_slots)
    positions = torch.multinomial(candidate.float(), n_slots, replacement=True)
    used = torch.arange(n_slots)[None] < count[:, None]
    to_mask = used & (torch.rand(used.shape) < o.mask_frac)
    masked = ids.clone()
    rows = torch.arange(len(ids))[:, None].expand_as(positions)
    masked[rows[to_mask], positions[to_mask]] = special["mask"]
    return positions, used.float(), masked


def run_reference(cfg, data_path: Path, seed: int, out_dir: Path) -> None:
    torch.manual_seed(seed)
    data = ReferenceData(data_path, seed, cfg.train.batch_size)
    gen, disc = reference_models(cfg, data.vocab_size)
    t = cfg.train
    pair = torch.nn.ModuleList([gen, disc]).train()
    optimizer = ReferenceAdam(
        ((p, t.weight_decay if decayed(n) else 0.0, 1.0) for n, p in pair.named_parameters()),
        betas=(t.adam_beta1, t.adam_beta2),
        eps=t.adam_eps,
        bias_correction=t.bias_correction,
    )
    params = list(pair.parameters())
    o = cfg.objective
    n_slots = max(1, int((o.mask_prob + 0.005) * data.seq_len))
    warmup = max(t.warmup_steps, int(t.warmup_proportion * t.steps))
    window: dict[str, list] = {}
    batches = data.batches()
    start = time.perf_counter()
    for step in range(t.steps):
        ids, types, mask = next(batches)
        positions, used, masked = reference_mask(ids, mask, data.special, o, n_slots)
        targets = ids.gather(1, positions)
        hidden = gen.electra(masked, attention_mask=mask, token_type_ids=types).last_hidden_state
        at_slots = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
        logits = gen.generator_lm_head(gen.generator_predictions(at_slots)).float()
        nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        mlm_loss = (nll * used).sum() / used.sum()
        with torch.no_grad():
            u = torch.rand(logits.shape)
            sampled = (logits / o.temperature - torch.log(-torch.log(u + 1e-9) + 1e-9)).argmax(-1)
            fake = ids.clone()
            rows = torch.arange(len(ids))[:, None].expand_as(positions)
            fake[rows[used.bool()], positions[used.bool()]] = sampled[used.bool()]
            labels = (fake != ids).float()
        disc_logits = disc(fake, attention_mask=mask, token_type_ids=types).logits.float()
        real = mask.float()
        per_token = F.binary_cross_entropy_with_logits(disc_logits, labels, reduction="none")
        disc_loss = (per_token * real).sum() / real.sum()
        loss = o.gen_weight * mlm_loss + o.disc_weight * disc_loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, t.clip_norm)
        lr = official_lr(step, t.lr, t.steps, warmup)
        optimizer.step(lr)

        with torch.no_grad():
            keep = mask.bool()
            acc = ((logits.argmax(-1) == targets).float() * used).sum() / used.sum()
            for k, v in {
                "mlm_loss": mlm_loss.item(),
                "mlm_acc": acc.item(),
                "disc_loss": disc_loss.item(),
                "disc_acc": ((disc_logits > 0).float() == labels)[keep].float().mean().item(),
                "replaced_frac": (labels.sum() / real.sum()).item(),
                "scores": disc_logits[keep].numpy(),
                "labels": labels[keep].numpy(),
            }.items():
                window.setdefault(k, []).append(v)
        if (step + 1) % t.log_every == 0 or step + 1 == t.steps:
            from sklearn.metrics import roc_auc_score

            record = {k: statistics.fmean(window[k]) for k in METRICS if k != "disc_auc"}
            record["disc_auc"] = float(
                roc_auc_score(np.concatenate(window["labels"]), np.concatenate(window["scores"]))
            )
            record.update(step=step + 1, lr=lr, elapsed_s=time.perf_counter() - start)
            with (out_dir / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(record) + "\n")
            window = {}
        if t.stop_after and step + 1 >= t.stop_after:  # as our trainer: stop, schedule unchanged
            break


# --- ours -----------------------------------------------------------------------------------------


def run_ours(cfg, data_path: Path, seed: int, out_dir: Path) -> None:
    from electra.pretraining.train import pretrain

    cfg = replace(
        cfg,
        data=replace(cfg.data, path=str(data_path)),
        train=replace(cfg.train, seed=seed, progress=False, tensorboard=False, save_every=10**9),
    )
    pretrain(cfg, out_dir / "run")
    (out_dir / "metrics.jsonl").write_text((out_dir / "run" / "metrics.jsonl").read_text())


# --- the report -----------------------------------------------------------------------------------


def load_runs(out: Path) -> dict[str, list[list[dict]]]:
    arms: dict[str, list[list[dict]]] = {}
    for done in sorted(out.glob("*/seed_*/done.json")):
        rows = [json.loads(x) for x in (done.parent / "metrics.jsonl").read_text().splitlines()]
        arms.setdefault(done.parent.parent.name, []).append(rows)
    return arms


def report(out: Path, at_steps: list[int]) -> None:
    arms = load_runs(out)
    if not arms:
        return
    names = sorted(arms, key=lambda a: (a != "reference", a))
    first = names[0]

    def values(arm: str, step: int, key: str) -> list[float]:
        found = [
            r[key]
            for rows in arms[arm]
            for r in rows
            if r["step"] == step and r.get(key) is not None
        ]
        return found if len(found) == len(arms[arm]) else []

    steps = sorted({r["step"] for rows in arms[first] for r in rows})
    shown = [s for s in steps if s in at_steps] or steps[:: max(1, len(steps) // 8)] + steps[-1:]
    lines = [
        f"Arms and seeds: {', '.join(f'{a} ({len(arms[a])})' for a in names)}. Cells: median "
        f"(min–max) over seeds of the window mean ending at the step; "
        f"✗ marks a {'/'.join(names[1:])} range that does not overlap {first}'s.",
        "",
        "| step | metric | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    apart: dict[tuple[str, str], int] = {}
    compared: dict[str, set[int]] = {}
    for step in steps:
        for key in METRICS:
            cells, base = [], values(first, step, key)
            for arm in names:
                v = values(arm, step, key)
                if not v:
                    cells.append("")
                    continue
                disjoint = (
                    bool(base) and arm != first and (min(v) > max(base) or max(v) < min(base))
                )
                apart[arm, key] = apart.get((arm, key), 0) + disjoint
                if base and arm != first:
                    compared.setdefault(arm, set()).add(step)
                cells.append(
                    f"{statistics.median(v):.4f} ({min(v):.4f}–{max(v):.4f})"
                    + (" ✗" if disjoint else "")
                )
            if step in shown:
                lines.append(f"| {step} | {key} | " + " | ".join(cells) + " |")
    lines += ["", f"Logged windows whose ranges do not overlap {first}'s:", ""]
    for arm in names[1:]:
        counts = ", ".join(f"{k} {apart.get((arm, k), 0)}" for k in METRICS)
        lines.append(f"- {arm}, of {len(compared.get(arm, ()))} windows compared: {counts}")
    (out / "parity.md").write_text("\n".join(lines) + "\n")
    plot(out, arms, names)
    print("\n".join(lines))


def plot(out: Path, arms: dict, names: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("mlm_loss", "disc_loss", "disc_auc", "mlm_acc", "replaced_frac", "disc_acc")
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    for ax, key in zip(axes.flat, keys, strict=True):
        for arm in names:
            runs = arms[arm]
            steps = sorted({r["step"] for r in runs[0]})
            by_step = [
                [r[key] for rows in runs for r in rows if r["step"] == s and r.get(key) is not None]
                for s in steps
            ]
            ok = [i for i, v in enumerate(by_step) if len(v) == len(runs)]
            x = [steps[i] for i in ok]
            med = [statistics.median(by_step[i]) for i in ok]
            ax.plot(x, med, label=f"{arm} (median of {len(runs)})")
            ax.fill_between(
                x, [min(by_step[i]) for i in ok], [max(by_step[i]) for i in ok], alpha=0.25
            )
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle(f"pretraining parity: {out.name}")
    fig.tight_layout()
    fig.savefig(out / "parity.png", dpi=100)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="a folder written by `electra prepare`")
    p.add_argument("--out", required=True)
    p.add_argument("--impl", choices=("ours", "reference"))
    p.add_argument("--arm", help="the runs' folder under OUT (default: the implementation's name)")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--set", nargs="*", default=[], metavar="SECTION.FIELD=VALUE")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--report", action="store_true", help="only rebuild OUT/parity.md and .png")
    p.add_argument("--at", type=int, nargs="*", default=[], help="steps shown in the table")
    args = p.parse_args()
    out = Path(args.out)
    if not args.report:
        if not (args.impl and args.data):
            p.error("--impl and --data are needed unless --report")
        from electra.config import apply_overrides, preset

        overrides = dict(kv.split("=", 1) for kv in args.set)
        cfg = apply_overrides(preset(args.preset), {"train.steps": args.steps, **overrides})
        if args.threads:
            torch.set_num_threads(args.threads)
        run = run_ours if args.impl == "ours" else run_reference
        for seed in args.seeds:
            seed_dir = out / (args.arm or args.impl) / f"seed_{seed}"
            if (seed_dir / "done.json").is_file():
                continue
            if seed_dir.exists():
                import shutil

                shutil.rmtree(seed_dir)
            seed_dir.mkdir(parents=True)
            start = time.perf_counter()
            run(cfg, Path(args.data), seed, seed_dir)
            (seed_dir / "done.json").write_text(
                json.dumps(
                    {
                        "impl": args.impl,
                        "seed": seed,
                        "config": cfg.to_dict(),
                        "minutes": (time.perf_counter() - start) / 60,
                    },
                    indent=1,
                )
            )
            print(
                f"{args.arm or args.impl} seed {seed}: {(time.perf_counter() - start) / 60:.1f} min",
                file=sys.stderr,
            )
    report(out, args.at)


if __name__ == "__main__":
    main()
