"""Tasks on the user's own files: classification, multilabel and regression from CSV, TSV, JSON
Lines and Parquet files written here from real GLUE data (../shared/data), fine-tuned end to end
with a tiny model, their metrics recomputed independently from predictions.jsonl, and every bad
input refused in one line with nothing written."""

from __future__ import annotations

import io
import json
import shutil

import pytest
import torch
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score
from sklearn.preprocessing import MultiLabelBinarizer

from electra.errors import ElectraError
from electra.tasks import get_task
from electra.tasks.tables import read_table

from ..conftest import (
    FAST_OWN_FLAGS,
    TINY_OVERRIDES,
    assert_one_line_error,
    glue_rows,
    run_cli,
    write_csv,
)
from ..numerics import encoder_depth, rounding_bound

SENTIMENT = {"0": "negative", "1": "positive"}


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def finetune(capsys, model, task, out, *data_args):
    code, _, err = run_cli(
        capsys,
        "finetune",
        "--model",
        model,
        "--task",
        task,
        "--out",
        out,
        *data_args,
        *FAST_OWN_FLAGS,
    )
    return code, err


def read_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def seed_results(out):
    results = json.loads((out / "results.json").read_text())
    best = out / results["best_seed_dir"]
    return results, json.loads((best / "results.json").read_text()), best


# --- end to end, each task type and format ------------------------------------------------------


def test_classification_from_sst2_csv_with_string_labels(tmp_path, capsys, tiny_pretrained):
    data = tmp_path / "sst"
    for split, n in (("train", 64), ("dev", 24)):
        rows = [[r["sentence"], SENTIMENT[r["label"]]] for r in glue_rows("SST-2", split, n)]
        write_csv(data / f"{split}.csv", ["text", "label"], rows)
    test = glue_rows("SST-2", "test", 6)
    write_csv(data / "test.csv", ["id", "text"], [[r["index"], r["sentence"]] for r in test])
    out = tmp_path / "ft"
    code, err = finetune(capsys, tiny_pretrained, "classification", out, "--data", data)
    assert code == 0, err
    results, seed, best = seed_results(out)
    assert results["main_metric"] == "accuracy" and set(seed["metrics"]) == {"accuracy", "f1"}
    rows = read_rows(best / "predictions.jsonl")
    assert len(rows) == 24 and {r["label"] for r in rows} == {"negative", "positive"}
    gold, pred = [r["label"] for r in rows], [r["prediction"] for r in rows]
    assert seed["metrics"]["accuracy"] == pytest.approx(100 * accuracy_score(gold, pred))
    f1 = f1_score(gold, pred, pos_label="positive", labels=["negative", "positive"])
    assert seed["metrics"]["f1"] == pytest.approx(100 * f1)
    head = json.loads((best / "finetune.json").read_text())["head"]
    assert head["labels"] == ["negative", "positive"] and head["text_columns"] == ["text"]
    # the unlabelled test file is predicted by every seed, with its own ids
    tests = read_rows(best / "test_predictions.jsonl")
    assert [r["id"] for r in tests] == [r["index"] for r in test]
    assert all(r["label"] is None and r["prediction"] in SENTIMENT.values() for r in tests)
    # evaluate reloads the label set and columns: the same dev score, and test without a submission
    code, stdout, _ = run_cli(capsys, "evaluate", "--model", out, "--data", data)
    assert code == 0 and f"accuracy: {seed['metrics']['accuracy']:.2f}" in stdout
    code, stdout, err = run_cli(
        capsys, "evaluate", "--model", out, "--test", data / "test.csv", "--split", "test"
    )
    assert code == 0, err
    assert read_rows(best / "eval-test" / "predictions.jsonl") == tests
    code, stdout, _ = run_cli(
        capsys, "score", "--task", "classification", "--predictions", best / "predictions.jsonl"
    )
    assert json.loads(stdout) == pytest.approx(seed["metrics"])


def test_pair_classification_from_rte_jsonl_given_as_files(tmp_path, capsys, tiny_pretrained):
    pairs = {
        split: [
            {"text_a": r["sentence1"], "text_b": r["sentence2"], "label": r["label"]}
            for r in glue_rows("RTE", split, n)
        ]
        for split, n in (("train", 48), ("dev", 24))
    }
    write_jsonl(tmp_path / "train.jsonl", pairs["train"])
    write_jsonl(tmp_path / "dev.jsonl", pairs["dev"][:16])
    write_jsonl(tmp_path / "test.jsonl", pairs["dev"][16:])  # a labelled test file: scored too
    out = tmp_path / "ft"
    files = ["--train", tmp_path / "train.jsonl", "--dev", tmp_path / "dev.jsonl"]
    files += ["--test", tmp_path / "test.jsonl"]
    code, err = finetune(capsys, tiny_pretrained, "classification", out, *files)
    assert code == 0, err
    results, seed, best = seed_results(out)
    tests = read_rows(best / "test_predictions.jsonl")
    accuracy = accuracy_score([r["label"] for r in tests], [r["prediction"] for r in tests])
    assert seed["test_metrics"]["accuracy"] == pytest.approx(100 * accuracy)
    assert results["test_metrics"] == seed["test_metrics"] and results["examples"]["test_test"] == 8
    rows = read_rows(best / "predictions.jsonl")
    gold, pred = [r["label"] for r in rows], [r["prediction"] for r in rows]
    # two classes in sorted order: not_entailment, the second, is F1's positive class
    f1 = f1_score(gold, pred, pos_label="not_entailment", labels=["entailment", "not_entailment"])
    assert seed["metrics"]["f1"] == pytest.approx(100 * f1)
    assert json.loads((best / "finetune.json").read_text())["head"]["text_columns"] == [
        "text_a",
        "text_b",
    ]


def stsb_rows(split, n):
    """The first `n` rows of an STS-B split; of dev, those whose pair is not among the first 48
    training pairs (STS-B's published splits share a few: 2 here), which a dev file of your own
    may not hold."""
    rows = glue_rows("STS-B", split, n)
    if split == "train":
        return rows
    trained = {(r["sentence1"], r["sentence2"]) for r in glue_rows("STS-B", "train", 48)}
    return [r for r in rows if (r["sentence1"], r["sentence2"]) not in trained]


def test_integer_classes_from_stsb_tsv_with_named_columns(tmp_path, capsys, tiny_pretrained):
    """Three integer classes (STS-B scores bucketed) in a TSV whose columns are named by flags:
    macro-F1, and labels ordered numerically."""
    data = tmp_path / "sts"
    for split, n in (("train", 48), ("dev", 16)):
        rows = [
            [r["sentence1"], r["sentence2"], int(float(r["score"]) // 2)]
            for r in stsb_rows(split, n)
        ]
        write_csv(data / f"{split}.tsv", ["sentence1", "sentence2", "bucket"], rows, "\t")
    out = tmp_path / "ft"
    flags = ["--text-columns", "sentence1", "sentence2", "--label-column", "bucket"]
    code, err = finetune(capsys, tiny_pretrained, "classification", out, "--data", data, *flags)
    assert code == 0, err
    _, seed, best = seed_results(out)
    assert set(seed["metrics"]) == {"accuracy", "macro_f1"}
    rows = read_rows(best / "predictions.jsonl")
    gold, pred = [r["label"] for r in rows], [r["prediction"] for r in rows]
    assert seed["metrics"]["macro_f1"] == pytest.approx(100 * f1_score(gold, pred, average="macro"))
    assert json.loads((best / "finetune.json").read_text())["head"]["labels"] == ["0", "1", "2"]


@pytest.mark.numeric
def test_regression_from_stsb_parquet(tmp_path, capsys, monkeypatch, tiny_pretrained):
    data = tmp_path / "sts"
    for split, n in (("train", 48), ("dev", 24)):
        dev = [
            {"text_a": r["sentence1"], "text_b": r["sentence2"], "label": float(r["score"])}
            for r in stsb_rows(split, n)
        ]
        write_parquet(data / f"{split}.parquet", dev)
    out = tmp_path / "ft"
    code, err = finetune(capsys, tiny_pretrained, "regression", out, "--data", data)
    assert code == 0, err
    results, seed, best = seed_results(out)
    assert results["main_metric"] == "pearson"
    rows = read_rows(best / "predictions.jsonl")
    gold, pred = [r["label"] for r in rows], [r["prediction"] for r in rows]
    assert gold == [float(r["score"]) for r in stsb_rows("dev", 24)]
    assert seed["metrics"]["pearson"] == pytest.approx(100 * pearsonr(gold, pred)[0], abs=1e-3)
    assert seed["metrics"]["spearman"] == pytest.approx(100 * spearmanr(gold, pred)[0], abs=1e-3)
    head = json.loads((best / "finetune.json").read_text())["head"]
    assert head["scale"] == max(float(r["score"]) for r in glue_rows("STS-B", "train", 48))
    assert "training mean" in results["baseline"]["rule"]
    # `electra predict` on pairs from standard input: values in the targets' own units
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{dev[0]['text_a']}\t{dev[0]['text_b']}\n"))
    code, stdout, err = run_cli(capsys, "predict", "--model", best, "-")
    assert code == 0, err
    # evaluate's prediction is rounded to 4 decimals (5e-5), and comes from another batch: the
    # rounding of the tiny encoder's chain (2 layers, 5 reductions beside) over its longest
    # reduction (the intermediate size 64, above these rows), at the values' size (a logit
    # times the head's scale, 5 here)
    size = max(5.0, abs(pred[0]))
    bound = 5e-5 + rounding_bound(torch.float32, 64, encoder_depth(2, extra=5), size)
    assert json.loads(stdout)["value"] == pytest.approx(pred[0], abs=bound)


def test_multilabel_from_jsonl_lists_and_csv_delimited_labels(tmp_path, capsys, tiny_pretrained):
    """Two labels derived from SST-2 sentences (the sentiment, and "long" over 10 words): JSON
    lists in the training file, `|`-delimited strings in the dev CSV."""

    def labels(r):
        names = ["positive"] if r["label"] == "1" else []
        return names + (["long"] if len(r["sentence"].split()) > 10 else [])

    train = [{"text": r["sentence"], "label": labels(r)} for r in glue_rows("SST-2", "train", 64)]
    write_jsonl(tmp_path / "train.jsonl", train)
    dev = glue_rows("SST-2", "dev", 24)
    write_csv(
        tmp_path / "dev.csv", ["text", "label"], [[r["sentence"], "|".join(labels(r))] for r in dev]
    )
    out = tmp_path / "ft"
    files = ["--train", tmp_path / "train.jsonl", "--dev", tmp_path / "dev.csv"]
    code, err = finetune(capsys, tiny_pretrained, "multilabel", out, *files, "--threshold", "0.4")
    assert code == 0, err
    results, seed, best = seed_results(out)
    assert results["main_metric"] == "micro_f1"
    rows = read_rows(best / "predictions.jsonl")
    assert [r["label"] for r in rows] == [sorted(labels(r)) for r in dev]  # in label order
    binarize = MultiLabelBinarizer(classes=["long", "positive"]).fit([])
    y = binarize.transform([r["label"] for r in rows])
    p = binarize.transform([r["prediction"] for r in rows])
    for average in ("micro", "macro"):
        expected = 100 * f1_score(y, p, average=average, zero_division=0)
        assert seed["metrics"][f"{average}_f1"] == pytest.approx(expected)
    assert results["config"]["classification"]["threshold"] == 0.4
    assert isinstance(results["baseline"]["prediction"], list)
    # `electra predict` reads the dev file (its labels ignored) with the saved label set
    code, stdout, err = run_cli(capsys, "predict", "--model", out, tmp_path / "dev.csv")
    assert code == 0, err
    records = [json.loads(line) for line in stdout.splitlines()]
    assert [r["labels"] for r in records] == [r["prediction"] for r in rows]
    assert all(set(r["scores"]) == {"long", "positive"} for r in records)


# --- the reader --------------------------------------------------------------------------------


def test_tables_keep_each_rows_line_and_split_files_are_found(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text('text,label\n"two\nlines, quoted",a\n\nlast,b\n')
    table = read_table(path)
    assert [n for n, _ in table.rows] == [2, 5]  # a row is named by its first line
    assert table.rows[0][1]["text"] == "two\nlines, quoted"
    files = get_task("classification").resolve(tmp_path)
    assert files.file("train") == path and not files.has("test")
    with pytest.raises(ElectraError, match=r"no dev file for classification .* dev\.csv"):
        files["dev"]
    examples = get_task("classification").read(path, "train")
    assert [(e.id, e.text_a, e.label) for e in examples][1] == ("2", "last", "b")  # its place


def test_resume_retrains_a_seed_finished_without_the_test_file(tmp_path, capsys, tiny_pretrained):
    """A seed kept from a run that had no test file would leave the test file unpredicted."""
    data = sst_csv(tmp_path / "data")
    out = tmp_path / "ft"
    assert finetune(capsys, tiny_pretrained, "classification", out, "--data", data)[0] == 0
    shutil.copytree(out / "seed_0", tmp_path / ".ft.tmp" / "seed_0")
    shutil.copy(data / "dev.csv", data / "test.csv")
    code, err = finetune(
        capsys, tiny_pretrained, "classification", out, "--data", data, "--resume", "--overwrite"
    )
    assert code == 0, err
    assert "seed 0: trained again, the test file differs" in err and "kept" not in err
    assert (out / "seed_0" / "test_predictions.jsonl").is_file()
    assert "accuracy" in json.loads((out / "results.json").read_text())["test_metrics"]


# --- bad input ---------------------------------------------------------------------------------


def sst_csv(root, n=16):
    rows = [[r["sentence"], SENTIMENT[r["label"]]] for r in glue_rows("SST-2", "train", n)]
    write_csv(root / "train.csv", ["text", "label"], rows)
    dev = [[r["sentence"], SENTIMENT[r["label"]]] for r in glue_rows("SST-2", "dev", 6)]
    write_csv(root / "dev.csv", ["text", "label"], dev)  # a training row there is refused
    return root


def missing_column(root):
    data = sst_csv(root)
    write_csv(data / "train.csv", ["text", "sentiment"], [["a film", "positive"]])
    return "classification", ["--data", data]


def unseen_dev_label(root):
    data = sst_csv(root)
    write_csv(data / "dev.csv", ["text", "label"], [["a film", "negative"], ["fine", "neutral"]])
    return "classification", ["--data", data]


def unseen_test_label(root):
    data = sst_csv(root)
    write_jsonl(
        data / "test.jsonl", [{"text": "ok", "label": "negative"}, {"text": "x", "label": 3}]
    )
    return "classification", ["--data", data]


def empty_text(root):
    data = sst_csv(root)
    write_csv(data / "train.csv", ["text", "label"], [["a film", "negative"], [" ", "positive"]])
    return "classification", ["--data", data]


def non_numeric_target(root):
    scores = [
        {"text_a": "a", "text_b": "b", "label": "1.5"},  # a column of text: numbers as strings
        {"text_a": "a", "text_b": "c", "label": "high"},
    ]
    write_parquet(root / "train.parquet", scores)
    write_parquet(root / "dev.parquet", scores[:1])
    return "regression", ["--data", root]


def unknown_extension(root):
    data = sst_csv(root)
    (root / "train.txt").write_text("text\tlabel\na\tb\n")
    return "classification", ["--train", root / "train.txt", "--dev", data / "dev.csv"]


def two_formats(root):
    write_jsonl(sst_csv(root) / "train.jsonl", [{"text": "a", "label": "b"}])
    return "classification", ["--data", root]


def duplicate_dev_id(root):
    data = sst_csv(root)
    rows = [["r1", "a film", "negative"], ["r2", "fine", "positive"], ["r1", "dull", "negative"]]
    write_csv(data / "dev.csv", ["id", "text", "label"], rows)
    return "classification", ["--data", data]


def folder_and_files(root):
    return "classification", ["--data", sst_csv(root), "--dev", root / "dev.csv"]


def no_dev(root):
    return "classification", ["--train", sst_csv(root) / "train.csv"]


BAD = {
    missing_column: [
        "train.csv, line 1",
        "no column 'label'",
        "'text', 'sentiment'",
        "--label-column",
    ],
    unseen_dev_label: ["dev.csv, line 3, column 'label'", "'neutral'", "training file's labels"],
    unseen_test_label: ["test.jsonl, line 2, column 'label'", "label '3'", "training file's"],
    empty_text: ["train.csv, line 3, column 'text'", "empty text", "fill it in"],
    non_numeric_target: ["train.parquet, row 2, column 'label'", "'high' is not a number"],
    unknown_extension: ["train.txt", "unknown data format ('.txt')", ".csv, .tsv, .jsonl"],
    two_formats: ["train.csv, train.jsonl", "keep one"],
    duplicate_dev_id: ["dev.csv", "the id 'r1' is given to two examples", "make the ids unique"],
    folder_and_files: ["--data and --dev exclude each other"],
    no_dev: ["--dev FILE"],
}


@pytest.mark.parametrize("case", BAD, ids=lambda case: case.__name__)
def test_bad_input_is_one_line_naming_file_line_and_column(case, tmp_path, capsys, tiny_pretrained):
    task, data_args = case(tmp_path / "data")
    code, err = finetune(capsys, tiny_pretrained, task, tmp_path / "out", *data_args)
    assert_one_line_error(code, err, *BAD[case])
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.tmp").exists()


def test_experiment_compares_arms_on_an_own_data_task(wikitext_data, tmp_path, capsys):

    data = sst_csv(tmp_path / "sst", n=24)
    out = tmp_path / "xp"
    args = ["experiment", "--data", wikitext_data, "--out", out, "--arm", "electra"]
    args += ["--steps", "4", "--seeds", "1", "--task", "classification", "--task-data", data]
    args += ["--pretrain-set", *[f"{k}={v}" for k, v in TINY_OVERRIDES.items()]]
    args += ["--finetune-set", "epochs=1", "max_seq_len=32", "device=cpu"]
    code, table, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "| classification | mean |" in table
    results = json.loads((out / "results.json").read_text())
    row = results["arms"]["electra"][0]
    assert results["tasks"] == ["classification"] and 0 <= row["glue"] <= 100
    # a bad file stops the experiment before any pretraining
    write_csv(data / "dev.csv", ["text", "label"], [["a film", "neutral"]])
    code, _, err = run_cli(capsys, *[a if a != out else tmp_path / "xp2" for a in args])
    assert_one_line_error(code, err, "dev.csv, line 2, column 'label'", "'neutral'")
    assert not (tmp_path / "xp2").exists()
