"""How fast does a discriminator learn from context alone? A diagnostic for short CPU budgets.

    python benchmarks/context_probe.py --data wiki-128 --preset tiny --steps 400 --lr 5e-4

Trains a discriminator by itself on prepared data where the selected 15% of positions are replaced
by draws from the data's unigram distribution, so a token's identity says nothing about whether it
was replaced and only its context can. This is what ELECTRA's discriminator faces once the
generator has learnt word frequencies but not yet context; it prints the loss and the ROC AUC over
each window of `--log-every` steps (50).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch
import torch.nn.functional as F

from electra.config import preset
from electra.data.store import BatchStream, PretrainingData
from electra.engine.optim import build_optimizer, learning_rate, param_groups, set_learning_rate
from electra.model.electra.modeling import ElectraForPreTraining
from electra.objectives.masking import select_positions
from electra.objectives.metrics import auc_from_histograms, auc_histograms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a folder written by `electra prepare`")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--log-every", type=int, default=50, help="steps per printed window")
    args = p.parse_args()

    cfg = preset(args.preset)
    data = PretrainingData(args.data)
    torch.manual_seed(0)
    disc = ElectraForPreTraining(replace(cfg.model, vocab_size=data.vocab_size))
    train = replace(cfg.train, lr=args.lr)
    optimizer = build_optimizer(param_groups(disc, train.weight_decay), train, torch.device("cpu"))
    stream = BatchStream(data, args.batch, seed=0)

    counts = torch.zeros(data.vocab_size)
    for _ in range(50):
        counts += torch.bincount(next(stream)["input_ids"].flatten(), minlength=data.vocab_size)
    for special in (data.special.cls, data.special.sep, data.special.pad):
        counts[special] = 0
    unigram = counts / counts.sum()
    slots = cfg.objective.num_predictions(data.seq_len)

    hist = None
    for step in range(args.steps):
        set_learning_rate(optimizer, learning_rate(step, args.lr, args.steps, args.steps // 10))
        batch = next(stream)
        ids, real = batch["input_ids"], batch["attention_mask"]
        positions, used = select_positions(ids, real, data.special, 0.15, slots)
        draws = torch.multinomial(unigram, positions.numel(), replacement=True)
        draws = torch.where(used.bool(), draws.view(positions.shape), ids.gather(1, positions))
        corrupted = ids.scatter(1, positions, draws)
        labels = (corrupted != ids) & real.bool()
        logits = disc(corrupted, batch["token_type_ids"], real)
        loss = F.binary_cross_entropy_with_logits(logits, labels.float(), weight=real.float())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(disc.parameters(), train.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        h = auc_histograms(logits.detach(), labels, real.bool())
        hist = h if hist is None else (hist[0] + h[0], hist[1] + h[1])
        if (step + 1) % args.log_every == 0:
            print(f"step {step + 1}: loss {loss.item():.4f}, AUC {auc_from_histograms(*hist):.3f}")
            hist = None


if __name__ == "__main__":
    main()
