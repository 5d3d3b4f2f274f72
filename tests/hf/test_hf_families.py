"""The encoder families' `transformers` names: one table per family gives the config.json that
names a class, the Auto class `electra export` points to, and the head each of ours exports to.
A family without them (`Family.hf` None) writes and reads model folders under its own names, and
`export` refuses it in one line, writing nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest

from electra.config import RunConfig
from electra.errors import ElectraError
from electra.folders.model_folder import architectures, load_pretrained, save_pretrained
from electra.hf.export import export_hf
from electra.hf.from_transformers import encoder_sources, task_heads
from electra.model import family as registry
from electra.model.configs import check_arch
from electra.model.electra import FAMILY as ELECTRA
from electra.model.electra.config import ElectraModelConfig
from electra.model.electra.heads import ElectraForSequenceClassification
from electra.model.electra.hf import HF
from electra.model.electra.modeling import ElectraForMaskedLM, ElectraForPreTraining, ElectraModel
from electra.model.hf_names import (
    auto_class,
    folder_families,
    hf_families,
    hf_of,
    model_config_from_hf,
)
from electra.scoring.detect import load_discriminator

from ..conftest import tiny_model_config


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
    bert_heads = tuple(n.replace("Electra", "Bert") for n in electra_heads)
    heads = task_heads()  # every family's run as they are, the hf family's of each of its types
    assert heads[:3] == electra_heads and heads[-3:] == modern_heads
    assert set(bert_heads) < set(heads) and len(heads) == 3 * (2 + 6)
    assert list(encoder_sources())[
        :5
    ] == [  # then the modern family's (tests/model/modernbert/test_hf.py)
        "ElectraModel",
        *electra_heads,
        "ElectraForSpanQuestionAnswering",
    ]


def test_a_config_json_without_model_type_is_the_default_familys(tmp_path):
    # Folders written before families existed have no model_type: they are ELECTRA's.
    cfg = tiny_model_config()
    raw = HF.config_json("ElectraForPreTraining", cfg)
    del raw["model_type"]
    assert model_config_from_hf(raw, tmp_path / "config.json") == cfg


# --- a family without Hugging Face names -----------------------------------------------------------


@dataclass
class PlainConfig(ElectraModelConfig):
    arch: str = "plain"

    def __post_init__(self) -> None:
        check_arch(self, "plain")


class PlainModel(ElectraModel):
    pass


class PlainForMaskedLM(ElectraForMaskedLM):
    pass


class PlainForPreTraining(ElectraForPreTraining):
    pass


class PlainForSequenceClassification(ElectraForSequenceClassification):
    pass


@pytest.fixture
def plain():
    """ELECTRA's networks under other names, registered as a family with no HF names (`hf=None`),
    after the toolkit was imported; taken out of the registry afterwards."""
    registry.register_family(
        replace(
            ELECTRA,
            name="plain",
            title="Plain",
            config=PlainConfig,
            presets={},
            encoder=PlainModel,
            masked_lm=PlainForMaskedLM,
            pretraining=PlainForPreTraining,
            heads={"sequence": PlainForSequenceClassification},
            hf=None,
        )
    )
    yield PlainConfig(**{**vars(tiny_model_config(vocab_size=256)), "arch": "plain"})
    registry._FAMILIES.pop("plain")


def _plain_run(root, cfg, tokenizer):
    """A run folder of the plain family: config.json, discriminator/ and generator/."""
    root.mkdir()
    RunConfig(model=cfg).save(root / "config.json")
    save_pretrained(PlainForPreTraining(cfg), root / "discriminator", tokenizer)
    save_pretrained(PlainForMaskedLM(cfg), root / "generator", tokenizer)
    return root


def test_a_family_without_hf_names_writes_and_reads_folders_of_its_own(
    plain, tmp_path, task_tokenizer
):
    # Registered after import: the tables are asked when used, so they see it.
    assert architectures()["PlainForPreTraining"] is PlainForPreTraining
    assert "plain" in folder_families() and "plain" not in hf_families()
    run = _plain_run(tmp_path / "run", plain, task_tokenizer)
    config = json.loads((run / "discriminator" / "config.json").read_text())
    assert config["architectures"] == ["PlainForPreTraining"] and config["model_type"] == "plain"
    assert "position_embedding_type" not in config  # none of ELECTRA's HF names
    model, _ = load_pretrained(run)
    assert type(model) is PlainForPreTraining and model.config == plain
    model, _ = load_discriminator(run, "detect")  # `detect` reads its run
    assert type(model) is PlainForPreTraining


def test_export_of_a_family_without_hf_names_is_one_line_and_writes_nothing(
    plain, tmp_path, task_tokenizer
):
    run = _plain_run(tmp_path / "run", plain, task_tokenizer)
    seed = tmp_path / "seed_1"  # a fine-tuned folder of the family
    save_pretrained(PlainForSequenceClassification(plain, 2), seed, task_tokenizer)
    (seed / "finetune.json").write_text("{}")
    for source, step in ((run, None), (run / "discriminator", None), (seed, None), (run, 5)):
        out = tmp_path / "out"
        with pytest.raises(ElectraError) as e:
            export_hf(source, out, step=step)
        message = str(e.value)
        assert "\n" not in message and message.startswith("model.arch=plain: the Plain family")
        assert "no Hugging Face names" in message
        assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run", "seed_1"]
    with pytest.raises(ElectraError, match="no Hugging Face names"):
        hf_of(plain)
