"""Outputs are never lost and never shared: every command that writes refuses an existing output
unless told (--overwrite), and a second process writing the same output is refused while the
first holds it (`electra.locks.claim_output`: a lock beside the output)."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from electra.errors import ElectraError
from electra.locks import OutputLock, claim_output
from electra.recipes.experiment import check_same_experiment

from .conftest import assert_one_line_error, predict_cli, run_cli
from .finetuned_models import data_dirs, finetuned

REPO = Path(__file__).resolve().parent.parent
# A process that claims an output and holds it until its standard input closes.
HOLDER = """
import sys
from electra.locks import claim_output
with claim_output(sys.argv[1], overwrite=True):
    print("held", flush=True)
    sys.stdin.read()
"""


def holder(out: Path) -> subprocess.Popen:
    """A second Python process that has claimed `out` (and says so), holding it until its
    standard input closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


@contextmanager
def held_by_another_process(out: Path):
    """`out` claimed by a second Python process for the block; yields its pid."""
    proc = holder(out)
    try:
        yield proc.pid
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_second_writer_is_refused_while_the_first_holds_the_output(tmp_path):
    out = tmp_path / "out"
    with held_by_another_process(out) as pid:
        with pytest.raises(ElectraError) as e, claim_output(out):
            pass
        assert f"{out} is being written by pid {pid} on " in str(e.value)
        assert "wait for it, stop it, or choose another --out" in str(e.value)
        assert names(tmp_path) == [".out.lock"]
    assert names(tmp_path) == []  # the lock goes with its holder
    with claim_output(out) as claimed:
        assert claimed == out
        out.write_text("mine")
    assert names(tmp_path) == ["out"]


def test_a_killed_writer_leaves_no_lock_that_blocks(tmp_path):
    out = tmp_path / "out"
    proc = holder(out)
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait(timeout=60)
    proc.stdin.close()
    with claim_output(out):
        pass
    assert names(tmp_path) == []  # its lock file is taken over, and removed with the new holder


def test_an_existing_output_is_refused_unless_overwrite(tmp_path):
    out = tmp_path / "out"
    out.write_text("precious")
    with pytest.raises(ElectraError, match="already exists: pass --overwrite"), claim_output(out):
        pass
    assert out.read_text() == "precious"
    with claim_output(out, overwrite=True, folder=False):
        out.write_text("new")
    (tmp_path / "empty").mkdir()  # an empty folder holds nothing to lose
    with claim_output(tmp_path / "empty"):
        pass
    assert names(tmp_path) == ["empty", "out"]


def test_a_failed_write_removes_the_folders_its_claim_made(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    with pytest.raises(ValueError), claim_output(out):
        raise ValueError("the command failed before writing")
    assert names(tmp_path) == []


def test_a_lock_removed_by_its_last_holder_is_taken_afresh(tmp_path):
    first, second = OutputLock(tmp_path / "out"), OutputLock(tmp_path / "out")
    assert first.try_acquire() and not second.try_acquire()
    first.release()
    assert second.try_acquire()
    assert "pid" in second.holder()
    second.release()
    assert names(tmp_path) == []


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the cat sat on the mat\nthe dog ran to the house\n" * 50)
    return path


def command(kind: str, tmp_path: Path, corpus: Path, model: Path) -> list:
    """The argv of a command writing `tmp_path/out`."""
    out = tmp_path / "out"
    if kind == "tokenizer":
        return ["tokenizer", "train", corpus, "--vocab-size", "60", "--out", out]
    if kind == "prepare":
        return ["prepare", corpus, "--tokenizer", model, "--seq-len", "16", "--out", out]
    if kind == "finetune":
        return ["finetune", "--model", model, "--task", "sst2", "--data", tmp_path, "--out", out]
    if kind == "export":
        return ["export", "--model", model, "--out", out]
    return ["predict", "--model", model, corpus, "--out", out]


@pytest.mark.parametrize("kind", ["tokenizer", "prepare", "finetune", "export", "predict"])
def test_every_writing_command_refuses_an_output_another_process_writes(
    kind, tmp_path, corpus, tiny_pretrained, capsys
):
    out = tmp_path / "out"
    with held_by_another_process(out) as pid:
        code, _, err = run_cli(capsys, *command(kind, tmp_path, corpus, tiny_pretrained))
        assert_one_line_error(code, err, f"{out} is being written by pid {pid} on ")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize("kind", ["tokenizer", "prepare", "finetune", "export", "predict"])
def test_every_writing_command_keeps_an_existing_output(
    kind, tmp_path, corpus, tiny_pretrained, capsys
):
    out = tmp_path / "out"
    if kind == "predict":
        out.write_text("earlier predictions\n")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("earlier work")
    code, _, err = run_cli(capsys, *command(kind, tmp_path, corpus, tiny_pretrained))
    assert_one_line_error(code, err, f"{out} already exists", "--overwrite")
    kept = out.read_text() if kind == "predict" else (out / "notes.txt").read_text()
    assert kept.startswith("earlier")


def test_predict_out_is_replaced_only_with_overwrite(tmp_path_factory, tmp_path, capsys):
    model = finetuned(tmp_path_factory, "sst2")
    source = data_dirs(tmp_path_factory)["sst2"] / "dev.tsv"
    out = tmp_path / "p.jsonl"
    out.write_text("earlier\n")
    code, _, err = predict_cli(capsys, model, source, "--out", out)
    assert_one_line_error(code, err, f"{out} already exists: pass --overwrite")
    assert out.read_text() == "earlier\n"
    code, _, err = predict_cli(capsys, model, source, "--out", out, "--overwrite")
    assert code == 0, err
    assert len(out.read_text().splitlines()) == 120 and names(tmp_path) == ["p.jsonl"]


def test_an_experiment_out_must_be_new_or_the_same_experiment(tmp_path):
    record = {"plan": {"arms": ["electra"]}}
    check_same_experiment(tmp_path / "new", record)
    (tmp_path / "same").mkdir()
    (tmp_path / "same" / "experiment.json").write_text(json.dumps(record))
    check_same_experiment(tmp_path / "same", record)
    with pytest.raises(ElectraError, match="holds another experiment"):
        check_same_experiment(tmp_path / "same", {"plan": {"arms": ["mlm"]}})
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("keep")
    with pytest.raises(ElectraError, match="is not an experiment's folder"):
        check_same_experiment(tmp_path / "mine", record)


def test_evaluate_out_is_claimed_and_replaced_only_with_overwrite(
    tmp_path_factory, tmp_path, capsys
):
    model = finetuned(tmp_path_factory, "sst2")
    data = data_dirs(tmp_path_factory)["sst2"]
    out = tmp_path / "eval"
    argv = ["evaluate", "--model", model, "--task", "sst2", "--data", data, "--out", out]
    with held_by_another_process(out) as pid:
        code, _, err = run_cli(capsys, *argv)
        assert_one_line_error(code, err, f"{out} is being written by pid {pid} on ")
    assert not out.exists()
    code, _, err = run_cli(capsys, *argv)
    assert code == 0, err
    first = (out / "results.json").read_text()
    (out / "results.json").write_text("kept")
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, f"{out} already exists: pass --overwrite")
    assert (out / "results.json").read_text() == "kept"
    code, _, err = run_cli(capsys, *argv, "--overwrite")
    assert code == 0, err
    assert (out / "results.json").read_text() == first


def test_a_replace_killed_between_its_renames_is_finished_by_the_next_claim(tmp_path, capsys):
    """`replace_dir` renames the old output aside, then the new one in: a kill between the two
    leaves the old one hidden. The next command to claim the output puts it back (or, where the
    new one is in place, removes it), and says so."""
    out = tmp_path / "out"
    (tmp_path / ".out.old-4242").mkdir()
    (tmp_path / ".out.old-4242" / "model.safetensors").write_text("the user's model")
    with pytest.raises(ElectraError, match="already exists"), claim_output(out):
        pass
    assert (out / "model.safetensors").read_text() == "the user's model"
    assert "note: put back" in capsys.readouterr().err
    (tmp_path / ".out.old-4243").mkdir()
    with claim_output(out, overwrite=True):
        pass
    assert names(tmp_path) == ["out"]
    assert "note: removed .out.old-4243" in capsys.readouterr().err


def test_the_current_folder_is_no_output(tmp_path, monkeypatch):
    """`--out .` (or a folder above) would be renamed aside and replaced, the shell's folder
    with it: refused in one line, whatever --overwrite says."""
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    for out in (".", "..", str(tmp_path / "here"), "sub/.."):
        refused = pytest.raises(ElectraError, match="is the current folder or holds it")
        with refused, claim_output(out, overwrite=True):
            pass
    assert names(tmp_path) == ["here"] and names(tmp_path / "here") == []


def test_overwrite_never_takes_an_input_or_another_kind_of_output(tmp_path):
    """--overwrite replaced a command's own input (`finetune --data proj --out proj`), a file with
    a folder, and folders no such command wrote."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "train.csv").write_text("text,label\n")
    cases = [
        ("an input of this command", proj, dict(reads=[proj / "train.csv"])),
        ("an input of this command", proj, dict(reads=[proj])),
        ("holds none of results.json", proj, {}),
        ("a folder, with a file", proj, dict(folder=False)),
        ("a file, with a folder", proj / "train.csv", {}),
    ]
    for message, out, how in cases:
        refused = pytest.raises(ElectraError, match=message)
        with refused, claim_output(out, overwrite=True, replaces=("results.json",), **how):
            pass
    assert (proj / "train.csv").read_text() == "text,label\n"
    (proj / "results.json").write_text("{}")  # a folder the command wrote: replaced
    with claim_output(proj, overwrite=True, replaces=("results.json",)):
        pass
