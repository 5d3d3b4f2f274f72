"""One writer per run folder: RUN/.lock, held with an advisory `flock` and holding the pid.

The kernel releases the lock when its holder dies, however it dies, so a run killed with SIGKILL
never leaves a stale lock behind, and a restarted or resumed run takes it at once.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

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
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
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
