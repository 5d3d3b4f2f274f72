"""Run metrics: one JSON object per logging step in RUN/metrics.jsonl and the same scalars to
TensorBoard. What the objects hold is the objective's (`Objective.metrics`, the discriminator's AUC
in `electra.objectives.metrics`) and the trainer's; a held-out measurement
(`electra.scoring.health`, `pretrain --eval-data`) is a record of its own with `"split": "heldout"`,
under `heldout/` in TensorBoard."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from electra.jsonl import append_jsonl, read_jsonl

TRAIN, HELDOUT = "train", "heldout"  # a record's split; a training window's record names none


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
            step, split = record["step"], record.get("split", TRAIN)
            for k, v in record.items():
                if k != "step" and isinstance(v, int | float) and np.isfinite(v):
                    self.writer.add_scalar(f"{split}/{k}", v, step)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_metrics(run_dir: Path, split: str | None = TRAIN) -> list[dict[str, Any]]:
    """The records of RUN/metrics.jsonl of one split: the training windows' (default), or the
    held-out measurements' ("heldout"); every record with `split` None."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = read_jsonl(path, empty_ok=True)
    return rows if split is None else [r for r in rows if r.get("split", TRAIN) == split]
