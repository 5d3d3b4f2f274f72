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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ElectraError(
                f"run folder {self.path.parent} is in use by {holder}: wait for it to finish, "
                "stop it, or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock; the file stays, harmless
            self.fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
