"""The user's own data files: CSV, TSV, JSON Lines and Parquet read as rows of named columns, and
the split files (train, dev, test) found in a folder or given one by one.

The extension decides the format. CSV follows RFC 4180 (fields with commas, quotes or newlines are
quoted); its separator is the one of `,` `;` TAB `|` that its header holds most often (Excel writes
`;` in many locales), or the one `--delimiter` names. TSV is read with quoting off, as GLUE's files
are, since their text holds bare `"`; both need a header row. JSON Lines (`.jsonl`, or `.json` holding one object per line) names its fields
in each object. Parquet is read with pyarrow. Every row keeps where it came from (a CSV/TSV/JSONL
line, a Parquet row) so that an error can name it.
"""

from __future__ import annotations

import collections
import csv
import json
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.errors import ElectraError
from electra.tasks.base import utf8_text
from electra.tasks.splits import given_file

FORMATS = {
    ".csv": "CSV",
    ".tsv": "TSV",
    ".jsonl": "JSON Lines",
    ".json": "JSON Lines",
    ".parquet": "Parquet",
}
KNOWN = ".csv, .tsv, .jsonl (or .json, one object per line) or .parquet"
DELIMITERS = {",": "comma", ";": "semicolon", "\t": "TAB", "|": "pipe"}  # sniffed in a CSV header


@contextmanager
def long_fields() -> Iterator[None]:
    """The csv module's field limit lifted while a table is read: it refuses a field over
    128 KiB by default, and a long text is the tokenizer's to cut to the model's length (as
    every text is), not a reason to refuse the file. The limit is the process's, so it is put
    back after (a caller's own csv reading keeps its own). 2**31 - 1 fits the C long the limit
    is on every platform."""
    before = csv.field_size_limit(2**31 - 1)
    try:
        yield
    finally:
        csv.field_size_limit(before)


@dataclass
class Table:
    """A file's rows, each with its line (or Parquet row) number and its values by column; rows
    with no value at all are not among them but counted in `blank`, by position."""

    path: Path
    columns: list[str]
    rows: list[tuple[int, dict[str, Any]]]
    unit: str = "line"  # what a row's number counts: "line" (text formats) or "row" (Parquet)
    header: str = ""  # where the column names are, for errors about a missing column
    # (position among all the file's rows, from 0; its number) of each blank row
    blank: list[tuple[int, int]] = field(default_factory=list)

    def positions(self) -> list[int]:
        """Each row's position among all rows, blank ones included: what an input's id is."""
        blank = {p for p, _ in self.blank}
        found, position = [], 0
        for _ in self.rows:
            while position in blank:
                position += 1
            found.append(position)
            position += 1
        return found

    def note_blank(self) -> None:
        """Says on stderr how many blank rows were left out, and where the first is."""
        if self.blank:
            first = self.blank[0][1]
            print(
                f"warning: {self.path}: {len(self.blank)} blank row{'s' * (len(self.blank) > 1)}"
                f" left out (the first at {self.unit} {first})",
                file=sys.stderr,
            )

    def where(self, number: int, column: str | None = None) -> str:
        place = f"{self.path}, {self.unit} {number}"
        return f"{place}, column {column!r}" if column else place

    def require(self, column: str, flag: str) -> None:
        """A missing column is one error listing the columns present and the flag that names it."""
        if column not in self.columns:
            present = ", ".join(map(repr, self.columns))[:200] or "none"
            one = self.columns[0] if len(self.columns) == 1 else ""
            if sep := next((d for d in DELIMITERS if d in one), None):
                hint = f"the header is one column: are its fields separated by '{sep}'? pass "
                flag = f"--delimiter '{sep}'" if sep != "\t" else "--delimiter tab"
                raise ElectraError(f"{self.header}: no column {column!r} ({hint}{flag})")
            raise ElectraError(
                f"{self.header}: no column {column!r} (columns: {present}): rename it or pass "
                f"{flag} NAME"
            )


def read_table(path: str | Path, delimiter: str | None = None) -> Table:
    """Rows of a CSV, TSV, JSON Lines or Parquet file; an error for anything else or no rows.
    `delimiter` forces a CSV's (or TSV's) field separator instead of sniffing it."""
    path = Path(path)
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        shown = f"{path.suffix!r}" if path.suffix else "no extension"
        raise ElectraError(f"{path}: unknown data format ({shown}): name the file {KNOWN}")
    if not path.is_file():
        raise ElectraError(f"data file not found: {path}")
    with utf8_text(path), long_fields():
        if kind == "Parquet":
            table = _read_parquet(path)
        elif kind == "JSON Lines":
            table = _read_jsonl(path)
        else:
            table = _read_delimited(path, delimiter or _delimiter(path, kind))
    if not table.rows:
        raise ElectraError(f"{path} has no rows: expected a header and one example per row")
    return table


def _delimiter(path: Path, kind: str, quiet: bool = False) -> str:
    """TAB for a TSV; for a CSV the candidate its header line holds most often outside quotes
    (a comma when none, or on a tie), said on stderr when it is not a comma."""
    if kind == "TSV":
        return "\t"
    with open(path, encoding="utf-8-sig", newline="") as f:
        header = f.readline()
    counts = {d: 0 for d in DELIMITERS}
    quoted = False
    for char in header:
        quoted = quoted != (char == '"')
        if not quoted and char in counts:
            counts[char] += 1
    best = max(counts, key=lambda d: (counts[d], d == ","))
    if counts[best] and best != "," and not quiet:
        print(
            f"{path}: fields separated by {DELIMITERS[best]}s ('{best}'), as its header has them "
            "(--delimiter chooses another)",
            file=sys.stderr,
        )
    return best if counts[best] else ","


def _read_delimited(path: Path, delimiter: str) -> Table:
    # TSV has no quoting (a tab or newline cannot be in a field); CSV quotes as RFC 4180 says.
    tsv = delimiter == "\t" and path.suffix.lower() == ".tsv"
    quoting = csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        try:
            header = [name.strip() for name in next(reader, [])]
            _check_header(path, header)
            rows, blank, start = [], [], reader.line_num + 1
            for record in reader:  # a quoted field may span lines: a row is named by its first
                if not any(cell.strip() for cell in record):
                    blank.append((len(rows) + len(blank), start))
                else:
                    if len(record) != len(header):
                        raise ElectraError(
                            f"{path}, line {start}: {len(record)} fields, the header has "
                            f"{len(header)}: {_field_hint(delimiter, tsv, record)}"
                        )
                    rows.append((start, dict(zip(header, record, strict=True))))
                start = reader.line_num + 1
        except csv.Error as e:
            raise ElectraError(f"{path}, line {reader.line_num}: {e}") from None
    return Table(
        path, header, rows, header=f"{path}, line 1 (the header)", blank=_inner(blank, len(rows))
    )


def _inner(blank: list[tuple[int, int]], rows: int) -> list[tuple[int, int]]:
    """The blank rows before the last of `rows` rows: those after it end the file, no input."""
    while blank and blank[-1][0] >= rows + len(blank) - 1:
        blank.pop()
    return blank


def _check_header(path: Path, header: list[str]) -> None:
    if not header:
        raise ElectraError(f"{path} is empty: expected a header row and one example per row")
    if not any(header):
        raise ElectraError(f"{path}, line 1: no header: the first row names the columns")
    twice = sorted(n for n, count in collections.Counter(header).items() if count > 1)
    if twice:
        raise ElectraError(f"{path}, line 1: the header names {twice[0]!r} twice: rename one")


def _field_hint(delimiter: str, tsv: bool, record: list[str]) -> str:
    if tsv and any(cell.startswith('"') for cell in record):
        return (
            "a field opens with a quote: a quoted line break (as pandas writes a text that holds "
            "one) splits a row in a TSV, which is read without quoting: take the line breaks out "
            "of the texts, or save the file as .csv, where quoted line breaks are kept"
        )
    if tsv:
        return "a TSV field cannot hold a tab (is this a CSV file? name it .csv)"
    name = DELIMITERS.get(delimiter, repr(delimiter))
    return (
        f"fields are separated by {name}s ('{delimiter}'): quote fields that hold one "
        f'("a{delimiter} b"), or pass --delimiter to name the separator'
    )


def _read_jsonl(path: Path) -> Table:
    rows, columns, blank = [], {}, []
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                blank.append((len(rows) + len(blank), number))
                continue
            try:
                value = json.loads(line)
            except ValueError as e:
                raise ElectraError(f"{path}, line {number}: not JSON ({e})") from None
            if not isinstance(value, dict):
                raise ElectraError(
                    f"{path}, line {number}: expected one JSON object per line (JSON Lines), "
                    f"found {type(value).__name__}"
                )
            columns.update(dict.fromkeys(value))  # every field any row has, in first-seen order
            rows.append((number, value))
    first = rows[0][0] if rows else 1
    return Table(
        path, list(columns), rows, header=f"{path}, line {first}", blank=_inner(blank, len(rows))
    )


def _read_parquet(path: Path) -> Table:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ElectraError(f"reading {path} needs pyarrow: pip install pyarrow") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises its own types (ArrowInvalid, OSError) for a bad file
        raise ElectraError(f"{path}: not a readable Parquet file ({e})") from None
    rows = list(enumerate(table.to_pylist(), start=1))
    return Table(path, list(table.column_names), rows, unit="row", header=f"{path} (its schema)")


# --- the split files --------------------------------------------------------------------------


def split_file(data: Path | Mapping[str, str | Path], split: str, task: str) -> Path | str:
    """The file of `split` (`Task.locate` for the user's files): `data[split]` for a mapping,
    `data` itself when it is a file, else the one `split.*` of a known format in the folder; or
    why there is none. Two formats of one split, or one of an unknown format, are errors."""
    if isinstance(data, Mapping):
        if data.get(split):
            return given_file(data[split], split)
        return f"no {split} file for {task}: pass --{split} FILE"
    data = Path(data)
    if data.is_file():
        return data
    named = sorted(p for p in data.iterdir() if p.is_file() and p.name.split(".")[0] == split)
    known = [p for p in named if p.suffix.lower() in FORMATS and p.stem == split]
    if len(known) > 1:
        raise ElectraError(
            f"{data} holds {split} files in {len(known)} formats ({', '.join(p.name for p in known)})"
            ": keep one, or pass the files with --train/--dev/--test"
        )
    if known:
        return known[0]
    if named:  # e.g. train.txt: say which name would be read rather than "no train file"
        read_table(named[0])  # raises the unknown-format error naming the file
    return (
        f"no {split} file for {task} in {data}: expected {split}.csv, {split}.tsv, "
        f"{split}.jsonl or {split}.parquet (or pass --{split} FILE)"
    )


def header_columns(path: Path, delimiter: str | None = None) -> list[str]:
    """The column names `read_table` finds in a file, without its note on stderr: from a CSV's or
    TSV's header line (its separator sniffed quietly), else from the file read whole."""
    kind = FORMATS.get(path.suffix.lower())
    if kind not in ("CSV", "TSV"):
        return read_table(path, delimiter).columns
    delimiter = delimiter or _delimiter(path, kind, quiet=True)
    quoting = csv.QUOTE_NONE if delimiter == "\t" and kind == "TSV" else csv.QUOTE_MINIMAL
    with open(path, encoding="utf-8-sig", newline="") as f, long_fields():
        return [name.strip() for name in next(csv.reader(f, delimiter=delimiter, quoting=quoting))]
