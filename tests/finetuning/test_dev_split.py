"""One data file: no score on its training rows. Without a dev file the run is refused naming
--dev-split and --dev; with --dev-split a seeded part is held out of training, saved with the run,
and is all that `evaluate` scores of that file; the training rows themselves are never scored."""

from __future__ import annotations

import json

import pytest

from ..conftest import FAST_OWN_FLAGS, assert_one_line_error, glue_rows, run_cli, write_csv

SENTIMENT = {"0": "negative", "1": "positive"}


def one_csv(root, n=40):
    rows = [[r["sentence"], SENTIMENT[r["label"]]] for r in glue_rows("SST-2", "train", n)]
    return write_csv(root / "train.csv", ["text", "label"], rows)


def finetune(capsys, model, out, *args, task="classification"):
    return run_cli(
        capsys, "finetune", "--model", model, "--task", task, "--out", out, *args, *FAST_OWN_FLAGS
    )


@pytest.mark.parametrize("how", ["--data", "--train"])
def test_one_file_without_a_dev_split_is_refused_naming_the_flags(
    how, tmp_path, capsys, tiny_pretrained
):
    train = one_csv(tmp_path)
    code, _, err = finetune(capsys, tiny_pretrained, tmp_path / "out", how, train)
    assert_one_line_error(code, err, "train.csv", "--dev-split 0.1", "--dev FILE")
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.tmp").exists()


def test_a_glue_training_file_alone_is_refused_too(tmp_path, capsys, tiny_pretrained):
    """`--task sst2 --data SST-2/train.tsv --max-train-examples 500` scored "dev" on all the
    training file's rows, the 500 it trained on among them."""
    rows = [[r["sentence"], r["label"]] for r in glue_rows("SST-2", "train", 24)]
    train = write_csv(tmp_path / "train.tsv", ["sentence", "label"], rows, "\t")
    args = ["--data", train, "--max-train-examples", "8"]
    code, _, err = finetune(capsys, tiny_pretrained, tmp_path / "out", *args, task="sst2")
    assert_one_line_error(code, err, "--dev-split")
    code, _, err = finetune(
        capsys, tiny_pretrained, tmp_path / "out", *args, "--dev-split", "0.25", task="sst2"
    )
    assert code == 0, err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["examples"] == {"train": 8, "dev_dev": 6}


def test_dev_split_holds_out_seeded_rows_that_evaluate_alone_scores(
    tmp_path, capsys, tiny_pretrained
):
    train = one_csv(tmp_path)
    out = tmp_path / "out"
    code, stdout, err = finetune(
        capsys, tiny_pretrained, out, "--data", train, "--dev-split", "0.25", "--seed", "3"
    )
    assert code == 0, err
    assert "10 of the 40 examples of" in err and "held out as dev" in err
    results = json.loads((out / "results.json").read_text())
    assert results["examples"] == {
        "train": 30,
        "dev_dev": 10,
    }  # no test split: the file is train only
    held = json.loads((out / "dev_split.json").read_text())
    best = out / results["best_seed_dir"]
    assert json.loads((best / "finetune.json").read_text())["dev_split"] == held
    predicted = [r["id"] for r in map(json.loads, (best / "predictions.jsonl").open())]
    assert predicted == [str(i) for i in held["dev"]] and len(set(held["dev"])) == 10
    assert not (best / "test_predictions.jsonl").exists()

    # evaluate, given the training file, scores the held-out rows, and the same as finetune
    accuracy = results["metrics"]["accuracy"]
    for data in (["--data", train], ["--data", tmp_path, "--overwrite"]):
        code, stdout, err = run_cli(capsys, "evaluate", "--model", out, *data)
        assert code == 0, err
        assert f"accuracy: {accuracy:.2f}" in stdout and "10 examples held out" in err
    # ...and refuses to score it whole, under any name
    for args in (["--train", train], ["--test", train], ["--data", train, "--split", "test"]):
        code, _, err = run_cli(capsys, "evaluate", "--model", out, *args, "--out", tmp_path / "e")
        assert_one_line_error(code, err, "train.csv", "was fine-tuned on", "training examples")
    assert not (tmp_path / "e").exists()

    # the same seed draws the same rows; a changed file is not split anew under --resume
    (out / "results.json").unlink()
    tmp = tmp_path / ".out.tmp"
    out.rename(tmp)
    rows = train.read_text().splitlines()
    train.write_text("\n".join(rows[:-1]) + "\n")
    code, _, err = finetune(
        capsys, tiny_pretrained, out, "--data", train, "--dev-split", "0.25", "--seed", "3",
        "--resume",
    )  # fmt: skip
    assert_one_line_error(code, err, "train.csv changed", "without --resume")


def test_dev_split_with_a_dev_file_is_refused(tmp_path, capsys, tiny_pretrained):
    one_csv(tmp_path)
    write_csv(tmp_path / "dev.csv", ["text", "label"], [["a film", "positive"]])
    code, _, err = finetune(
        capsys, tiny_pretrained, tmp_path / "out", "--data", tmp_path, "--dev-split", "0.1"
    )
    assert_one_line_error(code, err, "--dev-split", "dev.csv", "drop --dev-split")


def test_evaluate_refuses_the_training_file_of_a_run_with_a_dev_file(
    tmp_path, capsys, tiny_pretrained
):
    train = one_csv(tmp_path / "data")
    write_csv(tmp_path / "data" / "dev.csv", ["text", "label"], [["a film", "positive"]] * 4)
    out = tmp_path / "out"
    code, _, err = finetune(capsys, tiny_pretrained, out, "--data", tmp_path / "data")
    assert code == 0, err
    copy = tmp_path / "elsewhere.csv"  # the same rows under another name are the same rows
    copy.write_bytes(train.read_bytes())
    code, _, err = run_cli(capsys, "evaluate", "--model", out, "--dev", copy)
    assert_one_line_error(code, err, "elsewhere.csv", "was fine-tuned on")


@pytest.mark.parametrize("value", ["0", "1", "-0.1", "1.5"])
def test_dev_split_out_of_range_is_one_line(value, tmp_path, capsys, tiny_pretrained):
    train = one_csv(tmp_path)
    args = ["--data", train, "--dev-split", value]
    code, _, err = finetune(capsys, tiny_pretrained, tmp_path / "out", *args)
    assert_one_line_error(code, err, "dev_split", "between 0 and 1")
