"""The encoder families' `transformers` names: one table per family gives the config.json that
names a class, the Auto class `electra export` points to, and the head each of ours exports to."""

from __future__ import annotations

from electra.hf.from_transformers import ENCODER_SOURCES, TASK_HEADS
from electra.model.electra.hf import HF
from electra.model.hf_names import auto_class, hf_families

from .conftest import tiny_model_config


def test_config_json_names_the_class_and_carries_the_model_and_extras():
    cfg = tiny_model_config()
    config = HF.config_json("ElectraForTokenClassification", cfg, num_labels=3)
    assert config["architectures"] == ["ElectraForTokenClassification"]
    assert config["model_type"] == "electra" and config["position_embedding_type"] == "absolute"
    assert config["hidden_size"] == cfg.hidden_size and config["num_labels"] == 3
    assert hf_families()["electra"] is HF


def test_heads_export_to_their_hf_classes():
    assert auto_class("ElectraForQuestionAnswering") == "AutoModelForQuestionAnswering"
    assert auto_class("ElectraForPreTraining") == "ElectraForPreTraining"  # not a task head
    assert HF.exported_head("ElectraForSpanQuestionAnswering").hf_class == (
        "ElectraForQuestionAnswering"
    )
    assert HF.exported_head("ElectraForQuestionAnswering") is None  # the XLNet-style head
    electra_heads = (
        "ElectraForSequenceClassification",
        "ElectraForTokenClassification",
        "ElectraForQuestionAnswering",
    )
    modern_heads = tuple(n.replace("Electra", "ModernBert") for n in electra_heads)
    assert (*electra_heads, *modern_heads) == TASK_HEADS  # every family's run as they are
    assert list(ENCODER_SOURCES)[:5] == [  # then the modern family's (tests/test_modern_hf.py)
        "ElectraModel",
        *electra_heads,
        "ElectraForSpanQuestionAnswering",
    ]
