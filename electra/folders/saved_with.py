"""What a model folder's weights were saved with, kept in them and checked when they load: the
tokenizer's fingerprint (`electra.data.tokenizer.fingerprint`, as a data folder keeps it) and the
`config.json` fields that set what the network computes.

Both go in the metadata of the `model.safetensors` that
`electra.folders.model_folder.write_model_files` writes (pretraining's model folders, fine-tuned
ones, exports): a header `transformers` ignores, so an exported folder loads there as before. A
folder whose tokenizer was swapped for another run's, or whose config.json was edited (`hidden_act`,
a size, an epsilon), would otherwise load and compute something else without a word; it is refused,
naming what differs. A folder without the record (an older one of ours, or Hugging Face's own) is
taken as it is.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import tokenizers
from safetensors import SafetensorError, safe_open

from electra.data.tokenizer import fingerprint
from electra.errors import ElectraError
from electra.model.configs import AnyModelConfig
from electra.model.family import family_of
from electra.model.hf_names import model_config_from_hf

TOKENIZER_KEY = "electra.tokenizer_fingerprint"
CONFIG_KEY = "electra.computed_config"


def computed_fields(cfg: AnyModelConfig) -> dict[str, Any]:
    """The model config's fields that set the computation (our names, which are HF's): not the
    dropout (only in training, and fine-tuning sets its own: the family's `dropout_fields`) nor
    the initialisation of new weights (`initializer_*`)."""
    dropout = family_of(cfg).dropout_fields
    return {
        k: v
        for k, v in asdict(cfg).items()
        if k not in dropout and not k.startswith("initializer_")
    }


def saved_with(config: dict, tokenizer: tokenizers.Tokenizer) -> dict[str, str]:
    """The metadata to save with weights whose folder holds `config` (config.json's content) and
    `tokenizer`."""
    cfg = model_config_from_hf(config, Path("config.json"))
    return {
        TOKENIZER_KEY: fingerprint(tokenizer),
        CONFIG_KEY: json.dumps(computed_fields(cfg), sort_keys=True),
    }


def saved_metadata(path: Path) -> dict[str, str]:
    """The metadata of `path`/model.safetensors; {} where there is none or it cannot be read (the
    weights' reader then says what is wrong with the file)."""
    file = path / "model.safetensors"
    if not file.is_file():
        return {}
    try:
        with safe_open(str(file), "pt") as f:
            return f.metadata() or {}
    except (SafetensorError, OSError, ValueError):
        return {}


def check_config(path: Path) -> None:
    """Refuses a folder whose config.json sets a computed field otherwise than its weights were
    saved with. (Called once the weights are known to fit the config's sizes, so that an edited
    size is said as the weights' shapes say it.)"""
    try:
        saved = json.loads(saved_metadata(path).get(CONFIG_KEY, "{}"))
    except ValueError:
        return  # not ours to judge: a header someone else wrote
    if not saved:
        return
    file = path / "config.json"
    now = computed_fields(model_config_from_hf(json.loads(file.read_text()), file))
    for name, value in sorted(saved.items() if isinstance(saved, dict) else ()):
        if name in now and now[name] != value:
            raise ElectraError(
                f"{path / 'config.json'}: {name} is {now[name]!r} but the weights in "
                f"{path / 'model.safetensors'} were saved with {name}={value!r}, so they would "
                f"compute something else: set {name} back to {json.dumps(value)} in config.json"
            )


def check_tokenizer(path: Path, tokenizer: tokenizers.Tokenizer) -> None:
    """Refuses a folder's tokenizer that is not the one its weights were trained with."""
    saved = saved_metadata(path).get(TOKENIZER_KEY)
    if saved is None:
        return
    now = fingerprint(tokenizer)
    if now != saved:
        raise ElectraError(
            f"the tokenizer in {path} is not the one its weights were trained with (vocabulary "
            f"fingerprint {now[:12]}, the weights' {saved[:12]}): copy back the tokenizer files "
            "the folder was written with (a run's tokenizer/ folder)"
        )
