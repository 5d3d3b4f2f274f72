"""The Python API of prediction: `Predictor.load(folder)` called on texts or pairs, and `predict`,
give exactly the records `electra predict` writes for the same inputs (texts, pairs, questions
with their contexts, blank inputs in place, files), and refuse what they cannot read in one
error."""

from __future__ import annotations

import json

import pytest

from electra.config import InferenceRuntime
from electra.errors import ElectraError
from electra.finetuning.predict import Predictor, predict
from electra.jsonl import read_jsonl

from ..conftest import CONTEXT, predict_cli, stdin_lines
from ..finetuned_models import data_dirs, finetuned, prediction_bound


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    return finetuned(tmp_path_factory, "sst2")


@pytest.fixture(scope="module")
def stsb(tmp_path_factory):
    return finetuned(tmp_path_factory, "stsb")


def cli_records(capsys, monkeypatch, model, lines, *flags):
    """`electra predict --model MODEL - FLAGS` on `lines` as standard input."""
    stdin_lines(monkeypatch, "".join(f"{line}\n" for line in lines))
    code, stdout, err = predict_cli(capsys, model, "-", *flags)
    assert code == 0, err
    return [json.loads(line) for line in stdout.splitlines()]


def test_texts_give_the_records_of_the_command(sst2, capsys, monkeypatch):
    long = " ".join(["a wonderfully long and winding sentence"] * 30)
    texts = ["a fine film", "  ", "dull and slow", long, "warm", ""]
    predictor = Predictor.load(sst2, device="cpu")
    records = predictor(texts, all_scores=True)
    assert predictor.truncated == 1
    assert records == cli_records(capsys, monkeypatch, sst2, texts, "--all-scores")
    assert [r["id"] for r in records] == ["0", "1", "2", "3", "4", "5"]
    assert records[1] == {"id": "1", "empty": True} == {**records[5], "id": "1"}
    assert set(records[0]) == {"id", "label", "score", "scores"}
    assert predictor([None, "dull and slow"])[0] == {"id": "0", "empty": True}  # None: blank
    assert predictor(texts) == [{k: v for k, v in r.items() if k != "scores"} for r in records]


@pytest.mark.numeric
def test_chunks_keep_positions(sst2, monkeypatch, tmp_path_factory):
    predictor = Predictor.load(sst2, device="cpu")
    texts = ["a fine film", "", "dull", "warm and kind", "the end"]
    whole = predictor(texts)
    monkeypatch.setattr("electra.finetuning.predict.CHUNK", 2)
    chunked = predictor(texts)  # other batches: the scores alike to fp32 rounding
    assert [{**r, "score": None} for r in chunked] == [{**r, "score": None} for r in whole]
    bound = prediction_bound(sst2, data_dirs(tmp_path_factory)["sst2"] / "dev.tsv")
    assert [r.get("score") for r in chunked] == pytest.approx(
        [r.get("score") for r in whole], abs=bound
    )


def test_pairs_are_tuples(stsb, capsys, monkeypatch):
    pairs = [("A man is playing a flute.", "A man plays the flute."), ("", ""), ("a", "b")]
    records = Predictor.load(stsb, device="cpu")(pairs)
    lines = ["\t".join(p) for p in pairs]
    assert records == cli_records(capsys, monkeypatch, stsb, lines)
    assert records[1] == {"id": "1", "empty": True} and set(records[0]) == {"id", "value"}


def test_questions_with_their_contexts(tmp_path_factory, capsys, monkeypatch):
    qa = finetuned(tmp_path_factory, "qa")
    questions = [("where was the car ?", CONTEXT), ("who sat on the mat ?", CONTEXT)]
    records = Predictor.load(qa, device="cpu")(questions)
    assert records == cli_records(capsys, monkeypatch, qa, [f"{q}\t{c}" for q, c in questions])
    assert {"id", "answer", "start", "score", "no_answer", "null_score"} <= set(records[0])


def test_predict_takes_a_file_or_texts_and_writes_out(sst2, capsys, tmp_path, tmp_path_factory):
    source = data_dirs(tmp_path_factory)["sst2"] / "dev.tsv"
    code, stdout, err = predict_cli(capsys, sst2, source)
    assert code == 0, err
    expected = [json.loads(line) for line in stdout.splitlines()]
    out = tmp_path / "sub" / "p.jsonl"
    assert predict(sst2, source, out=out, runtime=InferenceRuntime(progress=False)) == expected
    assert read_jsonl(out) == expected
    predictor = Predictor.load(sst2, device="cpu")
    assert predict(predictor, str(source)) == expected
    texts = ["a fine film", "", "dull"]
    assert predict(predictor, texts) == predictor(texts)
    assert "1 of 3 inputs blank" in capsys.readouterr().err  # said as the command says it


def test_what_cannot_be_read_is_one_error(sst2, stsb, tmp_path):
    predictor = Predictor.load(stsb, device="cpu")
    with pytest.raises(ElectraError, match=r"line 2: a text of the pair holds a TAB"):
        predictor([("a", "b"), ("a\tb", "c")])
    with pytest.raises(ElectraError, match="line 1: 1 TAB-separated fields"):
        predictor(["one text only"])  # a pair model
    with pytest.raises(ElectraError, match="line 2: a int, not a text or a pair"):
        predictor(["a\tb", 3])
    with pytest.raises(ElectraError, match="--batch-size -1: at least 1"):
        predictor(["a\tb"], batch_size=-1)
    with pytest.raises(ElectraError, match="pass a list of texts"):
        predictor("a fine film")
    with pytest.raises(ElectraError, match="input file not found"):
        predict(sst2, tmp_path / "missing.tsv")
    with pytest.raises(ElectraError, match="pass them to Predictor.load"):
        predict(predictor, ["a"], runtime=InferenceRuntime(device="cpu"))
