"""The ELECTRA family's task heads on the Hugging Face side: what `electra export` writes of a
fine-tuned model (the paper's one-layer classifier rewritten exactly into HF's two-layer
`ElectraClassificationHead`, `electra.model.electra.head_rewrite`), the classifier an
`ElectraForSequenceClassification` folder runs as, and the model card's note on the head
(`electra.model.hf_names.HFNames`' hooks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from electra.model.electra.head_rewrite import exact_classification_head, pairs_fit
from electra.model.electra.heads import ElectraForSequenceClassificationHF
from electra.model.hf_names import TaskHead


def export_state(
    task: Any, model: nn.Module, head: TaskHead, state: dict[str, torch.Tensor], source: Path
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The encoder's weights as they are; a classifier's one linear layer as HF's two."""
    if head.pipeline != "text-classification":
        return state, {}
    weight, bias = state.pop("classifier.weight"), state.pop("classifier.bias")
    if task.regression:  # HF's logit is then the value itself
        # The task's `value_scale`, which decode and records apply (STS-B: 5, the head
        # being trained on score/5; regression on the user's files: its largest |target|).
        factor = float(task.value_scale)
        weight, bias = weight * factor, bias * factor
    last = f"electra.encoder.layer.{model.config.num_hidden_layers - 1}.output.LayerNorm"
    rewritten = exact_classification_head(
        weight, bias, state[f"{last}.weight"], state[f"{last}.bias"], source
    )
    state.update({f"classifier.{k}": v for k, v in rewritten.items()})
    return state, {}


def import_classifier(raw: dict, model_cfg: Any, num_labels: int) -> nn.Module:
    """HF's two-layer head, its dropout as the config sets it."""
    return ElectraForSequenceClassificationHF(model_cfg, num_labels, raw.get("classifier_dropout"))


def card_note(pipeline: str, config: dict) -> list[str]:
    """How the exported head relates to the fine-tuned one."""
    if pipeline == "text-classification":
        note = (
            "The model was fine-tuned with the paper's one-layer head (a linear layer on the "
            "final [CLS] vector). It is shipped as the exact equivalent in HF's two-layer "
            "`ElectraClassificationHead`, so the logits are the fine-tuned model's (to fp32 "
            "rounding). "
        )
        if pairs_fit(config["num_labels"], config["hidden_size"]):
            note += (
                "Each logit is carried by pairs of `dense` units of opposite sign, since "
                "GELU(a) - GELU(-a) = a: HF's dropout on them (train mode) moves the logits only "
                "a few percent, so further training starts from the fine-tuned loss."
            )
        else:
            note += (
                "With more labels than half the hidden size, each logit is carried by one "
                "`dense` unit shifted to where GELU is the identity: HF's dropout on those units "
                "(train mode) swings the logits far, so further training starts well above the "
                "fine-tuned loss."
            )
        if config.get("problem_type") == "regression":
            note += " The logit is the predicted value itself, on the labels' scale."
        return [note, ""]
    if pipeline == "question-answering":
        return ["Fine-tuned with the linear start/end head (`--qa-head linear`), HF's own.", ""]
    return []
