"""An operating-system error as the one line `electra: error: ...` of the command line: the path
it is about, its cause in the system's words, and what to do about it, by its errno.

Any OSError that no command turned into an `ElectraError` ends here (a read-only or full disk, an
output path under a file, an input the user may not read). The writers leave nothing half-written
whatever the error (`electra.atomic`), so the line need only say how to go on.
"""

from __future__ import annotations

import errno

# What to do, by errno; the ones not named get `OTHER`.
REMEDIES = {
    errno.EACCES: "check the permissions of the file and its folder, or choose another --out",
    errno.EPERM: "check the permissions of the file and its folder, or choose another --out",
    errno.EROFS: "the file system is read-only: choose another --out",
    errno.ENOSPC: "free space and run it again (or choose another --out on a disk with room)",
    errno.EDQUOT: "your disk quota is used up: free space and run it again",
    errno.ENOTDIR: "a part of the path is a file: choose another path",
    errno.EISDIR: "it is a folder where a file was expected: choose a file's path",
    errno.ENOENT: "check the path (a folder on it may have been moved or removed)",
    errno.EEXIST: "something is in the way: remove it or choose another path",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.EMFILE: "too many files open: raise the limit (ulimit -n) and run it again",
    errno.EIO: "the disk failed to read or write: check it, then run it again",
}
OTHER = "check the path and the disk, then run it again"


def os_error_line(e: OSError) -> str:
    """The message of `e` in one line: "PATH: cause: remedy" (both paths of a rename)."""
    paths = [str(p) for p in (e.filename, e.filename2) if p is not None]
    where = " -> ".join(paths)
    # An OSError made with a message only (numpy's short write) has it in args, not strerror.
    cause = e.strerror or (str(e.args[0]) if e.args else "") or type(e).__name__
    remedy = REMEDIES.get(e.errno, OTHER)
    text = f"{where}: {cause}: {remedy}" if where else f"{cause}: {remedy}"
    return " ".join(text.split())  # one line, whatever the cause's text holds
