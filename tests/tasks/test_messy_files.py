"""Files as Excel and pandas write them: semicolon CSVs with a BOM and CRLF line ends, labels that
are numbers in one format and text in another, label lists where one label belongs, quoted line
breaks in a TSV; and settings out of range. Each is read as meant, or refused in one line saying
what to do."""

from __future__ import annotations

import json

import pytest

from electra.errors import ElectraError
from electra.tasks import get_task
from electra.tasks.finetune_config import FinetuneConfig
from electra.tasks.settings import ClassificationSettings

from ..conftest import FAST_OWN_FLAGS, assert_one_line_error, run_cli

EXCEL = (
    '\ufefftext;label\r\n"a fine; warm film";positive\r\ndull;negative\r\n"so ""so""";negative\r\n'
)


def classification(**settings):
    return get_task(
        "classification", FinetuneConfig(classification=ClassificationSettings(**settings))
    )


def test_an_excel_semicolon_csv_is_read_as_its_header_says(tmp_path, capsys):
    path = tmp_path / "train.csv"
    path.write_bytes(EXCEL.encode("utf-8"))
    examples = classification().read(path, "train")
    assert [(e.text_a, e.label) for e in examples] == [
        ("a fine; warm film", "positive"),
        ("dull", "negative"),
        ('so "so"', "negative"),
    ]
    assert "semicolons (';')" in capsys.readouterr().err
    # --delimiter forces the separator; read as commas, the header is one column, named for it
    with pytest.raises(ElectraError, match=r"no column 'text'.*separated by ';'.*--delimiter ';'"):
        classification(delimiter=",").read(path, "train")


@pytest.mark.parametrize("delimiter", ["|", "\t", ","])
def test_the_separator_is_sniffed_outside_quotes(delimiter, tmp_path):
    path = tmp_path / "train.csv"
    rows = [f'"x{delimiter}y, z"{delimiter}a', f"w{delimiter}b"]
    path.write_text("\n".join([f'"t;x;"{delimiter}label', *rows]) + "\n")  # ';' quoted: no vote
    examples = classification(text_columns=("t;x;",)).read(path, "train")
    assert [(e.text_a, e.label) for e in examples] == [(f"x{delimiter}y, z", "a"), ("w", "b")]


def test_labels_are_one_class_whatever_the_format_writes(tmp_path):
    """`1` in a CSV and `1.0` in a JSONL (or a CSV written by pandas from a float column)."""
    train, dev = tmp_path / "train.csv", tmp_path / "dev.jsonl"
    train.write_text("text,label\ngood,1\nbad,0\nfine,1.0\n")
    dev.write_text(
        "".join(json.dumps(r) + "\n" for r in [{"text": "ok", "label": 1.0}, {"text": "no", "label": 0}])
    )  # fmt: skip
    task = classification()
    examples = task.read(train, "train")
    assert [e.label for e in examples] == ["1", "0", "1"]
    task = task.fit(examples, train)
    assert task.label_set.names == ("0", "1")
    assert [e.label for e in task.read(dev, "dev")] == ["1", "0"]


def test_labels_named_twice_are_refused_and_case_twins_are_warned(tmp_path, capsys):
    with pytest.raises(ElectraError, match="--labels names 'pos' twice"):
        classification(labels=("pos", "neg", "pos"))
    path = tmp_path / "train.csv"
    path.write_text("text,label\na,Positive\nb,positive\nc,negative\n")
    task = classification()
    examples = task.read(path, "train")
    assert capsys.readouterr().err == ""  # reading fits nothing: the label set is fitted after
    task.fit(examples, path)
    assert "'Positive' and 'positive' differ only in case" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name,content",
    [
        ("train.jsonl", '{"text": "a", "label": ["positive"]}\n{"text": "b", "label": "neg"}\n'),
        ("train.csv", "text,label\na,\"['positive']\"\nb,neg\n"),
    ],
)
def test_a_list_in_a_single_label_column_is_refused(name, content, tmp_path):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ElectraError, match=r"line \d, column 'label'.*--task multilabel"):
        classification().read(path, "train")


def test_a_pandas_tsv_with_a_quoted_line_break_gets_a_hint_about_quoting(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text('text\tlabel\n"first line\nsecond line"\t1\nplain\t0\n')  # pandas' to_csv
    with pytest.raises(ElectraError, match=r"line 2: 1 fields.*quoted line break.*\.csv") as e:
        classification().read(path, "train")
    assert "cannot hold a tab" not in str(e.value)


BAD_FLAGS = {
    "epochs": (["--epochs", "-1"], "epochs must be at least 0"),
    "seeds": (["--seeds", "0"], "seeds must be at least 1"),
    "lr": (["--lr=-3e-4"], "lr must be at least 0"),
    "batch": (["--batch-size", "-8"], "batch_size must be at least 1"),
    "delimiter": (["--delimiter", ":"], "use , ; | or tab"),
    "labels": (["--labels", "a,b,a"], "--labels names 'a' twice"),
}


@pytest.mark.parametrize("case", BAD_FLAGS)
def test_settings_out_of_range_are_one_line_and_write_nothing(case, tmp_path, capsys):
    flags, needle = BAD_FLAGS[case]
    train = tmp_path / "train.csv"
    train.write_text("text,label\na,x\nb,y\nc,x\nd,y\n")
    args = ["finetune", "--model", tmp_path, "--task", "classification", "--out", tmp_path / "o"]
    code, _, err = run_cli(
        capsys, *args, "--train", train, "--dev-split", "0.5", *FAST_OWN_FLAGS, *flags
    )
    assert_one_line_error(code, err, needle)
    assert not (tmp_path / "o").exists()


def test_a_folder_given_as_a_file_names_the_flag_for_folders(tmp_path, capsys, tiny_pretrained):
    args = ["finetune", "--model", tiny_pretrained, "--task", "classification"]
    code, _, err = run_cli(
        capsys, *args, "--out", tmp_path / "o", "--train", tmp_path, *FAST_OWN_FLAGS
    )
    assert_one_line_error(code, err, "--train", "is a folder", "as --data")


def test_an_excel_csv_fine_tunes_end_to_end(tmp_path, capsys, tiny_pretrained):
    rows = "".join(f"{w} film;{'positive' if i % 2 else 'negative'}\r\n" for i, w in enumerate(
        ["a warm", "a dull", "a fine", "a cold", "a kind", "a flat", "a bright", "a grey"]
    ))  # fmt: skip
    train = tmp_path / "mine.csv"
    train.write_bytes(("\ufefftext;label\r\n" + rows).encode("utf-8"))
    args = ["finetune", "--model", tiny_pretrained, "--task", "classification"]
    args += ["--out", tmp_path / "o", "--data", train, "--dev-split", "0.25", *FAST_OWN_FLAGS]
    code, stdout, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "semicolons" in err and "classification dev accuracy" in stdout
