"""`electra predict`: JSONL records for files in each task's format and for standard input, the
same predictions as `electra evaluate`, long inputs cut (said once) or windowed, and one-line
errors for what it cannot read."""

from __future__ import annotations

import json
import math

import pytest

from electra.jsonl import read_jsonl
from electra.tasks.tagging import entity_spans

from ..conftest import (
    CONTEXT,
    assert_one_line_error,
    predict_cli,
    run_cli,
    shared_data,
    stdin_lines,
)
from ..finetuned_models import best_seed, data_dirs, finetuned, prediction_bound


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    return finetuned(tmp_path_factory, "sst2"), data_dirs(tmp_path_factory)["sst2"]


def test_classification_records_match_evaluate(sst2, capsys, tmp_path):
    model, data = sst2
    out = tmp_path / "p.jsonl"
    code, _, err = predict_cli(capsys, model, data / "dev.tsv", "--out", out, "--all-scores")
    assert code == 0, err
    # A file's progress (plain lines: stderr is no terminal here), the count.
    assert ": 120/120 rows (100%)" in err and "120 predictions ->" in err
    records = read_jsonl(out)
    evaluated = read_jsonl(best_seed(model) / "predictions.jsonl")  # finetune's dev predictions
    assert [r["id"] for r in records] == [e["id"] for e in evaluated]
    assert [r["label"] for r in records] == [e["prediction"] for e in evaluated]
    for r in records:
        assert set(r) == {"id", "label", "score", "scores"} and set(r["scores"]) == {"0", "1"}
        assert r["score"] == max(r["scores"].values()) >= 0.5
        assert math.isclose(sum(r["scores"].values()), 1.0, rel_tol=1e-5)
    # Without --all-scores: the label and its probability only.
    code, stdout, _ = predict_cli(capsys, model, data / "dev.tsv")
    assert [json.loads(line) for line in stdout.splitlines()] == [
        {k: r[k] for k in ("id", "label", "score")} for r in records
    ]


@pytest.mark.numeric
def test_standard_input_and_long_inputs_said_once(sst2, capsys, monkeypatch):
    model, data = sst2
    sentences = [line.split("\t")[0] for line in (data / "dev.tsv").read_text().splitlines()[1:4]]
    long = " ".join(["a wonderfully long and winding sentence"] * 30)
    stdin_lines(monkeypatch, "\n".join([sentences[0], "", sentences[1], long, long]) + "\n")
    code, stdout, err = predict_cli(capsys, model, "-")
    assert code == 0, err
    records = [json.loads(line) for line in stdout.splitlines()]
    assert [r["id"] for r in records] == ["0", "1", "2", "3", "4"]  # every line keeps its place
    assert records[1] == {"id": "1", "empty": True}
    del records[1]
    assert err.count("warning:") == 2 and "2 of 5 inputs" in err and "48 tokens" in err
    assert "1 of 5 inputs blank" in err
    # the same sentences from a file give the same records
    code, stdout, _ = predict_cli(capsys, model, data / "dev.tsv")
    from_file = [json.loads(line) for line in stdout.splitlines()[:2]]
    bound = prediction_bound(model, data / "dev.tsv")
    for r, f in zip(records[:2], from_file, strict=True):  # batched with other lengths
        assert r["label"] == f["label"] and r["score"] == pytest.approx(f["score"], abs=bound)


def test_several_inputs_name_their_source(sst2, capsys, monkeypatch, tmp_path):
    model, data = sst2
    stdin_lines(monkeypatch, "a fine film\n")
    code, stdout, err = predict_cli(capsys, model, data / "dev.tsv", "-")
    assert code == 0, err
    records = [json.loads(line) for line in stdout.splitlines()]
    assert len(records) == 121 and records[-1]["source"] == "-"
    assert records[0]["source"] == str(data / "dev.tsv")


@pytest.mark.numeric
def test_regression_values_on_the_labels_scale(tmp_path_factory, capsys):
    model, data = finetuned(tmp_path_factory, "stsb"), data_dirs(tmp_path_factory)["stsb"]
    code, stdout, err = predict_cli(capsys, model, data / "dev.tsv")
    assert code == 0, err
    records = [json.loads(line) for line in stdout.splitlines()]
    evaluated = read_jsonl(best_seed(model) / "predictions.jsonl")
    assert all(set(r) == {"id", "value"} for r in records)
    # evaluate's, on 0-5, rounded to 4 decimals (5e-5), and computed in other batches
    bound = 5e-5 + prediction_bound(model, data / "dev.tsv", scale=5)
    for r, e in zip(records, evaluated, strict=True):
        assert r["value"] == pytest.approx(e["prediction"], abs=bound)


def test_tagging_words_tags_and_entities_with_offsets(tmp_path_factory, capsys, monkeypatch):
    model, data = finetuned(tmp_path_factory, "conll"), data_dirs(tmp_path_factory)["conll"]
    code, stdout, err = predict_cli(capsys, model, data / "valid.txt")
    assert code == 0, err
    records = [json.loads(line) for line in stdout.splitlines()]
    evaluated = read_jsonl(best_seed(model) / "predictions.jsonl")
    assert [r["tags"] for r in records] == [e["prediction"] for e in evaluated]
    assert any(r["entities"] for r in records), "the model tags no entity at all"
    for r in records:
        text = " ".join(r["words"])  # a file's offsets: its words joined by single spaces
        spans = entity_spans(r["tags"])
        assert [e["entity"] for e in r["entities"]] == [kind for kind, _, _ in spans]
        for e, (_, first, last) in zip(r["entities"], spans, strict=True):
            assert (
                text[e["start"] : e["end"]] == e["text"] == " ".join(r["words"][first : last + 1])
            )
    # a line of standard input: its own whitespace, offsets into the line
    line = "  EU  rejects German call to boycott British lamb ."
    stdin_lines(monkeypatch, line + "\n")
    code, stdout, _ = predict_cli(capsys, model, "-")
    (record,) = [json.loads(x) for x in stdout.splitlines()]
    assert record["words"] == line.split()
    for e in record["entities"]:
        assert line[e["start"] : e["end"]] == e["text"]
    # a sentence past the model's 64 tokens: cut as in training, its last words tagged O
    stdin_lines(monkeypatch, " ".join(["Germany"] * 80) + "\n")
    code, stdout, err = predict_cli(capsys, model, "-")
    assert code == 0 and "1 of 1 inputs" in err and "tagged O" in err
    assert json.loads(stdout)["tags"][-1] == "O" and len(json.loads(stdout)["tags"]) == 80


def test_entity_spans_follow_iob_and_plain_tags():
    tags = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-ORG", "PER", "PER"]
    assert entity_spans(tags) == [
        ("PER", 0, 1),
        ("LOC", 3, 4),
        ("LOC", 5, 5),
        ("ORG", 6, 6),
        ("PER", 7, 8),
    ]


def test_qa_answers_with_offsets_from_file_and_stdin(tmp_path_factory, capsys, monkeypatch):
    model, data = finetuned(tmp_path_factory, "qa"), data_dirs(tmp_path_factory)["qa"]
    code, stdout, err = predict_cli(capsys, model, data / "dev.json")
    assert code == 0, err
    records = [json.loads(line) for line in stdout.splitlines()]
    evaluated = read_jsonl(best_seed(model) / "predictions.jsonl")
    assert [r["answer"] for r in records] == [e["prediction"] for e in evaluated]
    for r in records:
        assert set(r) == {"id", "answer", "start", "score", "no_answer", "null_score"}
        assert 0.0 <= r["score"] <= 1.0
        if r["answer"]:
            assert CONTEXT[r["start"] : r["start"] + len(r["answer"])] == r["answer"]
        else:
            assert r["start"] is None
    first = json.loads((data / "dev.json").read_text())["data"][0]["paragraphs"][0]["qas"][0]
    stdin_lines(monkeypatch, f"{first['question']}\t{CONTEXT}\n")  # the file's first question
    code, stdout, _ = predict_cli(capsys, model, "-")
    assert code == 0
    assert json.loads(stdout)["answer"] == records[0]["answer"]


def test_unreadable_inputs_are_one_line_errors(sst2, capsys, monkeypatch, tmp_path):
    model, _ = sst2
    (tmp_path / "x.csv").write_text("sentence\na film\n")
    code, _, err = predict_cli(capsys, model, tmp_path / "x.csv")
    assert_one_line_error(code, err, "x.csv", ".tsv")
    code, _, err = predict_cli(capsys, model, tmp_path / "missing.tsv")
    assert_one_line_error(code, err, "not found")
    stdin_lines(monkeypatch, "")
    code, _, err = predict_cli(capsys, model, "-", "--out", tmp_path / "p.jsonl")
    assert_one_line_error(code, err, "standard input", "no input")
    assert not (tmp_path / "p.jsonl").exists()
    stdin_lines(monkeypatch, "a\tb\n")
    code, _, err = predict_cli(capsys, model, "-")
    assert_one_line_error(code, err, "line 1", "TAB")
    # Wrong as a test file and as a labelled one: both readings are named.
    (tmp_path / "y.tsv").write_text("review\tstars\na film\t4\n")
    code, _, err = predict_cli(capsys, model, tmp_path / "y.tsv")
    assert_one_line_error(code, err, "sst2 test file", "sst2 dev file", "'sentence'")


@pytest.mark.parametrize(
    "task,folder,counts",
    [
        ("cola", "CoLA", (1043, 1063)),
        ("sst2", "SST-2", (872, 1821)),
        ("stsb", "STS-B", (1500, 1379)),
    ],
)
def test_labelled_and_test_files_read_without_labels(task, folder, counts):
    """A GLUE dev file (CoLA's without a header) and a test file both read as inputs."""
    from electra.tasks import get_task

    reader = get_task(task)
    for name, n in zip(("dev.tsv", "test.tsv"), counts, strict=True):
        examples = reader.read_inputs(shared_data("glue", folder, name))
        assert len(examples) == n and all(e.label is None for e in examples)
        assert (examples[0].text_b is not None) == (task == "stsb")


def test_runtime_flags_override_the_fine_tuned_runtime(sst2, capsys, tmp_path):
    """predict and evaluate take the runtime flags generated from `RuntimeConfig` (those that
    inference reads): stock kernels give the same labels, --no-progress hides the bar, a bad
    value is one line, and a setting inference does not read is refused."""
    from electra.config import InferenceRuntime
    from electra.finetuning.loading import load_for_inference
    from electra.model.electra.modeling import ElectraSelfAttention
    from electra.overrides import with_values

    model, data = sst2
    stock_fp32 = InferenceRuntime(kernels="stock", precision="fp32")
    _, net, _, cfg, runtime = load_for_inference(model, stock_fp32)
    assert (
        cfg.kernels == "stock" and runtime.config.precision == "fp32" and not runtime.config.compile
    )
    assert any(type(m) is ElectraSelfAttention for m in net.modules())  # not swapped
    code, stdout, err = predict_cli(capsys, model, data / "dev.tsv", "--kernels", "stock")
    assert code == 0, err
    stock = [json.loads(line)["label"] for line in stdout.splitlines()]
    code, stdout, err = predict_cli(capsys, model, data / "dev.tsv", "--no-progress")
    assert code == 0 and "/120 rows" not in err, err
    assert [json.loads(line)["label"] for line in stdout.splitlines()] == stock
    code, _, err = run_cli(
        capsys,
        "evaluate",
        "--model",
        model,
        "--data",
        data,
        "--device",
        "cpu",
        "--kernels",
        "stock",
        "--out",
        tmp_path / "ev",
    )
    assert code == 0, err
    assert [r["prediction"] for r in read_jsonl(tmp_path / "ev" / "predictions.jsonl")] == stock
    code, _, err = predict_cli(capsys, model, data / "dev.tsv", "--precision", "fp16")
    assert_one_line_error(code, err, "precision")
    with pytest.raises(Exception, match="unknown setting 'compile'"):
        with_values(InferenceRuntime(), {"compile": "true"}, "flags")
