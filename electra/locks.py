"""One writer per output: a run folder's RUN/.lock (`RunLock`), and the hidden `.NAME.lock`
beside any other output, file or folder (`OutputLock`, taken by `claim_output`), each held with an
advisory `flock` and holding its holder's pid and host.

The kernel releases the lock when its holder dies, however it dies, so a run killed with SIGKILL
never leaves a stale lock behind, and a restarted or resumed run takes it at once.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from electra.atomic import recover_replaced, refuse_existing
from electra.errors import ElectraError

LOCK_FILE = ".lock"


class RunLock:
    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> RunLock:
        if not self.try_acquire():
            raise ElectraError(
                f"run folder {self.path.parent} is in use by {self.holder()}: wait for it to "
                "finish, stop it, or choose another --out"
            )
        return self

    def try_acquire(self) -> bool:
        """Takes the lock, or returns False where another process holds it (`electra
        experiment` then goes on with another arm)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:  # an error names the run folder the user gave, not the hidden lock file
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(self.path.parent)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:  # held elsewhere; or no locks at all here (ENOLCK): said as it is
            os.close(fd)
            if isinstance(e, BlockingIOError):
                return False
            raise OSError(e.errno, e.strerror, str(self.path.parent)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self.fd = fd
        return True

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it."""
        try:
            return self.path.read_text(errors="replace").strip()[:200] or "another process"
        except OSError:
            return "another process"

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock; the file stays, harmless
            self.fd = None

    def __enter__(self) -> RunLock:
        return self if self.fd is not None else self.acquire()  # held already: `try_acquire`

    def __exit__(self, *exc: object) -> None:
        self.release()


class OutputLock(RunLock):
    """The lock of one output (a file, or a folder that `electra.atomic.atomic_dir` replaces
    whole): the hidden sibling `.NAME.lock`, outside the output so that replacing it keeps the
    lock. The file is removed on release, so outputs are not left with litter beside them; a
    taker checks, once it holds the lock, that the file it locked is still the one at the path
    (a holder may have removed it meanwhile), else takes the new one."""

    def __init__(self, out: str | Path):
        out = Path(os.path.abspath(out))  # "x/.." has no name of its own to hide a lock beside
        self.out = out
        self.path = out.with_name(f".{out.name}.lock")
        self.fd = None

    def try_acquire(self, wait: bool = False) -> bool:
        """Takes the lock, or returns False where another process holds it; with `wait`, waits
        for it (for a moment's work under the lock, as writing a results table)."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return False
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # removed by the holder that released it: lock the new one
        self.fd = fd
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        except OSError:  # a full disk: no lock file is left behind
            self.release()
            raise
        return True

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)  # while still held: see `try_acquire`
        super().release()


@contextmanager
def claim_output(
    out: str | Path | None,
    overwrite: bool = False,
    wait: bool = False,
    *,
    reads: Iterable[str | Path | None] = (),
    folder: bool = True,
    replaces: tuple[str, ...] = (),
) -> Iterator[Path | None]:
    """Holds `out` for one writer while the block runs: another process writing it is refused
    ("OUT is being written by pid N on HOST: ..."), or waited for with `wait`; an existing output
    (a file, or a folder with anything in it) is refused unless `overwrite`, and even then where
    it is what the command `reads` (or holds one of them), is a file where the command writes a
    `folder` (or the other way round), or is a folder holding none of the names a command's own
    output holds (`replaces`). The output's missing parent folders are made (the lock lives
    beside it), and removed again where the block fails and leaves them empty. An OSError making
    them or the lock names `out`. None (standard output) claims nothing."""
    if out is None:
        yield None
        return
    out = Path(out)
    whole = Path(os.path.abspath(out))
    if whole in (Path.cwd(), *Path.cwd().parents):  # "." or "..": replacing it would take the cwd
        raise ElectraError(
            f"--out {out} is the current folder or holds it: name a new folder or file"
        )
    made = _make_parents(out)
    lock = OutputLock(out)
    try:
        try:
            taken = lock.try_acquire(wait)
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(out)) from None
        if not taken:
            raise ElectraError(
                f"{out} is being written by {lock.holder()}: wait for it, stop it, or choose "
                "another --out"
            )
        with lock:
            for note in recover_replaced(out):
                print(f"note: {note}", file=sys.stderr)
            if out.is_file() or out.is_symlink() or (out.is_dir() and any(out.iterdir())):
                refuse_existing(out, overwrite)
                check_replaceable(out, reads, folder, replaces)
            yield out
    except BaseException:
        for made_folder in made:  # deepest first; one that is not empty stays
            try:
                made_folder.rmdir()
            except OSError:
                break
        raise


def check_replaceable(
    out: Path, reads: Iterable[str | Path | None], folder: bool, replaces: tuple[str, ...]
) -> None:
    """Refuses an `--overwrite` that would take what the user did not mean to give: an input of
    the command, an output of another kind, or a folder no such command wrote."""
    whole = out.resolve()
    for given in filter(None, reads):
        if whole == Path(given).resolve() or whole in Path(given).resolve().parents:
            raise ElectraError(
                f"--overwrite would replace {out}, which holds {given}, an input of this "
                "command: choose another --out"
            )
    if folder != out.is_dir():
        held, written = ("a file", "a folder") if folder else ("a folder", "a file")
        raise ElectraError(
            f"--overwrite would replace {out}, {held}, with {written}: choose another --out"
        )
    if folder and replaces and not any((out / name).exists() for name in replaces):
        raise ElectraError(
            f"--overwrite replaces only a folder this command wrote, and {out} holds none of "
            f"{', '.join(replaces)}: choose another --out, or remove it yourself"
        )


def _make_parents(out: Path) -> list[Path]:
    """Makes `out`'s missing parent folders; returns those it made, deepest first."""
    missing = [p for p in out.parents if not p.exists()]
    above = next((p for p in out.parents if p.exists()), None)
    if above is not None and not above.is_dir():  # mkdir would say "File exists"
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(above))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(e.errno, e.strerror, e.filename or str(out.parent)) from None
    return missing
