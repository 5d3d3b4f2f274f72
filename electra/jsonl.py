"""JSON Lines, the one way we write them: one JSON object a line, UTF-8 as it is (no `\\u`
escapes). A whole file is written atomically (`write_jsonl`), a log grows a line at a time
(`append_jsonl`), and a stream of records goes to standard output, flushed as it comes, or to a
file that appears only once complete (`jsonl_writer`); `read_jsonl` reads any of them back."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from electra.atomic import atomic_path
from electra.errors import ElectraError


def jsonl_lines(records: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """`records` to `path` through a temporary file renamed into place: readers never see half."""
    with jsonl_writer(path, make_parents=False) as write:
        write(records)


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """One line at the end of `path` (a log read while it grows, as RUN/metrics.jsonl)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(jsonl_lines([record]))


@contextmanager
def jsonl_writer(
    out: str | Path | None, make_parents: bool = True
) -> Iterator[Callable[[Iterable[dict[str, Any]]], None]]:
    """A function writing records, one a line: to standard output, flushed at each call (None),
    or to `out` through a temporary file renamed into place once every record is in (its
    folder made first with `make_parents`)."""
    if out is None:

        def to_stdout(records: Iterable[dict[str, Any]]) -> None:
            sys.stdout.write(jsonl_lines(records))
            sys.stdout.flush()

        yield to_stdout
        return
    out = Path(out)
    if make_parents:
        out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        yield lambda records: f.write(jsonl_lines(records))


def read_jsonl(path: str | Path, empty_ok: bool = False) -> list[dict[str, Any]]:
    """The records of a JSON Lines file, blank lines skipped; a line that is not JSON is an error
    naming it, and so is an empty file unless `empty_ok`."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise ElectraError(f"{path}, line {line_no}: not JSON ({e})") from None
    if not rows and not empty_ok:
        raise ElectraError(f"{path} is empty")
    return rows
