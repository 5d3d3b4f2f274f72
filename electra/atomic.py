"""Writing a file or a folder so that a reader, a crash or an error never leaves half of one in
place: the content goes to a hidden temporary sibling, which is renamed over the target only once
complete, and removed when the writing fails. Imports nothing from electra, so any module may use
it."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from electra.errors import ElectraError


def refuse_existing(out: str | Path, overwrite: bool) -> None:
    """A command's output that exists already is replaced only when the user says so."""
    if Path(out).exists() and not overwrite:
        raise ElectraError(f"{out} already exists: pass --overwrite or another --out")


@contextmanager
def atomic_path(path: str | Path, suffix: str = "", fsync: bool = False) -> Iterator[Path]:
    """Yields a hidden temporary path beside `path` for the caller to write one file to; when the
    block ends without an error that file replaces `path` (os.replace), else it is removed and
    `path` is left as it was. `suffix` ends the temporary name (".png" where the writer infers
    the format from it); `fsync` flushes the file to disk before the rename. The process id in
    the name keeps two processes writing the same file apart."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{suffix}")
    try:
        yield tmp
        if fsync:
            fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Writes `text` (UTF-8) to `path` through a temporary file: readers never see half a file."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


@contextmanager
def atomic_dir(out_dir: str | Path, tag: str = "tmp", fsync: bool = False) -> Iterator[Path]:
    """Yields a new, empty hidden folder `.NAME.TAG` beside `out_dir` (creating the parents; an
    old one from a crash is removed first) for the caller to fill; when the block ends without an
    error it takes `out_dir`'s place (see `replace_dir`), else it is removed and `out_dir` is left
    as it was."""
    out_dir = Path(out_dir)
    tmp = temporary_dir(out_dir, tag)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        yield tmp
        replace_dir(tmp, out_dir, fsync=fsync)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def temporary_dir(out_dir: str | Path, tag: str = "tmp") -> Path:
    """The hidden sibling `.NAME.TAG` that `atomic_dir` fills for `out_dir`; for a caller that keeps
    it across runs (to resume) and moves it in place itself with `replace_dir`."""
    out_dir = Path(out_dir)
    return out_dir.with_name(f".{out_dir.name}.{tag}")


def replace_dir(tmp: str | Path, out_dir: str | Path, fsync: bool = False) -> None:
    """Moves the finished folder `tmp` to `out_dir`, replacing an old `out_dir` only now: the old
    one is renamed aside (hidden), the new one renamed in, then the old one removed; if the second
    rename fails the old one is put back. `fsync` flushes the parent folder (the renames) to
    disk."""
    tmp, out_dir = Path(tmp), Path(out_dir)
    old = None
    if out_dir.exists() or out_dir.is_symlink():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        _remove(old)
        out_dir.rename(old)
        try:
            tmp.rename(out_dir)
        except BaseException:
            old.rename(out_dir)
            raise
    else:
        tmp.rename(out_dir)
    if fsync:
        fsync_dir(out_dir.parent)
    if old is not None:
        _remove(old)


def fsync_file(path: str | Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
