"""No score on a trained row (issue 46): a held-out row is a training row when its text is one,
found row by row (`electra.finetuning.overlap`), not by comparing files. A dev file that is the
training file reordered, `evaluate --test` on a shuffled copy, and a `--dev-split` of a file with
copies of its rows all scored training rows before; now the overlap is refused in one line, or
dropped and counted with --drop-overlap, and a benchmark's published splits (which share a few
rows) are scored as published with a note. Settings out of range are refused, not clamped."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers

from electra.data.tokenizer import train_tokenizer
from electra.errors import ElectraError
from electra.finetuning.dev_split import draw
from electra.finetuning.overlap import PUBLISHED_OVERLAP, row_keys
from electra.folders.finetuned import ROWS_FILE, load_rows, save_rows
from electra.tasks import get_task
from electra.tasks.labelled import Example

from ..conftest import (
    FAST_OWN_FLAGS,
    WORDS,
    assert_one_line_error,
    glue_rows,
    run_cli,
    shared_data,
    write_csv,
    write_tsv,
)

CLASSIFICATION = get_task("classification")


def rows(n, offset=0, words=5):
    """`n` different labelled texts of the tests' vocabulary (`offset` gives other ones)."""
    return [
        [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(words)) + f" {i}", i % 2]
        for i in range(offset, offset + n)
    ]


def keys(*texts, tokenizer=None):
    examples = [Example(str(i), *t, None) for i, t in enumerate(texts)]
    return row_keys(CLASSIFICATION, examples, tokenizer).tolist()


def own_files(data, train_rows: int, dev_rows: int) -> list:
    """train.csv of `train_rows` rows and dev.csv of `dev_rows` others in `data`; the training
    rows."""
    train = rows(train_rows)
    write_csv(data / "train.csv", ["text", "label"], train)
    write_csv(data / "dev.csv", ["text", "label"], rows(dev_rows, offset=100))
    return train


def finetune(capsys, model, out, *args):
    argv = ["finetune", "--model", model, "--task", "classification", "--out", out, *args]
    return run_cli(capsys, *argv, *FAST_OWN_FLAGS)


# --- the key of a row ----------------------------------------------------------------------------


def test_a_row_is_its_text_normalised_not_its_place_label_or_spacing(tmp_path):
    a, b, c, d = keys(("a film", None), ("  a\u00a0film\n", None), ("a film", "b"), ("b", "a film"))
    assert a == b  # whitespace collapsed, ends stripped
    assert len({a, c, d}) == 3  # a pair is not its first text, nor the same pair swapped
    assert keys(("caf\u00e9", None)) == keys(("cafe\u0301", None))  # NFC: one é however written
    # case is kept unless the model's tokenizer folds it: a cased model sees "Paris" and "paris"
    assert keys(("Paris", None)) != keys(("paris", None))
    (tmp_path / "c.txt").write_text("Paris paris film\n")
    uncased = train_tokenizer([tmp_path / "c.txt"], vocab_size=60, min_frequency=1)
    assert keys(("Paris", None), tokenizer=uncased) == keys(("paris", None), tokenizer=uncased)
    labelled = [Example("0", "a film", None, "1"), Example("9", "a film", None, "0")]
    assert len(set(row_keys(CLASSIFICATION, labelled, None).tolist())) == 1  # not by label


def test_a_model_keeps_its_rows_in_8_bytes_each_loaded_without_pickle(tmp_path):
    k = np.array([5, 3, 5, 1], dtype="<u8")
    save_rows(tmp_path, k)
    assert (tmp_path / ROWS_FILE).stat().st_size == 128 + 3 * 8  # the .npy header, 3 keys
    assert load_rows(tmp_path).tolist() == [1, 3, 5]  # sorted, each once
    (tmp_path / ROWS_FILE).write_bytes((tmp_path / ROWS_FILE).read_bytes()[:100])
    with pytest.raises(ElectraError, match=r"training_rows\.npy .*fine-tune again$"):
        load_rows(tmp_path)
    assert load_rows(tmp_path / "missing") is None  # a folder fine-tuned before: no record


# --- --dev-split ---------------------------------------------------------------------------------


def test_dev_split_keeps_every_copy_of_a_row_on_one_side():
    """The issue's case: with duplicated rows, 94 of the 100 rows held out were also trained on."""
    distinct = np.arange(1, 401, dtype="<u8")
    copies = np.concatenate([distinct, distinct[:300], distinct[:100]])  # 800 rows, 400 texts
    held = draw("t.csv", "sha", copies, 0.1, seed=3)
    dev = set(held.dev)
    train = {int(copies[i]) for i in range(len(copies)) if i not in dev}
    assert not train & {int(copies[i]) for i in dev}
    assert held.duplicates == 400 and "400 repeat another's text" in held.describe()
    assert 40 <= len(dev) <= 120  # 40 of the 400 texts, with their copies
    # without copies the draw is the one it always was: the same rows for a seed
    plain = draw("t.csv", "sha", distinct, 0.1, seed=3)
    assert list(plain.dev) == sorted(random.Random(3).sample(range(400), 40))
    assert plain.duplicates == 0


@pytest.mark.parametrize(
    ("fraction", "needle"), [(0.01, "none as dev: pass a fraction at least 0.1"), (0.99, "at most")]
)
def test_a_dev_split_that_rounds_to_none_or_all_is_refused_not_clamped(fraction, needle):
    with pytest.raises(ElectraError, match=needle):
        draw("t.csv", "sha", np.arange(10, dtype="<u8"), fraction, seed=0)
    with pytest.raises(ElectraError, match=r"all with one text: --dev-split needs two different"):
        draw("t.csv", "sha", np.zeros(5, dtype="<u8"), 0.5, seed=0)


def test_dev_split_of_a_file_with_copies_scores_no_trained_row(tmp_path, capsys, tiny_pretrained):
    distinct = rows(20)
    train = write_csv(tmp_path / "train.csv", ["text", "label"], distinct * 3)
    out = tmp_path / "out"
    code, _, err = finetune(capsys, tiny_pretrained, out, "--data", train, "--dev-split", "0.25")
    assert code == 0, err
    assert "15 of the 60 examples of" in err and "40 repeat another's text" in err
    held = json.loads((out / "dev_split.json").read_text())
    texts = [r[0] for r in distinct * 3]
    dev = {texts[i] for i in held["dev"]}
    assert len(held["dev"]) == 15 and len(dev) == 5  # 5 texts, each with its 2 copies
    trained = {t for i, t in enumerate(texts) if i not in set(held["dev"])}
    assert not dev & trained
    # evaluate, given the training file, scores the held-out rows: none of them trained on
    code, stdout, err = run_cli(capsys, "evaluate", "--model", out, "--data", train)
    assert code == 0 and "15 examples held out" in err, err


# --- dev and test files ----------------------------------------------------------------------------


def test_a_dev_file_that_is_the_training_file_reordered_is_refused(
    tmp_path, capsys, tiny_pretrained
):
    """The issue's case: a dev.csv that is train.csv reordered fine-tuned without a word."""
    data = tmp_path / "data"
    train = rows(24)
    write_csv(data / "train.csv", ["text", "label"], train)
    write_csv(data / "dev.csv", ["text", "label"], train[::-1])
    code, _, err = finetune(capsys, tiny_pretrained, tmp_path / "out", "--data", data)
    assert_one_line_error(
        code, err, "dev.csv: 24 of its 24 rows are rows of the training file", "--drop-overlap"
    )
    assert not (tmp_path / "out").exists()


def test_drop_overlap_leaves_trained_rows_out_and_counts_them(tmp_path, capsys, tiny_pretrained):
    data = tmp_path / "data"
    train = rows(24)
    # 3 training rows in dev, one retyped (other spacing, other label): all three are trained
    retyped = [f"  {train[2][0].replace(' ', '   ')} ", 1 - train[2][1]]
    dev = [*rows(8, offset=100), train[0], train[1], retyped]
    write_csv(data / "train.csv", ["text", "label"], train)
    write_csv(data / "dev.csv", ["text", "label"], dev)
    write_csv(data / "test.csv", ["text", "label"], [*rows(4, offset=200), train[5]])
    out = tmp_path / "out"
    code, _, err = finetune(capsys, tiny_pretrained, out, "--data", data)
    assert_one_line_error(code, err, "dev.csv: 3 of its 11 rows", "training file")
    code, _, err = finetune(capsys, tiny_pretrained, out, "--data", data, "--drop-overlap")
    assert code == 0, err
    assert "dev.csv: 3 of its 11 rows left out of the score (--drop-overlap)" in err
    assert "test.csv: 1 of its 5 rows left out" in err
    results = json.loads((out / "results.json").read_text())
    assert results["examples"] == {"train": 24, "dev_dev": 8, "test_test": 4}
    found = results["held_out_overlap"]
    assert found["dev_dev"] == {
        "file": str(data / "dev.csv"),
        "rows": 3,
        "examples": 11,
        "action": "dropped",
    }
    assert found["test_test"]["rows"] == 1
    best = out / results["best_seed_dir"]
    assert load_rows(best).size == 24  # the rows it trained on, kept with the model
    assert len((best / "predictions.jsonl").read_text().splitlines()) == 8


def test_an_unlabelled_test_file_with_training_rows_is_predicted_with_a_note(
    tmp_path, capsys, tiny_pretrained
):
    """Nothing scores a test file without labels: its training rows are said, not refused."""
    data = tmp_path / "data"
    train = own_files(data, 16, 6)
    write_csv(data / "test.csv", ["text"], [[train[0][0]], *([t] for t, _ in rows(3, offset=200))])
    out = tmp_path / "out"
    code, _, err = finetune(capsys, tiny_pretrained, out, "--data", data)
    assert code == 0, err
    assert "note: " in err and "test.csv: 1 of its 4 rows are rows of the training file" in err
    assert "it has no labels, so they are predicted, not scored" in err
    results = json.loads((out / "results.json").read_text())
    assert results["held_out_overlap"]["test_test"]["action"] == "kept"
    assert results["examples"]["test_test"] == 4
    # --drop-overlap leaves trained rows out of a score; an unlabelled file has none, and its
    # predictions (a submission file's rows) keep every row.
    code, _, err = finetune(
        capsys, tiny_pretrained, tmp_path / "o2", "--data", data, "--drop-overlap"
    )
    assert code == 0, err
    assert json.loads((tmp_path / "o2" / "results.json").read_text())["examples"]["test_test"] == 4


def test_evaluate_refuses_a_shuffled_copy_of_the_training_file(tmp_path, capsys, tiny_pretrained):
    """The issue's case: `evaluate --test` on a shuffled copy reported a "test accuracy"."""
    data = tmp_path / "data"
    train = own_files(data, 24, 8)
    out = tmp_path / "out"
    assert finetune(capsys, tiny_pretrained, out, "--data", data)[0] == 0
    shuffled = train[:]
    random.Random(0).shuffle(shuffled)
    copy = write_csv(tmp_path / "elsewhere" / "test.csv", ["text", "label"], shuffled)
    code, _, err = run_cli(capsys, "evaluate", "--model", out, "--test", copy)
    assert_one_line_error(code, err, "test.csv: 24 of its 24 rows are rows", "was fine-tuned on")
    code, _, err = run_cli(capsys, "evaluate", "--model", out, "--test", copy, "--drop-overlap")
    assert_one_line_error(code, err, "all 24 of its rows", "nothing is left to score")
    # a file of new rows and a few trained ones: with --drop-overlap, the new ones are scored
    mixed = write_csv(tmp_path / "mixed.csv", ["text", "label"], [*rows(6, offset=300), *train[:2]])
    code, _, err = run_cli(
        capsys,
        "evaluate",
        "--model",
        out,
        "--test",
        mixed,
        "--drop-overlap",
        "--out",
        tmp_path / "e",
    )
    assert code == 0, err
    assert "mixed.csv: 2 of its 8 rows left out of the score (--drop-overlap)" in err
    results = json.loads((tmp_path / "e" / "results.json").read_text())
    assert results["examples"] == {"test": 6}
    assert results["held_out_overlap"]["test"]["rows"] == 2


def test_a_model_without_a_record_of_its_rows_falls_back_to_the_file(
    tmp_path, capsys, tiny_pretrained
):
    """A model fine-tuned before the rows were kept: its training file is still refused (by its
    contents), other files are scored, and evaluate says that it checks no more."""
    data = tmp_path / "data"
    own_files(data, 16, 6)
    out = tmp_path / "out"
    assert finetune(capsys, tiny_pretrained, out, "--data", data)[0] == 0
    best = out / json.loads((out / "results.json").read_text())["best_seed_dir"]
    (best / ROWS_FILE).unlink()
    code, _, err = run_cli(capsys, "evaluate", "--model", out, "--test", data / "train.csv")
    assert_one_line_error(code, err, "train.csv is the file", "was fine-tuned on")
    code, _, err = run_cli(capsys, "evaluate", "--model", out, "--data", data)
    assert code == 0 and "keeps no record of the rows it trained on" in err, err


# --- the benchmarks: their published splits share a few rows ----------------------------------


def test_the_published_splits_share_what_the_table_says():
    """The counts `PUBLISHED_OVERLAP` allows are the published files' own, cased and uncased:
    CoLA's train and dev share 16 sentences, STS-B's 6 pairs, CoNLL-2003's 193 short lines (196
    uncased); refusing them would refuse the benchmarks themselves. SST-2, MRPC, RTE and WNLI
    share none."""
    uncased = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    uncased.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    found = {}
    for name, folder in (
        ("cola", "glue/CoLA"),
        ("stsb", "glue/STS-B"),
        ("rte", "glue/RTE"),
        ("mrpc", "glue/MRPC"),
        ("sst2", "glue/SST-2"),
        ("wnli", "glue/WNLI"),
        ("ner", "conll2003"),
    ):
        task = get_task(name)
        files = task.resolve(shared_data(*folder.split("/")))
        train = task.read(files.file("train"), "train")
        dev = task.read(files.file("dev"), "dev")
        found[(task.name, "dev")] = max(
            int(np.isin(row_keys(task, dev, tok), row_keys(task, train, tok)).sum())
            for tok in (None, uncased)
        )
        assert task.fixed_splits
    assert found == PUBLISHED_OVERLAP


def test_a_benchmark_dev_file_with_training_rows_is_scored_with_a_note(
    tmp_path, capsys, tiny_pretrained, monkeypatch
):
    """A benchmark's set sharing no more rows than the published files do is scored as
    published, with a note (SST-2's share none: here, as if they shared 2); more is refused."""
    monkeypatch.setitem(PUBLISHED_OVERLAP, ("sst2", "dev"), 2)
    data = tmp_path / "sst"
    train = [[r["sentence"], r["label"]] for r in glue_rows("SST-2", "train", 24)]
    dev = [[r["sentence"], r["label"]] for r in glue_rows("SST-2", "dev", 18)]
    write_tsv(data / "train.tsv", [["sentence", "label"], *train])
    write_tsv(data / "dev.tsv", [["sentence", "label"], *dev, *train[:2]])
    out = tmp_path / "out"
    args = ["finetune", "--model", tiny_pretrained, "--task", "sst2", "--data", data]
    code, _, err = run_cli(capsys, *args, "--out", out, *FAST_OWN_FLAGS)
    assert code == 0, err
    assert "note: " in err and "dev.tsv: 2 of its 20 rows have the text of a training row" in err
    results = json.loads((out / "results.json").read_text())
    assert results["examples"]["dev_dev"] == 20
    assert results["held_out_overlap"]["dev_dev"]["action"] == "kept"
    code, _, err = run_cli(
        capsys, *args, "--out", tmp_path / "o2", "--drop-overlap", *FAST_OWN_FLAGS
    )
    assert code == 0, err
    assert json.loads((tmp_path / "o2" / "results.json").read_text())["examples"]["dev_dev"] == 18
    # More than the published files share is no published split: a shuffled copy of the
    # training file is refused for a benchmark as for your own files.
    write_tsv(data / "dev.tsv", [["sentence", "label"], *train[::-1]])
    code, _, err = run_cli(capsys, *args, "--out", tmp_path / "o3", *FAST_OWN_FLAGS)
    assert_one_line_error(code, err, "dev.tsv: 24 of its 24 rows are rows of the training file")


# --- settings out of range -------------------------------------------------------------------------


def test_a_max_seq_len_past_the_models_positions_is_refused(tmp_path, capsys, tiny_pretrained):
    """`finetune --max-seq-len 100000` became 512 without a word."""
    data = tmp_path / "data"
    own_files(data, 8, 4)
    argv = ["finetune", "--model", tiny_pretrained, "--task", "classification", "--data", data]
    argv += ["--out", tmp_path / "out", *FAST_OWN_FLAGS, "--max-seq-len", "100000"]
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(
        code, err, "max_seq_len=100000 is longer than the model's 128 positions", "128 or less"
    )
    assert not (tmp_path / "out").exists()


def test_a_max_seq_len_too_short_for_any_text_is_refused(tmp_path, capsys, tiny_pretrained):
    """`--max-seq-len 2` trained and scored on [CLS] [SEP] alone, without a word."""
    data = tmp_path / "data"
    own_files(data, 8, 4)
    argv = ["finetune", "--model", tiny_pretrained, "--task", "classification", "--data", data]
    code, _, err = run_cli(capsys, *argv, "--out", tmp_path / "out", "--max-seq-len", "2")
    assert_one_line_error(code, err, "max_seq_len=2 leaves no room for text", "--max-seq-len 8")
    assert not (tmp_path / "out").exists()
