"""Fine-tuned model folders: a model folder (`electra.folders.model_folder`: `config.json` naming
the head's class, weights, tokenizer) plus `finetune.json`, the task, its head (labels, scale), the
recipe, the pretrained model it came from and what it was trained and scored on, and
`training_rows.npy`, the keys of the rows it trained on (`electra.finetuning.overlap`; absent in a
folder fine-tuned before they were kept).

Save one (`save_finetuned`), tell one (`is_finetuned`, `finetuned_dir`: a seed folder, or a
`finetune --out` folder standing for its best seed) and read it (`read_finetune_info`,
`load_finetuned`, `load_rows`). This is our format only: `predict` and `evaluate` also take a
Hugging Face classifier, tagger or QA folder, which `electra.finetuning.loading` tells apart and
loads. `predict`, `evaluate` and `export` read this format; only the fine-tuning recipe
(`electra.finetuning.run`) writes it.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
from torch import nn

from electra.atomic import atomic_path, write_json_atomic
from electra.errors import ElectraError
from electra.folders.model_folder import (
    load_strict,
    model_tokenizer,
    read_model_config,
    save_pretrained,
)
from electra.folders.weights import read_state_dict
from electra.model.heads import head_classes
from electra.tasks import get_task
from electra.tasks.base import Task
from electra.tasks.finetune_config import FinetuneConfig

FINETUNE_FILE = "finetune.json"
# A finetune --out folder's summary, naming its best seed's folder (`best_seed_dir`).
RESULTS_FILE = "results.json"
# The keys of the rows the model trained on (`electra.finetuning.overlap.row_keys`), sorted
# uint64: 8 bytes a row, no pickle.
ROWS_FILE = "training_rows.npy"


def save_finetuned(
    model: nn.Module,
    task: Task,
    tokenizer: tokenizers.Tokenizer,
    cfg: FinetuneConfig,
    out_dir: Path,
    source: Path,
    baseline: dict | None = None,
    data: dict[str, str] | None = None,
    trained: dict[str, str] | None = None,
    dev_split: dict[str, Any] | None = None,
    training_rows: np.ndarray | None = None,
) -> None:
    """`source` is the pretrained model; `baseline` the fitted trivial predictor, kept so that
    `evaluate` can score it on any split without reading the training set again; `data` the files
    it was trained and scored on (`data_files`), for the model card of an export; `trained` the
    training file and its hash, `dev_split` the dev examples held out of it (the record of
    `electra.finetuning.dev_split.HeldOut.to_json`) and `training_rows` the keys of the rows it
    trained on (`save_rows`), so that `evaluate` scores no training row."""
    save_pretrained(model, out_dir, tokenizer)
    if training_rows is not None:
        save_rows(out_dir, training_rows)
    write_json_atomic(
        out_dir / FINETUNE_FILE,
        {
            "task": task.name,
            "head": task.head_config(),
            "config": asdict(cfg),
            "pretrained": str(source),
            "baseline": baseline,
            "data": data,
            "trained_on": trained,
            "dev_split": dev_split,
        },
    )


def save_rows(folder: Path, keys: np.ndarray) -> None:
    """Keeps the keys of the rows a model trained on with it: sorted, each once."""
    with atomic_path(folder / ROWS_FILE) as tmp, open(tmp, "wb") as f:
        np.save(f, np.unique(keys).astype("<u8"), allow_pickle=False)


def load_rows(folder: Path) -> np.ndarray | None:
    """The keys a fine-tuned model folder keeps of its training rows; None for a folder fine-tuned
    before they were kept (or a Hugging Face folder)."""
    file = folder / ROWS_FILE
    if not file.is_file():
        return None
    try:
        keys = np.load(file, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise ElectraError(
            f"cannot read {file} ({e}): it may be truncated; fine-tune again"
        ) from None
    if keys.dtype != np.dtype("<u8") or keys.ndim != 1:
        raise ElectraError(f"{file} is not a list of row keys (uint64): fine-tune again")
    return keys


def is_finetuned(path: str | Path) -> bool:
    """Whether `path` is one of our fine-tuned model folders, or a finetune --out folder (which
    `finetuned_dir` resolves to its best seed). A Hugging Face task folder is not: it is run as it
    is (`electra.finetuning.loading`), but exported as any model folder."""
    path = Path(path)
    return (path / FINETUNE_FILE).is_file() or _best_seed_dir(path) is not None


def own_finetuned_dir(path: Path) -> Path | None:
    """Our fine-tuned model folder that `path` is or stands for (a finetune --out folder: its best
    seed's); None where it is neither."""
    if (path / FINETUNE_FILE).is_file():
        return path
    best = _best_seed_dir(path)
    if best and (path / best / FINETUNE_FILE).is_file():
        return path / best
    return None


def _best_seed_dir(path: Path) -> str | None:
    """The best seed's folder name that a finetune --out folder's results.json gives, else None."""
    try:
        best = json.loads((path / RESULTS_FILE).read_text()).get("best_seed_dir")
    except (OSError, ValueError, AttributeError):
        return None
    return best if isinstance(best, str) else None


def finetuned_dir(path: str | Path) -> Path:
    """A fine-tuned model folder, or a fine-tuning output folder (its best seed); else one line
    saying what to pass."""
    path = Path(path)
    found = own_finetuned_dir(path)
    if found is not None:
        return found
    if not path.exists():
        raise ElectraError(f"fine-tuned model not found: {path}")
    raise ElectraError(
        f"{path} is not a fine-tuned model (no {FINETUNE_FILE}): pass the --out folder of "
        "`electra finetune` or one of its seed folders"
    )


def read_finetune_info(path: Path) -> dict[str, Any]:
    """The `finetune.json` of a fine-tuned model folder (`finetuned_dir`'s), or {} for a Hugging
    Face task folder, which has none."""
    file = path / FINETUNE_FILE
    if not file.is_file():
        return {}
    try:
        info = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise ElectraError(
            f"cannot read {file} ({e}): it may be truncated; fine-tune again"
        ) from None
    if not isinstance(info, dict):
        raise ElectraError(f"{file} is not a JSON object: fine-tune again")
    return info


def load_finetuned(
    path: str | Path,
) -> tuple[Task, nn.Module, tokenizers.Tokenizer, FinetuneConfig]:
    """The task (with its head's labels or scale), the model with its weights, the tokenizer and
    the recipe of a fine-tuned model (`finetuned_dir` resolves `path`), on the CPU."""
    path = finetuned_dir(path)
    info = read_finetune_info(path)
    cfg = FinetuneConfig.from_values(info["config"], source=str(path / FINETUNE_FILE))
    task = get_task(info["task"], cfg).with_head_config(info.get("head", {}))
    _, model_cfg = read_model_config(path, head_classes())
    model = task.build_model(model_cfg)
    load_strict(model, read_state_dict(path), path)
    return task, model, model_tokenizer(path, model_cfg), cfg  # checked against the weights'
