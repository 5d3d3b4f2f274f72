"""The modern family's task heads on the Hugging Face side: what `electra export` writes of a
fine-tuned model, the classifier a `ModernBertForSequenceClassification` folder runs as, and the
model card's note. Our heads are HF's own (`electra.model.modernbert.heads`: dense -> act -> norm
-> linear), so the weights go as they are (`electra.model.hf_names.HFNames`' hooks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from electra.model.hf_names import TaskHead
from electra.model.modernbert.heads import ModernBertForSequenceClassification


def export_state(
    task: Any, model: nn.Module, head: TaskHead, state: dict[str, torch.Tensor], source: Path
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The weights as they are (HF's own head: the keys are already its), and a sequence
    classifier's pooling as HF's `classifier_pooling`."""
    if task.regression:  # HF's logit is then the value itself
        factor = float(task.value_scale)
        state["classifier.weight"] *= factor
        state["classifier.bias"] *= factor
    extra = {"classifier_pooling": model.pooling} if hasattr(model, "pooling") else {}
    return state, extra


def import_classifier(raw: dict, model_cfg: Any, num_labels: int) -> nn.Module:
    """HF's own head, pooling as its config says."""
    return ModernBertForSequenceClassification(
        model_cfg, num_labels, raw.get("classifier_pooling", "cls")
    )


def card_note(pipeline: str, config: dict) -> list[str]:
    """The heads are HF's own (dense -> act -> norm -> linear), trained as they are shipped: no
    rewrite to describe."""
    note = (
        "The model was fine-tuned with the head it is shipped with, HF's own "
        f"(`{config['architectures'][0]}`: dense, activation, norm, then the linear layer), so "
        "the logits are the fine-tuned model's and further training starts where it stopped."
    )
    if pipeline == "text-classification":
        note += f" Pooling: `{config.get('classifier_pooling', 'cls')}`."
        if config.get("problem_type") == "regression":
            note += " The logit is the predicted value itself, on the labels' scale."
    if pipeline == "question-answering":
        note += " The linear start/end head (`--qa-head linear`)."
    note += " The tokenizer gives no `token_type_ids`: the architecture has no segments."
    return [note, ""]
