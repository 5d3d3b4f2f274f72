"""A fine-tuned model to predict with or score, whichever folder holds it: ours
(`electra.folders.finetuned`: `finetune.json` beside a model folder) or a Hugging Face
classifier, tagger or QA folder (`electra.hf.from_transformers`), loaded as the task its
`config.json` describes. `predict` and `evaluate` take both; the folder format itself knows only
ours, so that it stands below the Hugging Face import."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import tokenizers
from torch import nn

from electra.config import InferenceRuntime
from electra.engine.runtime import Runtime
from electra.folders.finetuned import (
    FINETUNE_FILE,
    finetuned_dir,
    load_finetuned,
    own_finetuned_dir,
)
from electra.hf.from_transformers import is_hf_task_dir, load_hf_finetuned
from electra.tasks.base import Task
from electra.tasks.finetune_config import FinetuneConfig


def finetuned_or_hf_dir(path: str | Path) -> Path:
    """A fine-tuned model folder, or a fine-tuning output folder (its best seed), or a Hugging
    Face classifier, tagger or QA folder (`electra.hf.from_transformers.is_hf_task_dir`)."""
    path = Path(path)
    if own_finetuned_dir(path) is None and path.exists() and is_hf_task_dir(path):
        return path
    return finetuned_dir(path)


def load_finetuned_or_hf(
    path: str | Path,
) -> tuple[Task, nn.Module, tokenizers.Tokenizer, FinetuneConfig]:
    """`electra.folders.finetuned.load_finetuned`, or `load_hf_finetuned` for a Hugging Face task
    folder (`finetuned_or_hf_dir` resolves `path`)."""
    path = finetuned_or_hf_dir(path)
    if not (path / FINETUNE_FILE).is_file():
        return load_hf_finetuned(path)
    return load_finetuned(path)


def load_for_inference(
    path: str | Path, runtime: InferenceRuntime | None = None
) -> tuple[Task, nn.Module, tokenizers.Tokenizer, FinetuneConfig, Runtime]:
    """A fine-tuned model (`load_finetuned_or_hf`) ready to predict, in eval mode, on the runtime
    `runtime` sets over the one it was fine-tuned with (`electra.config.InferenceRuntime`: not the
    training machine's device, never compiled). CUDA graphs are captured only where there is a
    GPU."""
    task, model, tokenizer, cfg = load_finetuned_or_hf(path)
    cfg = (runtime or InferenceRuntime()).over(cfg)
    run_time = Runtime.from_config(cfg)
    if run_time.device.type != "cuda":
        cfg = replace(cfg, cuda_graph=False)
        run_time = replace(run_time, config=cfg)
    return task, run_time.prepare(model).eval(), tokenizer, cfg, run_time
