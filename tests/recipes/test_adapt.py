"""`electra adapt` (issue 59, item 4): a checkpoint as it is, continued with RTD and with MLM at
equal FLOPs, each fine-tuned and probed on the task over seeds, in one command; the corpus never
holds a dev or test row; bad input is one line with nothing written."""

from __future__ import annotations

import json

import pytest

from electra.api import adapt

from ..conftest import assert_one_line_error, run_cli, varied_sst_dir, write_tsv
from ..model.hf.test_hf_pretraining import corpus, mlm_folder  # noqa: F401 (a fixture)

FAST = {"epochs": 1, "batch_size": 8, "max_seq_len": 32, "lr": 3e-3, "text_columns": "sentence"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, corpus):  # noqa: F811
    return mlm_folder(tmp_path_factory.mktemp("ckpt"), "bert", corpus)[0]


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return varied_sst_dir(tmp_path_factory.mktemp("task"), n=48)


@pytest.fixture(scope="module")
def adapted(tmp_path_factory, checkpoint, task):
    out = tmp_path_factory.mktemp("adapt") / "out"
    settings = {"steps": 3, "seeds": 1, "pretrain_seeds": 2, "batch_size": 4, "seq_len": 32}
    results = adapt(
        checkpoint, "classification", task, out, finetune_set=FAST, progress=False, **settings
    )
    return out, results, settings


def test_every_arm_is_scored_over_its_seeds_at_equal_compute(adapted):
    """none, electra and mlm each fine-tuned and probed; a continued arm pools its two
    pretraining seeds; mlm's FLOPs are the most within electra's (it has no generator: more
    steps); the table and the plot are written."""
    out, results, _ = adapted
    arms = results["arms"]
    assert list(arms) == ["none", "electra", "mlm"]
    assert len(arms["none"]["finetune"]["per_seed"]) == 1
    for name in ("electra", "mlm"):
        assert len(arms[name]["finetune"]["per_seed"]) == 2
        assert len(arms[name]["probe"]["per_seed"]) == 2
    assert arms["electra"]["steps"] == 3 and arms["mlm"]["steps"] > 3
    assert arms["mlm"]["train_flops"] <= arms["electra"]["train_flops"]
    assert arms["none"]["train_flops"] == 0
    assert "too few seeds" in results["comparisons"]["electra vs none (finetune)"]["in_words"]
    assert (out / "score_vs_compute.png").stat().st_size > 0
    assert "| electra | 3 |" in (out / "results.md").read_text()
    for seed in (1, 2):
        config = out / "experiment" / "arms" / f"electra-s{seed}" / "pretrain" / "config.json"
        train = json.loads(config.read_text())["train"]
        assert train["seed"] == seed and train["head_lr_scale"] > 1  # continued's defaults


def test_the_corpus_is_the_training_text_without_dev_rows(adapted, task):
    out, results, _ = adapted
    counts = results["corpus"]
    assert counts["lines_read"] == 48 and counts["dropped_dev_or_test"] == 0
    text = (out / "corpus" / "corpus.txt").read_text() + (
        out / "corpus" / "heldout.txt"
    ).read_text()
    dev = [line.split("\t")[0] for line in (task / "dev.tsv").read_text().splitlines()[1:]]
    assert not any(d in text.splitlines() for d in dev)


def test_a_rerun_continues_and_rescores_with_other_finetuning(adapted, checkpoint, task, capsys):
    """The same plan: nothing pretrains again; other fine-tuning seeds: scored again, the
    continued runs kept."""
    out, _, settings = adapted
    runs = sorted((out / "experiment" / "arms").glob("*/pretrain/discriminator/model.safetensors"))
    before = [p.stat().st_mtime_ns for p in runs]
    again = adapt(
        checkpoint,
        "classification",
        task,
        out,
        finetune_set=FAST,
        progress=False,
        **{**settings, "seeds": 2},
    )
    assert len(again["arms"]["none"]["finetune"]["per_seed"]) == 2
    assert [p.stat().st_mtime_ns for p in runs] == before
    assert "pretrained to step" not in capsys.readouterr().err


def test_corpus_lines_of_dev_rows_are_dropped_and_counted(tmp_path, checkpoint, task):
    dev = [line.split("\t")[0] for line in (task / "dev.tsv").read_text().splitlines()[1:]]
    corpus_file = tmp_path / "domain.txt"
    corpus_file.write_text("\n".join(["alpha beta gamma"] * 300 + dev[:3]) + "\n")
    results = adapt(
        checkpoint,
        "classification",
        task,
        tmp_path / "out",
        corpus=[corpus_file],
        arms=["none"],
        seeds=1,
        finetune_set=FAST,
        progress=False,
        probe=False,
    )
    assert results["corpus"]["dropped_dev_or_test"] == 3
    assert list(results["arms"]) == ["none"]


def test_bad_input_is_one_line_and_nothing_written(tmp_path, checkpoint, task, capsys):
    base = [
        "adapt",
        "--model",
        checkpoint,
        "--task",
        "classification",
        "--text-columns",
        "sentence",
        "--steps",
        "2",
        "--seeds",
        "1",
    ]
    out = tmp_path / "out"
    code, _, err = run_cli(
        capsys, *base, "--data", task, "--out", out, "--corpus", task / "dev.tsv"
    )
    assert_one_line_error(code, err, "dev.tsv", "--corpus")
    assert not out.exists()
    unlabelled = tmp_path / "unlabelled"
    unlabelled.mkdir()
    write_tsv(unlabelled / "train.tsv", [["sentence", "label"], ["a b c", ""], ["d e f", ""]])
    write_tsv(unlabelled / "dev.tsv", [["sentence", "label"], ["g h", "1"]])
    code, _, err = run_cli(capsys, *base, "--data", unlabelled, "--out", out)
    assert code == 2 and "electra: error:" in err and not out.exists(), err
    code, _, err = run_cli(capsys, *base, "--data", task, "--out", out, "--arms", "none", "bert")
    assert_one_line_error(code, err, "--arms", "none, electra, mlm")
    assert not out.exists()


def test_a_sentence_transformers_folder_of_another_module_is_refused(tmp_path, checkpoint, capsys):
    import shutil

    folder, data = tmp_path / "st", checkpoint.parent / "mlm-data"  # prepared beside it
    shutil.copytree(checkpoint, folder)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.StaticEmbedding"}
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--data", data, "--out", tmp_path / "run"
    )
    assert_one_line_error(code, err, "modules.json", "StaticEmbedding")
    assert not (tmp_path / "run").exists()
    modules[0].update(type="sentence_transformers.models.Transformer", path="0_Transformer")
    (folder / "modules.json").write_text(json.dumps(modules))
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--data", data, "--out", tmp_path / "run"
    )
    assert_one_line_error(code, err, "0_Transformer", "pass that folder")
