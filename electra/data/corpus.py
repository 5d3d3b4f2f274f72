"""Find corpus files and read them as documents (lists of lines), whatever their format.

Formats, chosen by file name: `*.jsonl` (one JSON object per line, its `text` field is one
document), `*.parquet` and `*.arrow` (a `text` column, one row per document, as the `datasets`
library exports them; read with pyarrow a batch of rows at a time), anything ending in `.gz`
(gunzipped on the fly, e.g. `x.txt.gz`, `x.jsonl.gz`), and plain text where a blank line or the end
of the file ends a document. Plain text that starts
with a `<doc ` line is WikiExtractor output: each `<doc ...>` ... `</doc>` block is a document.

Files are read in binary with a cap on each line's length, so a broken file (invalid UTF-8, a
single line of hundreds of megabytes) is counted in `ReadStats` instead of crashing the run or
exhausting memory.
"""

from __future__ import annotations

import codecs
import glob
import gzip
import json
import sys
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from electra.errors import ElectraError

# A JSONL record must be parsed whole, so its cap is far larger than a text line's; records
# beyond it are skipped (and counted as truncated) rather than held in memory.
MAX_JSONL_RECORD_BYTES = 64 * 1024 * 1024

# Bytes read per call while skipping the rest of an over-long line.
_SKIP_BYTES = 1024 * 1024


@dataclass
class ReadStats:
    """Counts gathered while reading a corpus; `iter_documents` adds to them as it goes."""

    files: int = 0
    documents: int = 0
    lines: int = 0  # physical lines read (JSONL: records), blank ones included
    bad_utf8_lines: int = 0  # decoded with U+FFFD replacement characters
    truncated_lines: int = 0  # cut to max_line_chars (JSONL records over the cap: skipped)
    split_documents: int = 0  # documents over max_document_chars, yielded in several parts


def resolve_paths(specs: Sequence[str]) -> list[Path]:
    """Expand files, folders (recursively, hidden entries skipped) and glob patterns."""
    if isinstance(specs, str | Path):
        specs = [specs]
    found: dict[Path, Path] = {}
    for spec in specs:
        matches = _expand(str(spec))
        if not matches:
            raise ElectraError(
                f"corpus path not found: {spec} matches no file (give an existing file, a folder "
                "of text files or a glob pattern)"
            )
        for path in matches:
            found.setdefault(path.resolve(), path)
    if not found:
        raise ElectraError("no corpus files given: pass at least one file, folder or glob pattern")
    return sorted(found.values())


def _expand(spec: str) -> list[Path]:
    path = Path(spec)
    if path.is_file():
        return [path]
    if path.is_dir():
        # A folder's .json files are metadata (a `datasets` folder's state.json), not text.
        return [
            p
            for p in path.rglob("*")
            if p.is_file()
            and p.suffix != ".json"
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
        ]
    if glob.has_magic(spec):
        return [Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file()]
    return []


def iter_documents(
    paths: Sequence[Path | str],
    stats: ReadStats | None = None,
    max_line_chars: int = 100_000,
    *,
    max_document_chars: int = 10_000_000,
) -> Iterator[list[str]]:
    """Yield each document as a list of non-empty, stripped lines.

    A document longer than `max_document_chars` (e.g. a whole file without blank lines) is
    yielded in consecutive parts so that memory stays bounded.
    """
    stats = stats if stats is not None else ReadStats()
    for path in paths:
        path = Path(path)
        stats.files += 1
        name = path.name[:-3] if path.name.endswith(".gz") else path.name
        try:
            with _open(path) as f:
                if name.endswith(TABLE_SUFFIXES):
                    units = _table_lines(f, path, max_line_chars, stats)
                elif name.endswith(".jsonl"):
                    units = _jsonl_lines(f, path, stats, max_line_chars)
                else:
                    units = _text_lines(f, stats, max_line_chars)
                for doc in _documents(units, stats, max_document_chars):
                    stats.documents += 1
                    yield doc
        except (OSError, EOFError, zlib.error) as e:
            raise ElectraError(f"cannot read corpus file {path}: {e}") from None


TABLE_SUFFIXES = (".parquet", ".arrow")
TABLE_BATCH_ROWS = 1024  # rows read at a time: memory stays bounded whatever the file's size


def _table_batches(f: BinaryIO, path: Path) -> Iterator:
    """Record batches of a Parquet file or an Arrow IPC file or stream (`datasets`' format)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ElectraError(
            f"reading {path} needs pyarrow, a dependency of the package: pip install pyarrow"
        ) from None
    try:
        if path.name.endswith(".parquet"):
            table = pq.ParquetFile(f)
            columns = table.schema_arrow.names
            _check_text_column(path, columns, table.schema_arrow)
            yield from table.iter_batches(batch_size=TABLE_BATCH_ROWS, columns=["text"])
            return
        try:
            reader = pa.ipc.open_stream(f)
        except pa.ArrowInvalid:
            f.seek(0)
            file_reader = pa.ipc.open_file(f)
            _check_text_column(path, file_reader.schema.names, file_reader.schema)
            for i in range(file_reader.num_record_batches):
                yield file_reader.get_batch(i)
            return
        _check_text_column(path, reader.schema.names, reader.schema)
        yield from reader
    except pa.ArrowException as e:
        raise ElectraError(
            f"cannot read {path} as {path.suffix[1:]} ({e}): check the file"
        ) from None


def _check_text_column(path: Path, columns: list[str], schema) -> None:
    import pyarrow as pa

    if "text" not in columns:
        raise ElectraError(
            f"{path} has no 'text' column (it has: {', '.join(columns) or 'none'}): rename the "
            "column that holds the documents to text"
        )
    kind = schema.field("text").type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise ElectraError(f"{path}: column 'text' holds {kind}, not strings")


def _table_lines(
    f: BinaryIO, path: Path, max_line_chars: int, stats: ReadStats
) -> Iterator[str | None]:
    """Lines of each row's text, None after each row: one row is one document."""
    for batch in _table_batches(f, path):
        for text in batch.column(batch.schema.get_field_index("text")).to_pylist():
            stats.lines += 1
            if text is None:
                continue
            yield from _record_lines(text, max_line_chars, stats)


def _record_lines(text: str, max_line_chars: int, stats: ReadStats) -> Iterator[str | None]:
    """A record's text as stripped lines, long ones cut, and None to end its document."""
    for line in text.split("\n"):
        if len(line) > max_line_chars:
            line = line[:max_line_chars]
            stats.truncated_lines += 1
        yield line.strip()
    yield None


def _open(path: Path) -> BinaryIO:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _read_lines(f: BinaryIO, stats: ReadStats, max_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """Yield (raw line without newline, was_cut) reading at most max_bytes + 1 per line."""
    first = True
    while True:
        raw = f.readline(max_bytes + 1)
        if not raw:
            return
        stats.lines += 1
        cut = len(raw) > max_bytes and not raw.endswith(b"\n")
        if cut:
            # Drop the rest of the line piece by piece so it is never held in memory.
            raw = raw[:max_bytes]
            while True:
                rest = f.readline(_SKIP_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
        if first and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        first = False
        yield raw.rstrip(b"\r\n"), cut


def _decode(raw: bytes, cut: bool, stats: ReadStats) -> str:
    # On a cut line the last character may be incomplete: final=False leaves it out silently.
    try:
        return codecs.utf_8_decode(raw, "strict", not cut)[0]
    except UnicodeDecodeError:
        stats.bad_utf8_lines += 1
        return codecs.utf_8_decode(raw, "replace", not cut)[0]


def _text_lines(f: BinaryIO, stats: ReadStats, max_line_chars: int) -> Iterator[str | None]:
    """Lines of plain text; None marks a document end (blank line, `</doc>`, end of file)."""
    lines = _stripped_lines(f, stats, max_line_chars)
    first = next((line for line in lines if line), None)
    if first is None:
        return
    if first.startswith("<doc "):
        yield from _wiki_lines(lines)
        return
    yield first
    for line in lines:
        yield line or None
    yield None


def _stripped_lines(f: BinaryIO, stats: ReadStats, max_line_chars: int) -> Iterator[str]:
    # 4 bytes per character at most in UTF-8, so this many bytes always hold max_line_chars.
    for raw, cut in _read_lines(f, stats, 4 * max_line_chars + 4):
        line = _decode(raw, cut, stats)
        if len(line) > max_line_chars:
            line = line[:max_line_chars]
            cut = True
        if cut:
            stats.truncated_lines += 1
        yield line.strip()


def _wiki_lines(lines: Iterator[str]) -> Iterator[str | None]:
    """WikiExtractor blocks; the caller has already consumed the first `<doc ...>` line."""
    in_doc = True
    expect_title = True
    for line in lines:
        if line.startswith("<doc ") and line.endswith(">"):
            yield None
            in_doc, expect_title = True, True
        elif line == "</doc>":
            yield None
            in_doc = False
        elif expect_title:
            # The line right after <doc ...> repeats the title; it is not article text.
            expect_title = False
        elif in_doc and line:
            yield line
    yield None


def _jsonl_lines(
    f: BinaryIO, path: Path, stats: ReadStats, max_line_chars: int
) -> Iterator[str | None]:
    """Lines of each record's text, None after each record: one record is one document."""
    for number, (raw, cut) in enumerate(_read_lines(f, stats, MAX_JSONL_RECORD_BYTES), 1):
        if cut:
            stats.truncated_lines += 1
            print(
                f"warning: {path} line {number}: JSON record over {MAX_JSONL_RECORD_BYTES} bytes, "
                "skipped",
                file=sys.stderr,
            )
            continue
        if not raw.strip():
            continue
        try:
            record = json.loads(_decode(raw, False, stats))
        except json.JSONDecodeError as e:
            raise ElectraError(
                f"{path} line {number} is not valid JSON ({e.msg}): fix or remove that line"
            ) from None
        text = record.get("text") if isinstance(record, dict) else None
        if not isinstance(text, str):
            raise ElectraError(
                f'{path} line {number} has no string "text" field: each JSONL line must be '
                '{"text": "..."}'
            )
        yield from _record_lines(text, max_line_chars, stats)


def _documents(
    units: Iterator[str | None], stats: ReadStats, max_document_chars: int
) -> Iterator[list[str]]:
    """Group lines into documents at each None; cut documents over max_document_chars."""
    doc: list[str] = []
    chars = 0
    was_split = False
    for line in units:
        if line is None:
            if doc:
                yield doc
            doc, chars, was_split = [], 0, False
        elif line:
            doc.append(line)
            chars += len(line)
            if chars >= max_document_chars:
                stats.split_documents += not was_split
                yield doc
                doc, chars, was_split = [], 0, True
    if doc:
        yield doc
