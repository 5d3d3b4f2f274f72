"""Run metrics: one JSON object per logging step in RUN/metrics.jsonl, the same scalars to TensorBoard,
and the discriminator's AUC, computed on the host only at logging steps."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import roc_auc_score


def disc_auc(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> float:
    """ROC AUC of the discriminator over real tokens; NaN when only one class is present."""
    keep = mask.bool().cpu().numpy()
    y = labels.cpu().numpy()[keep]
    if y.min(initial=0) == y.max(initial=0):
        return math.nan
    return float(roc_auc_score(y, logits.float().cpu().numpy()[keep]))


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
        with self.path.open("a") as f:
            f.write(json.dumps(clean) + "\n")
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
