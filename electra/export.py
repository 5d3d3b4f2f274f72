"""Export to Hugging Face: folders that `transformers` loads unchanged (ELECTRA.md §9 naming).

Our module names are Hugging Face's, so export is a re-save through our own loader: the weights are
checked against their config on the way, and a model that HF ELECTRA cannot represent is refused
rather than written as weights that load but compute something else.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from electra.config import ModelConfig
from electra.errors import ElectraError
from electra.pretrained import (
    ROLES,
    is_model_dir,
    load_pretrained,
    resolve_model_dir,
    save_pretrained,
)

# Activations that `transformers.activations.ACT2FN` implements exactly as we do.
HF_ACTIVATIONS = ("gelu", "relu", "gelu_new", "gelu_pytorch_tanh")


def check_exportable(cfg: ModelConfig, source: Path) -> None:
    """Refuses settings `transformers.ElectraModel` cannot express (new variants add checks here)."""
    if cfg.hidden_act not in HF_ACTIVATIONS:
        raise ElectraError(
            f"{source}: hidden_act={cfg.hidden_act!r} has no Hugging Face ELECTRA equivalent; "
            "export is refused rather than writing a model that computes something else"
        )


def export_hf(model_path: str | Path, out: str | Path, overwrite: bool = False) -> list[Path]:
    """Writes OUT/discriminator, OUT/generator (for a run or pair folder) or OUT (one model)."""
    model_path, out = Path(model_path), Path(out)
    roles = [r for r in ROLES if is_model_dir(model_path / r)]
    sources = [(model_path / r, r) for r in roles] or [(resolve_model_dir(model_path), "")]
    if out.exists() and not overwrite:
        raise ElectraError(f"{out} already exists: pass --overwrite or another --out")
    tmp = out.with_name(f".{out.name}.export-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for src, role in sources:
            model, tokenizer = load_pretrained(src)
            check_exportable(model.config, src)
            save_pretrained(model, tmp / role if role else tmp, tokenizer)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [out / role if role else out for _, role in sources]
