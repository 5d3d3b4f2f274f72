"""Fine-tuned model folders: a model folder (`electra.hf.pretrained`: `config.json` naming the
head's class, weights, tokenizer) plus `finetune.json`, the task, its head (labels, scale), the
recipe, the pretrained model it came from and what it was trained and scored on, and
`training_rows.npy`, the keys of the rows it trained on (`electra.finetuning.overlap`; absent in a
folder fine-tuned before they were kept).

Save one (`save_finetuned`), tell one (`is_finetuned`, `finetuned_dir`: a seed folder, or a
`finetune --out` folder standing for its best seed), read it (`read_finetune_info`,
`load_finetuned`) or load it to predict (`load_for_inference`). A Hugging Face classifier, tagger
or QA folder loads here too, as the task its `config.json` describes
(`electra.hf.from_transformers`). `predict`, `evaluate` and `export` read this format; only the
fine-tuning recipe (`electra.finetuning.run`) writes it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tokenizers
from torch import nn

from electra.atomic import write_json_atomic
from electra.config import InferenceRuntime
from electra.engine.runtime import Runtime
from electra.errors import ElectraError
from electra.finetuning.config import FinetuneConfig
from electra.finetuning.overlap import save_rows
from electra.hf.from_transformers import is_hf_task_dir, load_hf_finetuned
from electra.hf.pretrained import (
    load_strict,
    model_tokenizer,
    read_model_config,
    read_state_dict,
    save_pretrained,
)
from electra.model.heads import head_classes
from electra.tasks import get_task
from electra.tasks.base import Task

if TYPE_CHECKING:
    from electra.finetuning.dev_split import HeldOut

FINETUNE_FILE = "finetune.json"
# A finetune --out folder's summary, naming its best seed's folder (`best_seed_dir`).
RESULTS_FILE = "results.json"


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
    held_out: HeldOut | None = None,
    training_rows: np.ndarray | None = None,
) -> None:
    """`source` is the pretrained model; `baseline` the fitted trivial predictor, kept so that
    `evaluate` can score it on any split without reading the training set again; `data` the files
    it was trained and scored on (`data_files`), for the model card of an export; `trained` the
    training file and its hash, `held_out` the dev examples held out of it and `training_rows`
    the keys of the rows it trained on (`electra.finetuning.overlap`, training_rows.npy), so
    that `evaluate` scores no training row."""
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
            "dev_split": held_out.to_json() if held_out else None,
        },
    )


def is_finetuned(path: str | Path) -> bool:
    """Whether `path` is one of our fine-tuned model folders, or a finetune --out folder (which
    `finetuned_dir` resolves to its best seed). A Hugging Face task folder is not: it is run as it
    is (`finetuned_dir`), but exported as any model folder."""
    path = Path(path)
    return (path / FINETUNE_FILE).is_file() or _best_seed_dir(path) is not None


def _best_seed_dir(path: Path) -> str | None:
    """The best seed's folder name that a finetune --out folder's results.json gives, else None."""
    try:
        best = json.loads((path / RESULTS_FILE).read_text()).get("best_seed_dir")
    except (OSError, ValueError, AttributeError):
        return None
    return best if isinstance(best, str) else None


def finetuned_dir(path: str | Path) -> Path:
    """A fine-tuned model folder, or a fine-tuning output folder (its best seed), or a Hugging
    Face classifier, tagger or QA folder (`electra.hf.from_transformers.is_hf_task_dir`)."""
    path = Path(path)
    if (path / FINETUNE_FILE).is_file():
        return path
    best = _best_seed_dir(path)
    if best and (path / best / FINETUNE_FILE).is_file():
        return path / best
    if not path.exists():
        raise ElectraError(f"fine-tuned model not found: {path}")
    if is_hf_task_dir(path):
        return path
    raise ElectraError(
        f"{path} is not a fine-tuned model (no {FINETUNE_FILE}): pass the --out folder of "
        "`electra finetune` or one of its seed folders"
    )


def read_finetune_info(path: Path) -> dict[str, Any]:
    """The `finetune.json` of a fine-tuned model folder (`finetuned_dir`'s), or {} for a Hugging
    Face folder, which has none."""
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
    if not (path / FINETUNE_FILE).is_file():
        return load_hf_finetuned(path)
    info = read_finetune_info(path)
    cfg = FinetuneConfig.from_values(info["config"], source=str(path / FINETUNE_FILE))
    task = get_task(info["task"], cfg).with_head_config(info.get("head", {}))
    _, model_cfg = read_model_config(path, head_classes())
    model = task.build_model(model_cfg)
    load_strict(model, read_state_dict(path), path)
    return task, model, model_tokenizer(path, model_cfg), cfg  # checked against the weights'


def load_for_inference(
    path: str | Path, runtime: InferenceRuntime | None = None
) -> tuple[Task, nn.Module, tokenizers.Tokenizer, FinetuneConfig, Runtime]:
    """A fine-tuned model (`load_finetuned`) ready to predict, in eval mode, on the runtime
    `runtime` sets over the one it was fine-tuned with (`electra.config.InferenceRuntime`: not the
    training machine's device, never compiled). CUDA graphs are captured only where there is a
    GPU."""
    task, model, tokenizer, cfg = load_finetuned(path)
    cfg = (runtime or InferenceRuntime()).over(cfg)
    run_time = Runtime.from_config(cfg)
    if run_time.device.type != "cuda":
        cfg = replace(cfg, cuda_graph=False)
        run_time = replace(run_time, cuda_graph=False)
    return task, run_time.prepare(model).eval(), tokenizer, cfg, run_time
