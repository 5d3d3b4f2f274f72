"""Labelled files of your own, the smaller points of issue 46: a JSON Lines text that is not a
string is refused (not read as its Python spelling), JSON booleans are labels of their own and
not a third class beside "1"/"0", a header of 100,000 columns is read in linear time, and a CSV
field past the csv module's 128 KiB default is read (the tokenizer cuts every text to the model)."""

from __future__ import annotations

import json

import pytest

from electra.errors import ElectraError
from electra.tasks import get_task
from electra.tasks import tables as tables_module
from electra.tasks.tables import read_table

from ..conftest import FAST_OWN_FLAGS, assert_one_line_error, run_cli, write_csv


def jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    ("text", "kind"),
    [(42, "a number"), (["a", "b"], "a list"), ({"a": 1}, "an object"), (True, "a boolean")],
)
def test_a_json_text_that_is_not_a_string_is_refused_naming_line_and_field(tmp_path, text, kind):
    path = jsonl(
        tmp_path / "train.jsonl", [{"text": "a film", "label": 1}, {"text": text, "label": 0}]
    )
    with pytest.raises(ElectraError) as e:
        get_task("classification").read(path, "train")
    assert str(e.value).startswith(f"{path}, line 2, column 'text': {kind} (")
    assert "write the text as a string" in str(e.value)


def test_a_json_null_text_is_refused_too(tmp_path):
    path = jsonl(
        tmp_path / "dev.jsonl", [{"text": "a film", "label": 1}, {"text": None, "label": 0}]
    )
    with pytest.raises(ElectraError, match=r"dev\.jsonl, line 2, column 'text': no text"):
        get_task("classification").read(path, "dev")


def test_json_booleans_are_labels_true_and_false(tmp_path):
    records = [{"text": f"film {i}", "label": i % 2 == 0} for i in range(4)]
    task = get_task("classification")
    path = jsonl(tmp_path / "train.jsonl", records)
    train = task.read(path, "train")
    assert task.fit(train, path).labels == ("false", "true")
    # the same labels written as text elsewhere (a dev CSV) are the same two classes
    dev = write_csv(tmp_path / "dev.csv", ["text", "label"], [["a film", "true"]])
    assert task.fit(train, path).read(dev, "dev")[0].label == "true"


@pytest.mark.parametrize("odd", [True, "1"])
def test_a_boolean_among_other_labels_is_refused_not_a_third_class(tmp_path, capsys, odd):
    """`true` among "1"/"0" labels was a third class, "true"; a "1" among booleans likewise."""
    usual = ["1", "0", "1"] if odd is True else [True, False, True]
    records = [{"text": f"film {i}", "label": v} for i, v in enumerate([*usual, odd])]
    path = jsonl(tmp_path / "train.jsonl", records)
    with pytest.raises(ElectraError) as e:
        get_task("classification").read(path, "train")
    shown = "true (a JSON boolean)" if odd is True else "'1'"
    assert str(e.value).startswith(f"{path}, line 4, column 'label': label {shown} where")
    assert 'write every label alike, as true/false or as strings ("1"/"0")' in str(e.value)


def test_a_header_of_100000_columns_is_read_in_linear_time(tmp_path):
    """Each column name was counted across the whole header (4.5 minutes for 100,000 columns):
    the header is now checked in one pass, so this reads in well under a second; a name given
    twice is still found, however wide the header."""
    names = ["text", "label", *(f"c{i}" for i in range(100_000))]
    path = tmp_path / "wide.csv"
    path.write_text(",".join(names) + "\n" + ",".join(["a film", "1", *["x"] * 100_000]) + "\n")
    table = read_table(path)
    assert len(table.columns) == 100_002 and table.rows[0][1]["c99999"] == "x"
    path.write_text(",".join([*names, "c5"]) + "\n" + ",".join(["a film", "1", *["x"] * 100_001]))
    with pytest.raises(ElectraError, match=r"wide\.csv, line 1: the header names 'c5' twice"):
        read_table(path)


class Name(str):
    """A column name that counts how often it is compared with another."""

    compared = 0

    def __eq__(self, other):
        Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_the_header_check_compares_each_name_a_few_times_not_with_every_other():
    """The algorithm, not the clock: n names, n² comparisons before (one count per name)."""
    header = [Name(f"c{i}") for i in range(5_000)]
    Name.compared = 0
    tables_module._check_header("wide.csv", header)
    assert Name.compared <= len(header)


def test_a_csv_field_past_128_kib_is_read_and_cut_by_the_tokenizer(
    tmp_path, capsys, tiny_pretrained
):
    """A field over 131,072 bytes was refused ("field larger than field limit") with no remedy."""
    long = " ".join(["film"] * 60_000)  # 300,000 bytes
    data = tmp_path / "data"
    rows = [[long, "1"], *[[f"a film {i}", str(i % 2)] for i in range(7)]]
    write_csv(data / "train.csv", ["text", "label"], rows)
    write_csv(data / "dev.csv", ["text", "label"], [["a good film", "1"], [long + " end", "0"]])
    assert read_table(data / "train.csv").rows[0][1]["text"] == long
    argv = ["finetune", "--model", tiny_pretrained, "--task", "classification", "--data", data]
    code, _, err = run_cli(capsys, *argv, "--out", tmp_path / "out", *FAST_OWN_FLAGS)
    assert code == 0, err


def test_a_tsv_field_past_128_kib_is_read_too(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("text\tlabel\n" + "x" * 200_000 + "\t1\n")
    assert len(read_table(path).rows[0][1]["text"]) == 200_000


def test_the_jsonl_refusal_is_one_line_from_the_command_line(tmp_path, capsys, tiny_pretrained):
    data = tmp_path / "data"
    data.mkdir()
    jsonl(data / "train.jsonl", [{"text": "a film", "label": 1}, {"text": [1, 2], "label": 0}])
    jsonl(data / "dev.jsonl", [{"text": "a good film", "label": 1}])
    argv = ["finetune", "--model", tiny_pretrained, "--task", "classification", "--data", data]
    code, _, err = run_cli(capsys, *argv, "--out", tmp_path / "out", *FAST_OWN_FLAGS)
    assert_one_line_error(code, err, "train.jsonl, line 2, column 'text': a list ([1, 2])")
