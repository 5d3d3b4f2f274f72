"""Export to Hugging Face: folders that `transformers` loads unchanged
(docs/specification.md §Hugging Face naming).

Our module names are Hugging Face's, so export is a re-save through our own loader: the weights are
checked against their config on the way, and a model that HF ELECTRA cannot represent is refused
rather than written as weights that load but compute something else.
"""

from __future__ import annotations

from pathlib import Path

import tokenizers
import torch
from safetensors.torch import load_model
from torch import nn

from electra.atomic import atomic_dir
from electra.checkpoint import PREFIX, checkpoint_dirs
from electra.config import RunConfig
from electra.errors import ElectraError
from electra.objectives import build_objective
from electra.pretrained import (
    ROLES,
    is_model_dir,
    load_pretrained,
    resolve_model_dir,
    save_pretrained,
)
from electra.tokenizer import load_tokenizer, special_ids

# Activations that `transformers.activations.ACT2FN` implements exactly as we do.
HF_ACTIVATIONS = ("gelu", "relu", "gelu_new", "gelu_pytorch_tanh")


def check_exportable(model: nn.Module, source: Path) -> None:
    """Refuses what `transformers` ELECTRA cannot express: an activation it lacks, or weights
    beyond its names (an unfolded GDES residual, say), rather than writing a model that loads but
    computes something else."""
    cfg = model.config
    if cfg.hidden_act not in HF_ACTIVATIONS:
        raise ElectraError(
            f"{source}: hidden_act={cfg.hidden_act!r} has no Hugging Face ELECTRA equivalent; "
            "export is refused rather than writing a model that computes something else"
        )
    with torch.device("meta"):
        reference = set(type(model)(cfg).state_dict())
    extra = sorted(set(model.state_dict()) - reference)
    if extra:
        raise ElectraError(
            f"{source}: weights {', '.join(extra[:3])} have no Hugging Face ELECTRA counterpart; "
            "export the model folder pretraining wrote (it folds them in)"
        )


def checkpoint_models(
    run_dir: Path, step: int
) -> tuple[list[tuple[str, nn.Module]], tokenizers.Tokenizer]:
    """The networks of RUN/checkpoints/step_N by role, and the run's tokenizer: a finished or
    unfinished run's intermediate weights, as the model folders pretraining would have written."""
    found = {int(p.name[len(PREFIX) :]): p for p in checkpoint_dirs(run_dir)}
    if step not in found:
        have = ", ".join(map(str, found)) or "none"
        raise ElectraError(f"{run_dir} has no checkpoint at step {step} (it has: {have})")
    ckpt = found[step]
    cfg = RunConfig.load(ckpt / "config.json")
    tokenizer = load_tokenizer(run_dir / "tokenizer")
    objective = build_objective(cfg.model, cfg.objective, special_ids(tokenizer), cfg.data.seq_len)
    try:
        load_model(objective, str(ckpt / "model.safetensors"), strict=True)
    except (OSError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0]
        raise ElectraError(f"cannot load {ckpt / 'model.safetensors'}: {first}") from None
    return list(objective.models().items()), tokenizer


def export_hf(
    model_path: str | Path, out: str | Path, overwrite: bool = False, step: int | None = None
) -> list[Path]:
    """Writes OUT/discriminator, OUT/generator (for a run or pair folder) or OUT (one model). With
    `step`, the networks come from that checkpoint of the run at `model_path`."""
    model_path, out = Path(model_path), Path(out)
    if out.exists() and not overwrite:
        raise ElectraError(f"{out} already exists: pass --overwrite or another --out")
    if step is not None:
        models, tokenizer = checkpoint_models(model_path, step)
        sources = [(model_path, role, model, tokenizer) for role, model in models]
    else:
        roles = [r for r in ROLES if is_model_dir(model_path / r)]
        dirs = [(model_path / r, r) for r in roles] or [(resolve_model_dir(model_path), "")]
        sources = [(src, role, *load_pretrained(src)) for src, role in dirs]
    with atomic_dir(out, tag="export-tmp") as tmp:
        for src, role, model, tokenizer in sources:
            check_exportable(model, src)
            save_pretrained(model, tmp / role if role else tmp, tokenizer)
    return [out / role if role else out for _, role, _, _ in sources]
