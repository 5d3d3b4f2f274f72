"""A model folder is checked against what its weights were saved with: a tokenizer swapped for
another run's, or a config.json whose computed fields (hidden_act, sizes, epsilons) were edited,
is refused in one line rather than loaded to compute something else; a folder without the record
(an older one, or Hugging Face's own) loads as it is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from electra.data.tokenizer import fingerprint, load_tokenizer, save_tokenizer, train_tokenizer
from electra.errors import ElectraError
from electra.folders.continuation import pair_configs
from electra.folders.model_folder import load_pretrained, save_pretrained
from electra.folders.saved_with import CONFIG_KEY, TOKENIZER_KEY
from electra.hf.export import export_hf
from electra.model.family import family

from ..conftest import (
    assert_one_line_error,
    predict_cli,
    run_cli,
    stdin_lines,
    tiny_model_config,
    tiny_modern_config,
)
from ..finetuned_models import finetuned


@pytest.fixture(scope="module")
def other_tokenizer(tmp_path_factory):
    """Another run's tokenizer: another corpus, a vocabulary no larger than the models'."""
    root = tmp_path_factory.mktemp("other_tok")
    (root / "c.txt").write_text(" ".join(f"zebra{i % 31} quux{i % 7}" for i in range(2000)))
    return train_tokenizer([root / "c.txt"], vocab_size=60, min_frequency=1)


def copy(folder: Path, to: Path) -> Path:
    return Path(shutil.copytree(folder, to))


def swap_tokenizer(folder: Path, tokenizer) -> None:
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    save_tokenizer(tokenizer, folder, lowercase=True)


def edit_config(folder: Path, **values) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(values)
    (folder / "config.json").write_text(json.dumps(config))


def drop_record(folder: Path) -> None:
    """The weights as an older electra, or `transformers`, saved them: no record."""
    weights = folder / "model.safetensors"
    save_file(load_file(weights), weights, metadata={"format": "pt"})


def test_the_model_folders_we_write_record_what_their_weights_were_saved_with(
    tiny_pretrained, task_tokenizer, tmp_path
):
    with safe_open(str(tiny_pretrained / "model.safetensors"), "pt") as f:
        meta = f.metadata()
    assert meta["format"] == "pt" and meta[TOKENIZER_KEY] == fingerprint(task_tokenizer)
    assert json.loads(meta[CONFIG_KEY])["hidden_act"] == "gelu"
    assert "hidden_dropout_prob" not in json.loads(meta[CONFIG_KEY])
    [exported] = export_hf(tiny_pretrained, tmp_path / "hf")
    with safe_open(str(exported / "model.safetensors"), "pt") as f:
        assert f.metadata() == meta  # an export keeps the record (transformers ignores it)


def test_a_swapped_tokenizer_is_refused_by_every_command_that_loads_the_folder(
    tiny_pretrained, other_tokenizer, tmp_path, capsys
):
    model = copy(tiny_pretrained, tmp_path / "model")
    swap_tokenizer(model, other_tokenizer)
    needles = (
        f"the tokenizer in {model} is not the one its weights were trained with",
        "copy back the tokenizer files",
    )
    code, out, err = run_cli(capsys, "detect", "--model", model, "the cat sat")
    assert_one_line_error(code, err, *needles)
    code, _, err = run_cli(
        capsys,
        "finetune",
        "--model",
        model,
        "--task",
        "sst2",
        "--data",
        tmp_path,
        "--out",
        tmp_path / "ft",
    )
    assert_one_line_error(code, err, *needles)
    code, _, err = run_cli(capsys, "export", "--model", model, "--out", tmp_path / "hf")
    assert_one_line_error(code, err, *needles)
    assert not (tmp_path / "ft").exists() and not (tmp_path / "hf").exists()
    drop_record(model)  # a folder without the record is taken as it is
    load_pretrained(model)


def test_a_fine_tuned_folder_with_a_swapped_tokenizer_does_not_predict(
    tmp_path_factory, other_tokenizer, tmp_path, capsys, monkeypatch
):
    model = copy(finetuned(tmp_path_factory, "sst2"), tmp_path / "sst2")
    best = model / json.loads((model / "results.json").read_text())["best_seed_dir"]
    swap_tokenizer(best, other_tokenizer)
    stdin_lines(monkeypatch, "a fine film\n")
    code, out, err = predict_cli(capsys, model, "-")
    assert_one_line_error(code, err, f"the tokenizer in {best} is not the one")
    assert out == ""


@pytest.mark.parametrize(
    ("field", "value"),
    [("hidden_act", "relu"), ("layer_norm_eps", 1e-5), ("num_attention_heads", 4)],
)
def test_an_edited_config_json_is_refused_naming_the_field(
    field, value, tiny_pretrained, tmp_path, capsys
):
    model = copy(tiny_pretrained, tmp_path / "model")
    saved = json.loads((model / "config.json").read_text())[field]
    edit_config(model, **{field: value})
    code, _, err = run_cli(capsys, "detect", "--model", model, "the cat sat")
    assert_one_line_error(
        code,
        err,
        f"{model / 'config.json'}: {field} is {value!r}",
        f"{field}={saved!r}",
        f"set {field} back to {json.dumps(saved)}",
    )
    drop_record(model)  # Hugging Face's own folders carry no record: taken as they are
    load_pretrained(model)


def test_settings_that_do_not_change_the_computation_may_be_edited(tiny_pretrained, tmp_path):
    model = copy(tiny_pretrained, tmp_path / "model")
    edit_config(model, hidden_dropout_prob=0.3, initializer_range=0.5, transformers_version="x")
    load_pretrained(model)


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
@pytest.mark.parametrize("arch", ["electra", "modernbert"])
def test_every_tokenizer_and_family_loads_back_as_it_was_saved(kind, arch, tmp_path):
    """The record is made so that what was written always passes: no false refusal."""
    (tmp_path / "c.txt").write_text(" ".join(f"word{i % 41} piece{i % 11}" for i in range(3000)))
    least = None if kind == "unigram" else 1  # (Unigram prunes by likelihood, not by count)
    tok = train_tokenizer([tmp_path / "c.txt"], vocab_size=300, min_frequency=least, model=kind)
    make = tiny_model_config if arch == "electra" else tiny_modern_config
    cfg = make(vocab_size=320)
    torch.manual_seed(0)
    save_pretrained(family(arch).pretraining(cfg), tmp_path / "m", tok)
    model, loaded = load_pretrained(tmp_path / "m")
    assert fingerprint(loaded) == fingerprint(tok) == fingerprint(load_tokenizer(tmp_path / "m"))


def test_continued_pretraining_checks_both_networks_of_a_pair(
    tiny_pretrained, other_tokenizer, task_tokenizer, tmp_path
):
    from electra.model.electra.modeling import ElectraForMaskedLM

    pair = tmp_path / "pair"
    copy(tiny_pretrained, pair / "discriminator")
    cfg = tiny_model_config(vocab_size=task_tokenizer.get_vocab_size(), max_position_embeddings=128)
    save_pretrained(ElectraForMaskedLM(cfg), pair / "generator", task_tokenizer)
    pair_configs(pair)
    swap_tokenizer(pair / "generator", other_tokenizer)
    with pytest.raises(ElectraError, match=f"the tokenizer in {pair / 'generator'} is not"):
        pair_configs(pair)
