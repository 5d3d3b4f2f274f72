"""The DeBERTa-v3 family's task heads on the Hugging Face side: what `electra export` writes of a
fine-tuned model, the classifier a `DebertaV2ForSequenceClassification` folder runs as, and the
model card's note. Our heads are HF's own (`electra.model.deberta.heads`: the context pooler, then
the linear layer), so the weights go as they are (`electra.model.hf_names.HFNames`' hooks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from electra.model.deberta.heads import DebertaV2ForSequenceClassification
from electra.model.hf_names import TaskHead


def export_state(
    task: Any, model: nn.Module, head: TaskHead, state: dict[str, torch.Tensor], source: Path
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The weights as they are (HF's own head: the keys are already its); a regression's
    classifier scaled so that its logit is the value itself, on the labels' scale."""
    if task.regression:
        factor = float(task.value_scale)
        state["classifier.weight"] = state["classifier.weight"] * factor
        state["classifier.bias"] = state["classifier.bias"] * factor
    return state, {}


def import_classifier(raw: dict, model_cfg: Any, num_labels: int) -> nn.Module:
    """HF's own head (its pooler's activation and dropout are the config's fields)."""
    return DebertaV2ForSequenceClassification(model_cfg, num_labels)


def card_note(pipeline: str, config: dict) -> list[str]:
    """The heads are HF's own, trained as they are shipped: no rewrite to describe."""
    note = (
        "The model was fine-tuned with the head it is shipped with, HF's own "
        f"(`{config['architectures'][0]}`"
    )
    if pipeline == "text-classification":
        note += ": the first token's state through the context pooler, then the linear layer"
    note += (
        "), so the logits are the fine-tuned model's and further training starts where it stopped."
    )
    if pipeline == "text-classification" and config.get("problem_type") == "regression":
        note += " The logit is the predicted value itself, on the labels' scale."
    if pipeline == "question-answering":
        note += " The linear start/end head (`--qa-head linear`)."
    note += (
        " The tokenizer gives no `token_type_ids`: DeBERTa-v3 has no segments (a pair is told by "
        "its separators), and its positions are relative: the config states every setting of "
        "its disentangled attention (`relative_attention`, `pos_att_type`, `position_buckets`, "
        "...), as `transformers` needs them to compute DeBERTa-v3."
    )
    return [note, ""]
