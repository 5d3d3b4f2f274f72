"""Find corpus files and read them as documents (lists of lines), whatever their format.

Formats, chosen by file name: `*.jsonl` (one JSON object per line, its `text` field is one
document), `*.parquet` and `*.arrow` (a `text` column, one row per document, as the `datasets`
library exports them; read with pyarrow a batch of rows at a time), anything ending in `.gz`
(gunzipped on the fly, e.g. `x.txt.gz`, `x.jsonl.gz`), and plain text where a blank line or the end
of the file ends a document. Plain text that starts
with a `<doc ` line is WikiExtractor output: each `<doc ...>` ... `</doc>` block is a document.

Files are read in binary a bounded piece at a time: a line longer than `max_line_chars` (a whole
book on one line, hundreds of megabytes) is read and yielded in pieces of at most that many
characters, each cut at a whitespace near the limit, so nothing of it is lost and memory stays
bounded; a broken file (invalid UTF-8) is counted in `ReadStats` instead of crashing the run. Only
a JSONL record over `MAX_JSONL_RECORD_BYTES` (it must be parsed whole) is skipped, counted and
named.

A folder is read for its text files: tables (.csv, .tsv), JSON (metadata, such as a `datasets`
folder's state.json) and binary files inside it are skipped and named on stderr, as they are not
prose; given by name, any file is read as text lines.
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

from electra.data.textcut import word_end
from electra.errors import ElectraError

# A line longer than this is read in pieces of at most this many characters, cut at whitespace.
MAX_LINE_CHARS = 100_000
# A JSONL record must be parsed whole, so its cap is far larger than a text line's; records
# beyond it are skipped (counted, and named on stderr) rather than held in memory.
MAX_JSONL_RECORD_BYTES = 64 * 1024 * 1024

# Bytes read per call while skipping the rest of an over-long JSONL record.
_SKIP_BYTES = 1024 * 1024
# Files a folder holds that are not prose: skipped there, named on stderr (see `_expand`).
_TABLE_TEXT = (".csv", ".tsv")
# Formats read in binary (compressed, columnar): never taken for binary junk.
_BINARY_FORMATS = (".gz", ".parquet", ".arrow")
_SNIFF_BYTES = 8192  # a file with a NUL byte in its first this many bytes is binary


@dataclass
class ReadStats:
    """Counts gathered while reading a corpus; `iter_documents` adds to them as it goes."""

    files: int = 0
    documents: int = 0
    lines: int = 0  # physical lines read (JSONL: records), blank ones included
    bad_utf8_lines: int = 0  # decoded with U+FFFD replacement characters
    long_lines: int = 0  # over max_line_chars: read in pieces, nothing lost
    skipped_records: int = 0  # JSONL records over MAX_JSONL_RECORD_BYTES: skipped
    skipped_bytes: int = 0  # and their size
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
        files = [
            p
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        ]
        return _prose_files(files, spec)
    if glob.has_magic(spec):
        return [Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file()]
    return []


def _prose_files(files: list[Path], folder: str) -> list[Path]:
    """The files of a folder that hold text to read; those skipped (tables, JSON metadata,
    binary files) are named in one line on stderr, with what to do to read them. A folder with
    files but none of text is an error saying what it holds."""
    kept, skipped = [], {"table": 0, "json": 0, "binary": 0}
    for p in files:
        kind = _not_prose(p)
        if kind:
            skipped[kind] += 1
        else:
            kept.append(p)
    if not any(skipped.values()):
        return kept
    why = {
        "table": ".csv/.tsv tables: pass them as files to read them as text lines",
        "json": ".json metadata",
        "binary": "binary",
    }
    what = "; ".join(f"{n} {why[k]}" for k, n in skipped.items() if n)
    if not kept:
        raise ElectraError(f"corpus folder {folder} holds no text file to read ({what})")
    print(
        f"note: skipped {len(files) - len(kept)} of {len(files)} files in {folder} ({what})",
        file=sys.stderr,
    )
    return kept


def _not_prose(path: Path) -> str:
    """Why a folder's file is not read as corpus text ("" when it is)."""
    name = path.name.lower()
    name = name[:-3] if name.endswith(".gz") else name
    if name.endswith(_TABLE_TEXT):
        return "table"
    if name.endswith(".json"):  # a `datasets` folder's state.json: metadata, not text
        return "json"
    if path.name.lower().endswith(_BINARY_FORMATS):
        return ""
    try:
        with open(path, "rb") as f:
            return "binary" if b"\0" in f.read(_SNIFF_BYTES) else ""
    except OSError:
        return ""  # unreadable: reading it says so, naming it


def iter_documents(
    paths: Sequence[Path | str],
    stats: ReadStats | None = None,
    max_line_chars: int = MAX_LINE_CHARS,
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
                    units = _text_lines(_stripped_lines(f, stats, max_line_chars))
                for doc in _documents(units, stats, max_document_chars):
                    stats.documents += 1
                    yield doc
        except (OSError, EOFError, zlib.error) as e:
            raise ElectraError(f"cannot read corpus file {path}: {e}") from None


def warn_read(stats: ReadStats, max_line_chars: int = MAX_LINE_CHARS) -> None:
    """What reading the corpus changed or left out, on stderr (`prepare`, `tokenizer train`)."""
    if stats.bad_utf8_lines:
        print(
            f"warning: {stats.bad_utf8_lines:,} corpus lines had invalid UTF-8 (decoded with "
            "U+FFFD)",
            file=sys.stderr,
        )
    if stats.long_lines:
        print(
            f"note: {stats.long_lines:,} corpus lines were longer than {max_line_chars:,} "
            "characters: each was read in pieces cut at a whitespace, nothing dropped",
            file=sys.stderr,
        )
    if stats.skipped_records:
        print(
            f"warning: {stats.skipped_records:,} JSONL records over {MAX_JSONL_RECORD_BYTES:,} "
            f"bytes were skipped ({stats.skipped_bytes:,} bytes): their text is not read, nor "
            "counted",
            file=sys.stderr,
        )


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
    """A record's text as stripped lines, long ones in pieces, and None to end its document."""
    for line in text.split("\n"):
        if len(line) > max_line_chars:
            stats.long_lines += 1
            yield from _nonblank(_pieces(line, max_line_chars))
        else:
            yield line.strip()
    yield None


def _pieces(text: str, limit: int) -> Iterator[str]:
    """`text` in pieces of at most `limit` characters, each cut at a whitespace near its end
    where there is one (`electra.data.textcut.word_end`)."""
    return _pieces_of(iter([text]), limit)


def _nonblank(pieces: Iterator[str]) -> Iterator[str]:
    """The pieces of one long line, stripped; a blank piece is left out (it would end the
    document), unless all are blank: then the line is."""
    blank = True
    for piece in pieces:
        if piece := piece.strip():
            blank = False
            yield piece
    if blank:
        yield ""


def _open(path: Path) -> BinaryIO:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _read_lines(f: BinaryIO, stats: ReadStats, max_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """Yield (raw line without newline, was_cut) reading at most max_bytes + 1 per line; the
    rest of a longer line is skipped piece by piece, and counted (JSONL's records)."""
    first = True
    while True:
        raw = f.readline(max_bytes + 1)
        if not raw:
            return
        stats.lines += 1
        cut = len(raw) > max_bytes and not raw.endswith(b"\n")
        if cut:
            # Drop the rest of the line piece by piece so it is never held in memory.
            skipped = len(raw)
            raw = raw[:max_bytes]
            while True:
                rest = f.readline(_SKIP_BYTES)
                skipped += len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            stats.skipped_bytes += skipped
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


def _text_lines(lines: Iterator[str]) -> Iterator[str | None]:
    """Lines of plain text; None marks a document end (blank line, `</doc>`, end of file)."""
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
    """Each line stripped; a line over `max_line_chars` as several, its pieces (`_pieces`), read
    a bounded block at a time."""
    # 4 bytes per character at most in UTF-8, so this many bytes always hold max_line_chars.
    size = 4 * max_line_chars + 4
    first = True
    while raw := f.readline(size):
        stats.lines += 1
        if first and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        first = False
        whole = raw.endswith(b"\n") or len(raw) < size
        text, used, bad = _decode_piece(raw, whole)
        if whole and len(text.rstrip("\r\n")) <= max_line_chars:
            stats.bad_utf8_lines += bad
            yield text.strip()
            continue
        stats.long_lines += 1
        blocks = _line_blocks(f, text, raw[used:], whole, size, bad, stats)
        yield from _nonblank(_pieces_of(blocks, max_line_chars))


def _decode_piece(raw: bytes, final: bool) -> tuple[str, int, bool]:
    """`raw` decoded, how many of its bytes (a partial character at its end is left for the
    next block unless `final`), and whether it held invalid UTF-8 (replaced with U+FFFD)."""
    try:
        text, used = codecs.utf_8_decode(raw, "strict", final)
        return text, used, False
    except UnicodeDecodeError:
        text, used = codecs.utf_8_decode(raw, "replace", final)
        return text, used, True


def _line_blocks(
    f: BinaryIO,
    text: str,
    left: bytes,
    whole: bool,
    size: int,
    bad: bool,
    stats: ReadStats,
) -> Iterator[str]:
    """The decoded blocks of one long line, its first (`text`, with the `left` bytes of a
    character it cut) already read; the rest read `size` bytes at a time. The line counts once
    as bad UTF-8 if any block was."""
    yield text
    while not whole:
        more = f.readline(size)
        raw, whole = left + more, more.endswith(b"\n") or len(more) < size
        text, used, worse = _decode_piece(raw, whole)
        left, bad = raw[used:], bad or worse
        yield text
    stats.bad_utf8_lines += bad


def _pieces_of(blocks: Iterator[str], limit: int) -> Iterator[str]:
    """The text of `blocks` in pieces of at most `limit` characters (`_pieces`), holding no
    more than a piece and a block at a time."""
    text = ""
    for block in blocks:
        text += block
        while len(text) > limit:
            cut = word_end(text, limit) or limit
            yield text[:cut]
            text = text[cut:]
    yield text


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
            stats.skipped_records += 1
            print(
                f"warning: {path} line {number}: JSON record over {MAX_JSONL_RECORD_BYTES:,} "
                "bytes, skipped (its text is not in the counts): split it into several records",
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
