"""Writing a file or a folder so that a reader, a crash or an error never leaves half of one in
place: the content goes to a hidden temporary sibling, which is renamed over the target only once
complete, and removed when the writing fails. An operating-system error met on the way names the
target the user asked for, not the temporary (`writing` makes one of a library's own error, as
safetensors' on a full disk). Imports nothing from electra, so any module may use it."""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
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
    except BaseException as e:
        with suppress(OSError):  # (a read-only disk refuses even to unlink what is not there)
            tmp.unlink(missing_ok=True)
        name_target(e, tmp, path)
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
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        name_target(e, tmp, out_dir)
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


def recover_replaced(out_dir: str | Path) -> list[str]:
    """Finishes what a `replace_dir` killed between its two renames left: the old `out_dir`,
    renamed aside to `.NAME.old-PID`, is put back where no new one took its place, else removed.
    For a caller that holds `out_dir`'s lock (no live writer owns the leftovers). Returns what it
    did, for the caller to say."""
    out_dir = Path(out_dir)
    done = []
    for old in sorted(out_dir.parent.glob(f".{glob.escape(out_dir.name)}.old-*")):
        if not (out_dir.exists() or out_dir.is_symlink()):
            old.rename(out_dir)
            done.append(f"put back {out_dir}, left aside by a command stopped while replacing it")
        else:
            _remove(old)
            done.append(f"removed {old.name}, left by a command stopped after replacing it")
    return done


def name_target(error: BaseException, tmp: Path, target: Path) -> None:
    """An OSError met writing the temporary `tmp` names `target` instead (or in `target` where it
    names a file inside the temporary folder), and names `target` where it named nothing (a
    write to an open file on a full disk): the user knows the path they asked for."""
    if not isinstance(error, OSError):
        return
    if error.errno is None and _full(target):  # a short write (numpy's "N requested and M
        error.errno, error.strerror = errno.ENOSPC, os.strerror(errno.ENOSPC)  # written")
    name = error.filename
    if isinstance(name, os.PathLike):  # (as some writers give it)
        name = os.fspath(name)
    if name is None:
        error.filename = str(target)
    elif isinstance(name, str) and (name == str(tmp) or name.startswith(f"{tmp}{os.sep}")):
        error.filename = str(target) + name[len(str(tmp)) :]


# How safetensors and torch put an operating-system error in their own exception's message.
_OS_ERROR = re.compile(r"\(os error (\d+)\)|\[Errno (\d+)\]")
# torch.save's own failure to write (a full disk gives no errno), and the prefix it puts before it.
_TORCH_WRITE_FAILED = ("PytorchStreamWriter failed", "unexpected pos")
_ENFORCE = re.compile(r"^\[enforce fail at [^\]]*\]\s*\.?\s*")


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Turns the error of a writer that does not raise OSError into one naming `path` and its
    cause: safetensors' SafetensorError ("I/O error: No space left on device (os error 28)"),
    the bare Exception of `tokenizers` in the same words, and torch.save's RuntimeError
    ("PytorchStreamWriter failed writing file", "unexpected pos": No space left on device where
    the disk is full, torch's first sentence otherwise). Other errors pass as they are."""
    try:
        yield
    except OSError as e:
        if e.filename is None:
            e.filename = str(path)
        raise
    except Exception as e:  # noqa: BLE001 - SafetensorError is not importable by a stable name
        failure = _as_os_error(e, Path(path))
        if failure is None:
            raise
        raise failure from e


def _as_os_error(error: Exception, path: Path) -> OSError | None:
    """The OSError a writer's exception stands for, or None where it is not a failure to write."""
    # `tokenizers` raises a bare Exception ("No space left on device (os error 28)").
    if type(error).__name__ not in ("SafetensorError", "RuntimeError", "Exception"):
        return None
    text = str(error).strip()
    if found := _OS_ERROR.search(text):
        code = int(found[1] or found[2])
        return OSError(code, os.strerror(code), str(path))
    if type(error).__name__ != "RuntimeError" or not any(m in text for m in _TORCH_WRITE_FAILED):
        return None
    if _full(path):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return OSError(errno.EIO, _ENFORCE.sub("", text.splitlines()[0]), str(path))


def _full(path: Path) -> bool:
    """Whether the file system holding `path` has (next to) no space left."""
    folder = next((p for p in (path, *path.parents) if p.is_dir()), Path("."))
    try:
        return shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        return False


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
