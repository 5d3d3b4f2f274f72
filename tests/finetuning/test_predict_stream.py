"""`electra predict` as a Unix tool: records stream out chunk by chunk, every input keeps its
position, a bad line mid-stream stops with one error naming it (the records before it already
out, an --out file not written), a closed pipe ends quietly, and files of your own are read by
the columns and separator the flags name."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..conftest import assert_one_line_error, predict_cli, run_cli, stdin_lines
from ..finetuned_models import data_dirs, finetuned


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    return finetuned(tmp_path_factory, "sst2")


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    """An own-data model fine-tuned on a `text` column."""
    return finetuned(tmp_path_factory, "regression")


def test_records_stream_out_until_a_bad_line_which_is_named(sst2, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("electra.finetuning.predict.CHUNK", 2)
    lines = ["a fine film", "dull", "", "warm and kind", "one\ttwo", "never read"]
    stdin_lines(monkeypatch, "\n".join(lines) + "\n")
    code, stdout, err = predict_cli(capsys, sst2, "-")
    assert_one_line_error(code, err, "standard input, line 5", "TAB")
    records = [json.loads(line) for line in stdout.splitlines()]
    assert [r["id"] for r in records] == ["0", "1", "2", "3"]  # the first two chunks, in place
    assert records[2] == {"id": "2", "empty": True} and "label" in records[3]
    stdin_lines(monkeypatch, "\n".join(lines) + "\n")
    code, _, err = predict_cli(capsys, sst2, "-", "--out", tmp_path / "p.jsonl")
    assert_one_line_error(code, err, "line 5")
    assert not (tmp_path / "p.jsonl").exists() and not list(tmp_path.iterdir())


def test_output_is_flushed_chunk_by_chunk(sst2, capsys, monkeypatch):
    """What the reader of a pipe sees: each chunk's records written and flushed before the next
    chunk is read."""
    monkeypatch.setattr("electra.finetuning.predict.CHUNK", 3)
    seen = []

    class Lines:
        def __iter__(self):
            for i in range(7):
                seen.append(("read", i))
                yield f"sentence number {i}\n"

    class Out:
        def write(self, text):
            seen.append(("write", text.count("\n")))

        def flush(self):
            seen.append(("flush", None))

    monkeypatch.setattr("sys.stdout", Out())
    from electra.finetuning.predict import predict_inputs

    assert predict_inputs(sst2, ["-"], stdin=Lines()) == 7
    writes = [(i, n) for i, (kind, n) in enumerate(seen) if kind == "write"]
    assert [n for _, n in writes] == [3, 3, 1]
    assert seen[writes[0][0] - 1] == ("read", 2)  # the first chunk's records went out before
    assert ("read", 3) not in seen[: writes[0][0]]  # the 4th line was read
    assert all(seen[i + 1] == ("flush", None) for i, _ in writes)


def test_a_tab_given_to_a_single_text_own_data_model_is_an_error(regression, capsys, monkeypatch):
    stdin_lines(monkeypatch, "a film\nleft\tright\n")
    code, _, err = predict_cli(capsys, regression, "-")
    assert_one_line_error(code, err, "standard input, line 2", "2 TAB-separated fields", "one text")


def test_blank_rows_of_a_file_keep_their_places(regression, capsys, tmp_path):
    path = tmp_path / "new.csv"
    path.write_text("text\na warm film\n\n,\nthe end\n\n")  # a blank line, an empty row, an end
    code, stdout, err = predict_cli(capsys, regression, path)
    assert code == 0, err
    records = [json.loads(line) for line in stdout.splitlines()]
    assert [r["id"] for r in records] == ["0", "1", "2", "3"]
    assert records[1] == {"id": "1", "empty": True} == {**records[2], "id": "1"}
    assert "value" in records[3] and "2 of 4 inputs blank" in err


def test_column_flags_read_new_files_by_other_names(regression, capsys, tmp_path):
    path = tmp_path / "new.csv"
    path.write_text("review;stars\na warm film;4\nthe end;2\n")
    code, _, err = predict_cli(capsys, regression, path, "--delimiter", ",")
    assert_one_line_error(code, err, "no column 'text'", "--delimiter ';'")
    code, _, err = predict_cli(capsys, regression, path)
    assert_one_line_error(code, err, "no column 'text'", "'review', 'stars'", "--text-columns")
    code, stdout, err = predict_cli(capsys, regression, path, "--text-columns", "review")
    assert code == 0, err
    assert len(stdout.splitlines()) == 2 and "semicolons" in err
    code, _, err = predict_cli(capsys, regression, path, "--text-columns", "review", "stars")
    assert_one_line_error(code, err, "--text-columns", "reads 1 text column (text), not 2")


def test_column_flags_are_refused_for_benchmark_models(sst2, capsys, tmp_path):
    code, _, err = predict_cli(capsys, sst2, "-", "--text-columns", "review")
    assert_one_line_error(code, err, "--text-columns", "not sst2's")


def test_a_closed_pipe_ends_quietly(sst2, tmp_path_factory):
    """`electra predict ... | head -n 1`: no BrokenPipeError traceback, SIGPIPE's status."""
    lines = tmp_path_factory.mktemp("pipe") / "lines.txt"
    lines.write_text("".join(f"sentence {i} of a long stream\n" for i in range(9000)))
    command = [sys.executable, "-m", "electra.cli", "predict", "--model", str(sst2), "-"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    with open(lines, "rb") as stdin:
        proc = subprocess.Popen(
            command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -n 1` does once it has its line
    err = proc.stderr.read().decode()
    assert json.loads(first)["id"] == "0"
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_the_own_data_folder_still_predicts(tmp_path_factory, regression, capsys):
    data = data_dirs(tmp_path_factory)["regression"]
    code, stdout, err = run_cli(capsys, "predict", "--model", regression, data / "dev.jsonl")
    assert code == 0, err
    assert all("value" in json.loads(line) for line in stdout.splitlines())
