"""electra: pretrain text encoders with ELECTRA's replaced token detection, then fine-tune and export them.

The Python API equals the command line (docs/python.md): `electra.train_tokenizer`, `prepare`,
`pretrain`, `experiment`, `detect`, `score_text`, `finetune`, `evaluate`, `probe`, `export`, `predict`,
`score`, `plot` and `preset_sizes` (`electra presets`), one per command, and
`electra.Predictor.load(folder)`. They are named here lazily (PEP 562), so
that `import electra` loads no torch until a function needs it.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Each public name and the module that defines it, imported on first use.
_LAZY = {
    "train_tokenizer": "electra.api",
    "prepare": "electra.api",
    "pretrain": "electra.api",
    "experiment": "electra.api",
    "adapt": "electra.api",
    "detect": "electra.api",
    "score_text": "electra.api",
    "health": "electra.api",
    "finetune": "electra.api",
    "evaluate": "electra.api",
    "probe": "electra.api",
    "export": "electra.api",
    "score": "electra.api",
    "plot": "electra.api",
    "preset_sizes": "electra.api",
    "predict": "electra.finetuning.predict",
    "Predictor": "electra.finetuning.predict",
    "RunConfig": "electra.config",
    "InferenceRuntime": "electra.config",
    "preset": "electra.config",
    "FinetuneConfig": "electra.tasks.finetune_config",
    "ElectraError": "electra.errors",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'electra' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # once found, an attribute like any other
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
