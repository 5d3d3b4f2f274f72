"""The command line: each bad input gets one line on stderr, exit code 2, and no partial output."""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch

from electra.cli.main import main
from electra.model import kernels

from ..conftest import assert_one_line_error, run_cli


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A small corpus with invalid UTF-8 bytes, a 3 MB line and gzip'd JSONL beside it."""
    root = tmp_path_factory.mktemp("corpus")
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "the",
        "lazy",
        "dog",
        "while",
        "a",
        "cat",
        "sleeps",
        "on",
        "the",
        "warm",
        "mat",
    ]
    lines = [
        " ".join(words[(i * 7) % len(words) :] + words[: (i * 7) % len(words)]) for i in range(400)
    ]
    text = "\n".join(f"{line}\n" if i % 5 == 4 else line for i, line in enumerate(lines))
    (root / "a.txt").write_bytes(
        text.encode() + b"\nbad \xff\xfe bytes here\n\n" + b"x" * 3_000_000 + b"\n"
    )
    with gzip.open(root / "b.jsonl.gz", "wt") as f:
        for line in lines[:50]:
            f.write(json.dumps({"text": line}) + "\n")
    return root


@pytest.fixture(scope="module")
def tokenizer(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("tok") / "tok"
    assert main(["tokenizer", "train", str(corpus), "--vocab-size", "200", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def data(corpus, tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "data"
    assert (
        main(
            [
                "prepare",
                str(corpus),
                "--tokenizer",
                str(tokenizer),
                "--seq-len",
                "32",
                "--out",
                str(out),
                "--workers",
                "1",
            ]
        )
        == 0
    )
    return out


def small_run_args(data, out, steps=2):
    return [
        "pretrain",
        "--preset",
        "tiny",
        "--data",
        data,
        "--out",
        out,
        "--steps",
        steps,
        "--batch-size",
        4,
        "--seq-len",
        32,
        "--train.progress",
        "false",
        "--train.tensorboard=false",
        "--model.num_hidden_layers",
        1,
    ]


def test_prepare_counts_bad_bytes_and_long_lines(data):
    meta = json.loads((data / "meta.json").read_text())
    assert meta["read_stats"]["bad_utf8_lines"] == 1
    assert meta["read_stats"]["long_lines"] == 1
    assert meta["num_examples"] > 10


def test_full_cli_pipeline_and_detect_json(data, tmp_path, capsys):
    code, _, err = run_cli(capsys, *small_run_args(data, tmp_path / "run"))
    assert code == 0, err
    assert "discriminator:" in err and "generator:" in err  # both networks' sizes are printed
    code, out, _ = run_cli(capsys, "detect", "--model", tmp_path / "run", "--json", "the lazy dog")
    assert code == 0
    [tokens] = json.loads(out)  # a list per text, one text too
    assert [t["token"] for t in tokens] == ["the", "lazy", "dog"]
    assert all(set(t) == {"token", "p_replaced"} for t in tokens)
    # Resume to more steps, with an override given as --section.field.
    code, _, err = run_cli(
        capsys, "pretrain", "--resume", tmp_path / "run", "--steps", 3, "--train.progress", "false"
    )
    assert code == 0, err
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert rows[-1]["step"] == 3


def test_missing_corpus_file(tmp_path, capsys, tokenizer):
    code, _, err = run_cli(
        capsys, "prepare", tmp_path / "nope.txt", "--tokenizer", tokenizer, "--out", tmp_path / "d"
    )
    assert_one_line_error(code, err, "nope.txt")
    assert not (tmp_path / "d").exists()


def test_empty_corpus(tmp_path, capsys, tokenizer):
    (tmp_path / "empty.txt").write_text("\n\n   \n")
    code, _, err = run_cli(
        capsys, "prepare", tmp_path / "empty.txt", "--tokenizer", tokenizer, "--out", tmp_path / "d"
    )
    assert_one_line_error(code, err, "no text")
    assert list(tmp_path.iterdir()) == [tmp_path / "empty.txt"]
    code, _, err = run_cli(
        capsys, "tokenizer", "train", tmp_path / "empty.txt", "--out", tmp_path / "t"
    )
    assert_one_line_error(code, err, "no text")
    assert not (tmp_path / "t").exists()


def test_data_built_for_another_seq_len(data, tmp_path, capsys):
    args = small_run_args(data, tmp_path / "run")
    args[args.index("--seq-len") + 1] = 64
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and err == (
        f"electra: error: data folder {data} was built for seq len 32, not 64: pass --seq-len 32 "
        "(or --data.seq_len 32), or rebuild it with `electra prepare --seq-len 64`\n"
    )
    assert not (tmp_path / "run").exists()


def test_the_seq_len_comes_from_the_data_when_not_given(data, tmp_path, capsys):
    args = small_run_args(data, tmp_path / "run")
    del args[args.index("--seq-len") : args.index("--seq-len") + 2]  # the tiny preset says 128
    code, _, err = run_cli(capsys, *args)
    assert code == 0, err
    assert err.splitlines()[0] == (
        f"using seq len 32 from the data folder {data} (the tiny preset's is 128)"
    )
    assert json.loads((tmp_path / "run" / "config.json").read_text())["data"]["seq_len"] == 32


def test_two_stage_alone_fills_in_the_settings_it_needs(data, tmp_path, capsys):
    args = [*small_run_args(data, tmp_path / "run", steps=4), "--objective.name", "two_stage"]
    code, _, err = run_cli(capsys, *args)
    assert code == 0, err
    assert err.splitlines()[0] == (
        "objective two_stage: set objective.sharing=none, objective.generator_hidden_fraction=1.0, "
        "objective.two_stage_steps=2 (half of train.steps); set them yourself to change this"
    )
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["objective"]
    assert (saved["sharing"], saved["generator_hidden_fraction"]) == ("none", 1.0)
    assert saved["two_stage_steps"] == 2
    # A value the user gives is kept, and left out of the line.
    code, _, err = run_cli(
        capsys, *args, "--out", tmp_path / "mine", "--objective.two_stage_steps", 3
    )
    assert code == 0, err
    assert err.splitlines()[0] == (
        "objective two_stage: set objective.sharing=none, objective.generator_hidden_fraction=1.0; "
        "set them yourself to change this"
    )
    saved = json.loads((tmp_path / "mine" / "config.json").read_text())["objective"]
    assert saved["two_stage_steps"] == 3


@pytest.mark.parametrize("gpu_visible", [False, True])
def test_bad_cpu_linear_setting(data, tmp_path, capsys, monkeypatch, gpu_visible):
    """Refused wherever the run would go: with a GPU visible the linear layers never read it."""
    monkeypatch.setenv("ELECTRA_CPU_LINEAR", "mkl")
    if gpu_visible:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    kernels.onednn_linear_enabled.cache_clear()  # read it afresh now, and again after the test
    try:
        code, _, err = run_cli(capsys, *small_run_args(data, tmp_path / "run"))
    finally:
        kernels.onednn_linear_enabled.cache_clear()
    assert_one_line_error(code, err, "ELECTRA_CPU_LINEAR='mkl'", "auto, onednn or stock")
    assert not (tmp_path / "run").exists()


def test_a_cuda_graph_that_cannot_be_captured_is_refused(data, tmp_path, capsys):
    """--cuda-graph on the CPU, with accumulation, or inside compile's own graphs: one line each,
    and nothing written."""
    args = [*small_run_args(data, tmp_path / "run"), "--cuda-graph"]
    code, _, err = run_cli(capsys, *args, "--device", "cpu")
    assert_one_line_error(code, err, "train.cuda_graph", "on cpu")
    code, _, err = run_cli(capsys, *args, "--train.grad_accum", "2")
    assert_one_line_error(code, err, "train.grad_accum=2", "train.grad_accum=1")
    code, _, err = run_cli(capsys, *args, "--compile", "--train.compile_mode", "reduce-overhead")
    assert_one_line_error(code, err, "train.compile_mode=reduce-overhead", "default")
    assert not (tmp_path / "run").exists()


def test_unknown_preset_and_config_key(data, tmp_path, capsys):
    code, _, err = run_cli(
        capsys, "pretrain", "--preset", "smal", "--data", data, "--out", tmp_path / "r"
    )
    assert_one_line_error(code, err, "unknown preset 'smal'", "small")
    code, _, err = run_cli(capsys, *small_run_args(data, tmp_path / "r"), "--train.lrr", "1e-4")
    assert_one_line_error(code, err, "train.lrr", "train.lr")
    code, _, err = run_cli(capsys, *small_run_args(data, tmp_path / "r"), "--train.lr", "fast")
    assert_one_line_error(code, err, "train.lr")
    args = small_run_args(data, tmp_path / "r")
    code, _, err = run_cli(capsys, *args, "--train.compile_mode", "reduce_overhead")
    assert_one_line_error(code, err, "train.compile_mode='reduce_overhead'", "reduce-overhead")
    (tmp_path / "cfg.toml").write_text("[train]\nwarmup = 3\n")
    code, _, err = run_cli(
        capsys, *small_run_args(data, tmp_path / "r"), "--config", tmp_path / "cfg.toml"
    )
    assert_one_line_error(code, err, "train.warmup", "cfg.toml")
    assert not (tmp_path / "r").exists()


def test_config_file_sets_fields(data, tmp_path, capsys):
    (tmp_path / "cfg.json").write_text(
        json.dumps({"preset": "tiny", "train": {"lr": 1e-4, "log_every": 1}})
    )
    code, _, err = run_cli(
        capsys, *small_run_args(data, tmp_path / "r"), "--config", tmp_path / "cfg.json"
    )
    assert code == 0, err
    saved = json.loads((tmp_path / "r" / "config.json").read_text())
    assert (
        saved["train"]["lr"] == 1e-4
        and saved["train"]["log_every"] == 1
        and saved["preset"] == "tiny"
    )


def test_tokenizer_that_does_not_fit_the_checkpoint(data, tmp_path, capsys, corpus):
    assert run_cli(capsys, *small_run_args(data, tmp_path / "run"))[0] == 0
    big = tmp_path / "big"
    assert (
        run_cli(
            capsys,
            "tokenizer",
            "train",
            corpus,
            "--vocab-size",
            "400",
            "--min-frequency",
            "1",
            "--out",
            big,
        )[0]
        == 0
    )
    model_dir = tmp_path / "run" / "discriminator"
    for name in ("tokenizer.json", "vocab.txt"):
        (model_dir / name).write_bytes((big / name).read_bytes())
    code, _, err = run_cli(capsys, "detect", "--model", model_dir, "hello")
    assert_one_line_error(code, err, "tokenizer", "tokens")
    # Resuming on data prepared with another vocabulary is refused too.
    other = tmp_path / "other-data"
    assert (
        run_cli(
            capsys,
            "prepare",
            corpus,
            "--tokenizer",
            big,
            "--seq-len",
            32,
            "--out",
            other,
            "--workers",
            1,
        )[0]
        == 0
    )
    code, _, err = run_cli(
        capsys, "pretrain", "--resume", tmp_path / "run", "--data", other, "--steps", 4
    )
    assert_one_line_error(code, err, "different vocabularies")


def test_run_folder_is_not_overwritten(data, tmp_path, capsys):
    assert run_cli(capsys, *small_run_args(data, tmp_path / "run"))[0] == 0
    code, _, err = run_cli(capsys, *small_run_args(data, tmp_path / "run"))
    assert_one_line_error(code, err, "already exists", "--resume")


def test_detect_missing_model(tmp_path, capsys):
    code, _, err = run_cli(capsys, "detect", "--model", tmp_path / "missing", "hello")
    assert_one_line_error(code, err, "not found")


# --- bad model files and texts for detect ---------------------------------------------------------


@pytest.fixture
def model_copy(tiny_pretrained, tmp_path):
    """A tiny discriminator folder of this test's own, to damage."""
    return Path(shutil.copytree(tiny_pretrained, tmp_path / "model"))


def assert_clean_refusal(code, out, err, *needles):
    assert_one_line_error(code, err, *needles)
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err


def test_detect_on_a_truncated_safetensors_file(model_copy, capsys):
    weights = model_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])  # a download cut short
    code, out, err = run_cli(capsys, "detect", "--model", model_copy, "the cat")
    assert_clean_refusal(
        code, out, err, f"cannot read {weights} (incomplete metadata", "truncated", "re-download"
    )


def test_a_pickled_object_in_pytorch_model_bin_is_refused(model_copy, capsys):
    from safetensors.torch import load_file

    state = load_file(model_copy / "model.safetensors")
    (model_copy / "model.safetensors").unlink()
    torch.save(state, model_copy / "pytorch_model.bin")  # plain tensors load
    assert run_cli(capsys, "detect", "--model", model_copy, "the cat")[0] == 0
    torch.save({**state, "args": argparse.Namespace(lr=1)}, model_copy / "pytorch_model.bin")
    code, out, err = run_cli(capsys, "detect", "--model", model_copy, "the cat")
    assert_clean_refusal(
        code,
        out,
        err,
        f"refusing to load {model_copy / 'pytorch_model.bin'}: it holds a Python object "
        "(argparse.Namespace)",
        "could run code from the file",
        "safetensors.torch.save_file(",
        "safe_serialization=True",
    )
    assert "add_safe_globals" not in err  # torch's advice to trust the file is not passed on


def test_a_config_json_that_does_not_fit_the_weights(model_copy, capsys):
    config = json.loads((model_copy / "config.json").read_text())
    vocab = config["vocab_size"]
    (model_copy / "config.json").write_text(json.dumps({**config, "vocab_size": vocab + 100}))
    code, out, err = run_cli(capsys, "detect", "--model", model_copy, "the cat")
    assert_clean_refusal(
        code,
        out,
        err,
        f"the weights in {model_copy} do not fit its config.json: "
        f"electra.embeddings.word_embeddings.weight is [{vocab}, 16] in model.safetensors but "
        f"[{vocab + 100}, 16] in the config (vocab_size): fix config.json",
    )


@pytest.mark.parametrize("as_json", [False, True])
def test_detect_warns_of_a_text_longer_than_the_model(tiny_pretrained, capsys, as_json):
    long = "the cat sat " * 60  # 180 word pieces; the model reads 128 positions with [CLS]
    argv = ["detect", "--model", tiny_pretrained, "the cat", long, *(["--json"] * as_json)]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert err == (
        "warning: text 2 was cut to its first 127 of 180 word pieces: the model reads at most "
        "128 positions (max_position_embeddings)\n"
    )
    if as_json:
        assert [len(tokens) for tokens in json.loads(out)] == [2, 127]
    else:
        assert out.startswith("the cat\n") and long in out


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("empty", ["", "  \n"])
def test_detect_refuses_an_empty_text(tiny_pretrained, capsys, as_json, empty):
    argv = ["detect", "--model", tiny_pretrained, "the cat", empty, *(["--json"] * as_json)]
    code, out, err = run_cli(capsys, *argv)
    assert_clean_refusal(code, out, err, "text 2 is empty: pass non-empty texts")
