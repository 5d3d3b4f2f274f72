"""Run metrics: one JSON object per logging step in RUN/metrics.jsonl, the same scalars to TensorBoard,
and the discriminator's AUC over every real token of a logging window."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.jsonl import append_jsonl

AUC_BINS = 4096


def auc_histograms(
    logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Counts of real tokens per bin of p(replaced), for replaced and for original tokens.

    Built with scatter_add on the device (static shapes, no host sync), so a logging window can
    sum them over every token it saw and read back one small tensor at the end."""
    bins = (torch.sigmoid(logits.float()) * (AUC_BINS - 1)).round().long().flatten()
    real = mask.flatten().float()
    replaced = labels.flatten().float() * real
    zeros = torch.zeros(AUC_BINS, device=logits.device)
    return zeros.scatter_add(0, bins, replaced), zeros.scatter_add(0, bins, real - replaced)


def auc_from_histograms(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """ROC AUC: P(score of a replaced token > score of an original one), ties counted half.
    Exact up to the bin width; NaN when one class is absent."""
    pos, neg = pos.double().cpu(), neg.double().cpu()
    n_pos, n_neg = pos.sum().item(), neg.sum().item()
    if n_pos == 0 or n_neg == 0:
        return math.nan
    neg_below = torch.cumsum(neg, 0) - neg
    return ((pos * (neg_below + 0.5 * neg)).sum() / (n_pos * n_neg)).item()


class RunLogger:
    def __init__(self, run_dir: Path, tensorboard: bool):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.writer = None
        if tensorboard:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"))

    def log(self, record: dict[str, Any]) -> None:
        clean = {
            k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()
        }
        append_jsonl(self.path, clean)
        if self.writer is not None:
            step = record["step"]
            for k, v in record.items():
                if k != "step" and isinstance(v, int | float) and np.isfinite(v):
                    self.writer.add_scalar(f"train/{k}", v, step)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
