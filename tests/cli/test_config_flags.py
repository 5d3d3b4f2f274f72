"""One config vocabulary: the optimizer and runtime settings shared by pretraining and fine-tuning,
and every command-line flag generated from the config dataclasses with the fields' comments."""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import fields

import pytest

from electra.cli.flags import config_flags_given, run_config_from_args
from electra.cli.main import build_parser, main
from electra.config import DataConfig, ObjectiveConfig, OptimConfig, RuntimeConfig, TrainConfig
from electra.errors import ElectraError
from electra.model.electra.config import ElectraModelConfig
from electra.model.modernbert.config import ModernConfig
from electra.overrides import field_docs
from electra.tasks.finetune_config import FinetuneConfig
from electra.tasks.settings import FAMILIES, QaSettings


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def test_both_loops_share_the_optimizer_and_runtime_settings():
    for cls in (TrainConfig, FinetuneConfig):
        assert issubclass(cls, OptimConfig) and issubclass(cls, RuntimeConfig)
    # Each keeps its own defaults where the recipes differ.
    assert (TrainConfig().lr, FinetuneConfig().lr) == (5e-4, None)
    assert (TrainConfig().warmup_proportion, FinetuneConfig().warmup_proportion) == (0.0, 0.1)
    # One validation, its message naming the field as the user names it.
    with pytest.raises(ElectraError, match=r"^train\.kernels='fast': use auto or stock$"):
        TrainConfig(kernels="fast")
    with pytest.raises(ElectraError, match=r"^kernels='fast': use auto or stock$"):
        FinetuneConfig(kernels="fast")
    with pytest.raises(ElectraError, match=r"^precision='fp16'"):
        FinetuneConfig(precision="fp16")


def test_every_pretraining_field_has_a_flag_with_its_comment_as_help():
    parser = _subparser("pretrain")
    flags = _flags(parser)
    for section, cls in (
        ("model", ElectraModelConfig),
        ("model", ModernConfig),
        ("objective", ObjectiveConfig),
        ("data", DataConfig),
        ("train", TrainConfig),
    ):
        for f in fields(cls):
            assert f"--{section}.{f.name}" in flags
    helps = {s: a.help for a in parser._actions for s in a.option_strings}
    assert "bias correction" in helps["--train.bias_correction"]
    assert helps["--train.kernels"].startswith("Which kernels")
    assert "(default 'electra')" in helps["--objective.name"]


def test_every_finetuning_field_has_a_flag():
    flags = _flags(_subparser("finetune"))
    for f in fields(FinetuneConfig):
        if f.name not in FAMILIES:
            assert "--" + f.name.replace("_", "-") in flags
    for family in FAMILIES.values():  # each task family's settings, flat: --qa-head
        for f in fields(family):
            assert "--" + f.name.replace("_", "-") in flags


def test_pretraining_flags_short_and_long_set_the_config(tmp_path):
    argv = [
        "pretrain",
        "--preset",
        "tiny",
        "--steps",
        "7",
        "--train.lr",
        "1e-4",
        "--compile",
        "--train.tensorboard",
        "false",
        "--objective.mask_prob",
        "0.2",
    ]
    args, extra = build_parser().parse_known_args(argv)
    assert extra == []
    cfg, given = run_config_from_args(args, extra)  # what `electra pretrain` trains from
    assert {"train.steps", "train.lr", "train.compile", "objective.mask_prob"} <= given
    assert (cfg.train.steps, cfg.train.lr, cfg.train.compile) == (7, 1e-4, True)
    assert cfg.train.tensorboard is False and cfg.objective.mask_prob == 0.2


def test_a_misspelt_or_bad_pretraining_flag_is_one_clear_error():
    args, extra = build_parser().parse_known_args(["pretrain", "--train.lrr", "1"])
    with pytest.raises(ElectraError, match="did you mean train.lr"):
        run_config_from_args(args, extra)
    args, extra = build_parser().parse_known_args(["pretrain", "--steps", "many"])
    with pytest.raises(ElectraError, match=r"train\.steps='many' in command line"):
        run_config_from_args(args, extra)


def test_finetuning_flags_reach_the_recipe():
    from electra.cli.commands import _finetune_settings

    args = build_parser().parse_args(
        ["finetune", "--model", "m", "--task", "sst2", "--data", "d", "--out", "o"]
        + ["--no-pack", "--lr", "2e-4", "--text-columns", "title", "body", "--kernels", "stock"]
    )
    assert config_flags_given(args)["text_columns"] == ["title", "body"]
    cfg = _finetune_settings(args)
    assert (cfg.pack, cfg.lr, cfg.classification.text_columns, cfg.kernels) == (
        False,
        2e-4,
        ("title", "body"),
        "stock",
    )


def test_finetune_reads_a_settings_file_under_its_overrides_and_flags(tmp_path):
    """Defaults < the --config file < the flags and --section.field overrides, from the command
    line and from Python alike."""
    from electra.api import finetune_settings
    from electra.cli.commands import _finetune_settings

    (tmp_path / "recipe.toml").write_text(
        'epochs = 5\nlr = 1e-3\nseeds = 2\n[classification]\nlabel_column = "y"\n'
        'text_columns = ["a", "b"]\n'
    )
    argv = ["finetune", "--model", "m", "--task", "classification", "--data", "d", "--out", "o"]
    argv += ["--config", str(tmp_path / "recipe.toml"), "--lr", "2e-3"]
    argv += ["--classification.label_column", "z", "--qa.qa_head=official"]
    args, extra = build_parser().parse_known_args(argv)
    cfg = _finetune_settings(args, extra)
    assert (cfg.epochs, cfg.seeds, cfg.lr) == (5, 2, 2e-3)  # file, file, flag over file
    assert cfg.classification.label_column == "z"  # the override over the file
    assert cfg.classification.text_columns == ("a", "b") and cfg.qa.qa_head == "official"
    assert cfg.batch_size == FinetuneConfig().batch_size  # set nowhere: the default
    # Python: the same file, keyword fields as the flags, section.field keys as the overrides.
    same = finetune_settings(
        tmp_path / "recipe.toml",
        {"lr": 2e-3, "classification.label_column": "z", "qa.qa_head": "official"},
    )
    assert same == cfg
    # A section.field key wins over the same field's flat name; JSON files are read the same.
    (tmp_path / "recipe.json").write_text('{"classification": {"label_column": "y"}}')
    both = {"label_column": "flat", "classification.label_column": "dotted"}
    assert finetune_settings(tmp_path / "recipe.json", both).classification.label_column == "dotted"


def test_a_bad_finetune_setting_is_one_clear_error(tmp_path, capsys):
    from electra.cli.commands import _finetune_settings

    argv = ["finetune", "--model", "m", "--task", "sst2", "--data", "d", "--out", "o"]
    args, extra = build_parser().parse_known_args([*argv, "--classificaton.label_column", "z"])
    with pytest.raises(ElectraError, match="did you mean classification.label_column"):
        _finetune_settings(args, extra)
    (tmp_path / "bad.toml").write_text("epochs = 'many'\n")
    args, extra = build_parser().parse_known_args([*argv, "--config", str(tmp_path / "bad.toml")])
    with pytest.raises(ElectraError, match=r"epochs='many' in .*bad\.toml is not a valid int"):
        _finetune_settings(args, extra)
    # A stray word that is no override is argparse's error, as it was before --section.field.
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--lr-rate", "1"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --lr-rate 1" in capsys.readouterr().err


def test_field_docs_read_the_comments_beside_the_fields():
    docs = field_docs(FinetuneConfig)
    assert docs["seeds"].startswith("fine-tuning runs")  # a trailing comment
    assert docs["loss_reduction"].startswith("The official code sums")  # the lines above
    assert field_docs(QaSettings)["qa_head"].startswith("qa: official")  # the lines above
    assert docs["warmup_proportion"]  # inherited from OptimConfig, though redeclared


def test_a_fine_tuned_folders_finetune_json_is_a_settings_file(tmp_path):
    """The recipe a fine-tuned folder recorded (finetune.json's `config` table, beside its task,
    data and head) reruns as it was."""
    from electra.api import finetune_settings

    recipe = FinetuneConfig(epochs=4, lr=3e-4)
    saved = {"task": "sst2", "data": {}, "head": {}, "config": dataclasses.asdict(recipe)}
    (tmp_path / "finetune.json").write_text(json.dumps(saved))
    assert finetune_settings(tmp_path / "finetune.json") == recipe


def test_a_settings_file_as_editors_save_it_or_not_a_file_at_all(tmp_path):
    """A byte-order mark is read past; a folder or a JSON list is one line naming the file."""
    from electra.overrides import read_config_file

    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbfepochs = 2\n")
    assert read_config_file(tmp_path / "bom.toml") == {"epochs": 2}
    (tmp_path / "folder.toml").mkdir()
    with pytest.raises(ElectraError, match=r"folder\.toml is a folder: pass the \.json or \.toml"):
        read_config_file(tmp_path / "folder.toml")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ElectraError, match=r"list\.json holds a list, not a table of settings"):
        read_config_file(tmp_path / "list.json")
