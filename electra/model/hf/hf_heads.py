"""The hf family's hooks on the Hugging Face side (`electra.model.hf_names.HFNames`): the
`config.json` that `transformers` writes for a model, and a fine-tuned model's head, which is the
type's own class (`electra.model.hf.heads`), so its weights go as they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from electra.model.hf.config import HFConfig
from electra.model.hf.heads import TransformersForSequenceClassification
from electra.model.hf.modeling import transformers_config
from electra.model.hf.types import TYPES
from electra.model.hf_names import TaskHead

# Keys `HFNames.config_json` writes itself (the class, the type, the labels).
_OWN_KEYS = ("architectures", "model_type", "id2label", "label2id")


def config_values(cfg: HFConfig) -> dict[str, Any]:
    """The `config.json` keys of `cfg` as `transformers` writes them (`to_diff_dict`)."""
    values = transformers_config(cfg).to_diff_dict()
    return {k: v for k, v in values.items() if k not in _OWN_KEYS}


def export_state(
    task: Any, model: nn.Module, head: TaskHead, state: dict[str, torch.Tensor], source: Path
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The weights as they are (the head is the type's own), a regression's last linear layer
    scaled so that its logit is the value itself."""
    if task.regression:
        out = TYPES[model.config.model_type].classifier_out
        factor = float(task.value_scale)
        state[f"{out}.weight"] = state[f"{out}.weight"] * factor
        state[f"{out}.bias"] = state[f"{out}.bias"] * factor
    return state, {}


def import_classifier(raw: dict, model_cfg: HFConfig, num_labels: int) -> nn.Module:
    """The type's own sequence classifier."""
    return TransformersForSequenceClassification(model_cfg, num_labels)


def card_note(pipeline: str, config: dict) -> list[str]:
    note = (
        f"The model was fine-tuned with the head it is shipped with, `transformers`' own "
        f"(`{config['architectures'][0]}`), so the logits are the fine-tuned model's and further "
        "training starts where it stopped."
    )
    if pipeline == "text-classification" and config.get("problem_type") == "regression":
        note += " The logit is the predicted value itself, on the labels' scale."
    return [note, ""]
