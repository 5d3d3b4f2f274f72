"""The fine-tuned model folder as a format: save one, recognise one, load it for training or for
inference (our own folders and Hugging Face task folders alike)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import tokenizers
from torch import nn

from electra.atomic import (
    write_json_atomic,
)
from electra.config import INFERENCE_RUNTIME, ModelConfig, with_values
from electra.data.tokenizer import load_tokenizer
from electra.engine.runtime import (
    Runtime,
    configure_process,
    prepare_model,
    resolve_device,
)
from electra.errors import ElectraError
from electra.finetuning.config import FinetuneConfig
from electra.finetuning.dev_split import (
    HeldOut,
)
from electra.hf.from_transformers import is_hf_task_dir, load_hf_encoder, load_hf_finetuned
from electra.hf.pretrained import (
    load_pretrained,
    load_strict,
    read_model_config,
    read_state_dict,
    resolve_model_dir,
    save_pretrained,
)
from electra.model.heads import HEADS
from electra.tasks import get_task
from electra.tasks.base import Task

FINETUNE_FILE = "finetune.json"


def load_encoder(path: str | Path) -> tuple[ModelConfig, dict, tokenizers.Tokenizer, Path]:
    """A pretrained model folder (ours or Hugging Face's, or a run): its encoder's config,
    weights (the `electra.*` tensors) and tokenizer. A Hugging Face folder with a task head, or
    none (`ElectraModel`), gives its encoder (`electra.hf.from_transformers.load_hf_encoder`)."""
    if (found := load_hf_encoder(path)) is not None:
        return found
    model, tokenizer = load_pretrained(path)
    encoder_state = {f"electra.{k}": v for k, v in model.electra.state_dict().items()}
    return model.config, encoder_state, tokenizer, resolve_model_dir(path)


def finetuned_dir(path: str | Path) -> Path:
    """A fine-tuned model folder, or a fine-tuning output folder (its best seed), or a Hugging
    Face classifier, tagger or QA folder (`electra.hf.from_transformers.is_hf_task_dir`)."""
    path = Path(path)
    if (path / FINETUNE_FILE).is_file():
        return path
    results = path / "results.json"
    if results.is_file():
        best = json.loads(results.read_text()).get("best_seed_dir")
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


def load_finetuned(
    path: str | Path,
) -> tuple[Task, nn.Module, tokenizers.Tokenizer, FinetuneConfig]:
    path = finetuned_dir(path)
    if not (path / FINETUNE_FILE).is_file():
        return load_hf_finetuned(path)
    try:
        info = json.loads((path / FINETUNE_FILE).read_text())
    except (OSError, ValueError) as e:
        raise ElectraError(
            f"cannot read {path / FINETUNE_FILE} ({e}): it may be truncated; fine-tune again"
        ) from None
    cfg = finetune_config(info["config"], source=str(path / FINETUNE_FILE))
    task = get_task(info["task"], cfg).with_head_config(info.get("head", {}))
    _, model_cfg = read_model_config(path, HEADS)
    model = task.build_model(model_cfg)
    load_strict(model, read_state_dict(path), path)
    return task, model, load_tokenizer(path), cfg


def load_for_inference(
    path: str | Path, runtime: dict[str, Any] | None = None
) -> tuple[Task, nn.Module, tokenizers.Tokenizer, FinetuneConfig, Runtime]:
    """A fine-tuned model (`load_finetuned`) ready to predict, in eval mode: its runtime is the
    one it was fine-tuned with, but on the device `auto` picks, with a progress bar and without
    compiling, with the `INFERENCE_RUNTIME` settings in `runtime` (the command line's) on top.
    CUDA graphs are captured only where there is a GPU."""
    task, model, tokenizer, cfg = load_finetuned(path)
    if unknown := set(runtime or {}) - set(INFERENCE_RUNTIME):
        raise ElectraError(f"{', '.join(sorted(unknown))}: not a setting of inference")
    fresh = {"device": "auto", "compile": False, "progress": True}  # not the training machine's
    cfg = with_values(cfg, {**fresh, **(runtime or {})}, "command line")
    device = resolve_device(cfg.device)
    configure_process(device)
    cfg = replace(cfg, cuda_graph=cfg.cuda_graph and device.type == "cuda")
    model = prepare_model(model, device, cfg.kernels).eval()
    return task, model, tokenizer, cfg, Runtime.of(cfg, device)


def finetune_config(values: dict[str, Any], source: str) -> FinetuneConfig:
    """The recipe from named values (see `electra.config.with_values`)."""
    return FinetuneConfig.from_values(values, source)


def save_finetuned(
    model: nn.Module,
    task: Task,
    tokenizer,
    cfg: FinetuneConfig,
    out_dir: Path,
    source: Path,
    baseline: dict | None = None,
    data: dict[str, str] | None = None,
    trained: dict[str, str] | None = None,
    held_out: HeldOut | None = None,
) -> None:
    """`baseline` is the fitted trivial predictor, kept so that `evaluate` can score it on any
    split without reading the training set again; `data` the files it was trained and scored on
    (`data_files`), for the model card of an export; `trained` the training file and its hash and
    `held_out` the dev examples held out of it, so that `evaluate` scores no training row."""
    save_pretrained(model, out_dir, tokenizer)
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
