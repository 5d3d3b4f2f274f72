"""Atomic writes: the target holds the old content or the whole new one, never a part, and no
temporary file or folder is left behind, whether the write succeeds or fails."""

import json
import os

import pytest

from electra.atomic import (
    atomic_dir,
    atomic_path,
    replace_dir,
    temporary_dir,
    write_json_atomic,
    write_text_atomic,
)


def names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_write_text_and_json_replace_the_file_and_leave_nothing_else(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old")
    write_json_atomic(path, {"b": 1, "a": [2]})
    assert json.loads(path.read_text()) == {"a": [2], "b": 1}
    write_text_atomic(path, "héllo\n")
    assert path.read_text(encoding="utf-8") == "héllo\n"
    assert names(tmp_path) == ["a.json"]


def test_atomic_path_writes_to_a_hidden_sibling_then_replaces(tmp_path):
    path = tmp_path / "plot.png"
    path.write_bytes(b"old")
    with atomic_path(path, suffix=".png", fsync=True) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".") and tmp.suffix == ".png"
        tmp.write_bytes(b"new")
        assert path.read_bytes() == b"old"  # not in place until the block ends
    assert path.read_bytes() == b"new" and names(tmp_path) == ["plot.png"]


def test_a_failure_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write("half a ")
        raise RuntimeError("disk full")
    assert path.read_text() == "old\n" and names(tmp_path) == ["rows.jsonl"]
    # A writer that fails before creating anything, and an interrupt, end the same way.
    with pytest.raises(KeyboardInterrupt), atomic_path(path):
        raise KeyboardInterrupt
    assert path.read_text() == "old\n" and names(tmp_path) == ["rows.jsonl"]


def test_a_failing_writer_leaves_no_new_file(tmp_path):
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "a.json", {"x": object()})
    assert names(tmp_path) == []


def test_atomic_dir_replaces_an_old_folder_only_when_the_new_one_is_complete(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with atomic_dir(out) as tmp:
        assert tmp == temporary_dir(out) and tmp.name.startswith(".") and names(tmp) == []
        (tmp / "new.txt").write_text("new")
        assert names(out) == ["old.txt"]  # the old folder is whole while the new one is written
    assert names(out) == ["new.txt"] and names(tmp_path) == ["out"]


def test_atomic_dir_failure_keeps_the_old_folder_and_removes_the_partial_one(tmp_path):
    out = tmp_path / "deep" / "out"
    with pytest.raises(OSError), atomic_dir(out, tag="export-tmp") as tmp:
        (tmp / "half").write_text("x")
        raise OSError("no space left on device")
    assert names(tmp_path / "deep") == []  # parents are made, nothing else is left
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_dir(out) as tmp:
        (tmp / "half").write_text("x")
        raise KeyboardInterrupt
    assert names(out) == ["old.txt"] and names(tmp_path / "deep") == ["out"]


def test_atomic_dir_clears_a_temporary_folder_left_by_a_crash(tmp_path):
    out = tmp_path / "out"
    stale = temporary_dir(out)
    stale.mkdir()
    (stale / "stale.txt").write_text("x")
    with atomic_dir(out, fsync=True) as tmp:
        (tmp / "a.txt").write_text("a")
    assert names(out) == ["a.txt"] and names(tmp_path) == ["out"]


def test_replace_dir_puts_the_old_folder_back_when_the_new_one_cannot_move(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(FileNotFoundError):
        replace_dir(tmp_path / "missing", out)
    assert names(out) == ["old.txt"] and names(tmp_path) == ["out"]


def test_replace_dir_replaces_a_file_or_a_link(tmp_path):
    new = tmp_path / "new"
    for make in (lambda p: p.write_text("a file"), lambda p: os.symlink(tmp_path / "nowhere", p)):
        new.mkdir()
        (new / "x").write_text("x")
        make(tmp_path / "out")
        replace_dir(new, tmp_path / "out", fsync=True)
        assert names(tmp_path / "out") == ["x"] and names(tmp_path) == ["out"]
        (tmp_path / "out" / "x").unlink()
        (tmp_path / "out").rmdir()
