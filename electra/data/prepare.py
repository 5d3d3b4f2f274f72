"""`prepare`: a corpus and a tokenizer into packed pretraining examples, written as shards in
parallel, with what was read, kept and dropped counted."""

from __future__ import annotations

import glob
import itertools
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from electra.atomic import atomic_dir
from electra.data.builders import CarryingBuilder, ExampleBuilder
from electra.data.corpus import MAX_LINE_CHARS, ReadStats, iter_documents, resolve_paths, warn_read
from electra.data.documents import DocumentPacker, frame_rows
from electra.data.specials import Framing, SpecialIds, check_distinct, framing
from electra.data.store import (
    CHECKSUM,
    FORMAT,
    MAX_SEQ_LEN,
    MIN_SEQ_LEN,
    check_int,
    file_sha256,
)
from electra.data.tokenizer import (
    continuation_ids,
    fingerprint,
    load_tokenizer,
    lowercases,
    save_tokenizer,
    tokenizer_special_ids,
)
from electra.errors import ElectraError
from electra.locks import claim_output

# Chunks of consecutive documents are the unit of parallel work and of RNG seeding. Their
# limits are constants, so chunk boundaries, and thus the output, never depend on worker count.
CHUNK_DOCS = 2000
CHUNK_CHARS = 2_000_000
# Longer documents are packed in parts, so one chunk always fits in memory.
MAX_DOCUMENT_CHARS = 10_000_000
DROP_WARNING = 0.01  # warn when more than this share of the corpus's tokens is dropped

# The builders live in their own module; `prepare` and its tests name them from here.
__all__ = ["CarryingBuilder", "ExampleBuilder", "prepare"]


PACKINGS = ("carry", "official", "documents")


@dataclass(frozen=True)
class _PackSettings:
    seq_len: int
    seed: int
    framing: Framing
    pad: int
    dtype: str
    packing: str
    continuation: frozenset[int]

    def builder(self, index: int) -> ExampleBuilder | DocumentPacker:
        if self.packing == "documents":
            return DocumentPacker(self.seq_len, self.continuation, self.framing.single_extra)
        rng = random.Random(f"{self.seed}-{index}")
        extra = (self.framing.single_extra, self.framing.pair_extra)
        if self.packing == "official":
            return ExampleBuilder(self.seq_len, rng, *extra)
        return CarryingBuilder(self.seq_len, rng, self.continuation, *extra)


_COUNTS = ("single_segment", "random_target", "tokens_read", "tokens_kept", "pieces")


@dataclass
class _Chunk:
    ids: np.ndarray  # [n, seq_len]
    lengths: np.ndarray  # [n, 2] int16: len([CLS] A [SEP]), real length
    counts: dict[str, int]  # the builder's _COUNTS
    documents: np.ndarray | None = None  # [n, seq_len] uint16 document numbers (packing documents)


def _pack_chunk(tok: Tokenizer, index: int, docs: list[list[str]], s: _PackSettings) -> _Chunk:
    """Tokenize and pack one chunk of documents with its own seeded RNG."""
    builder = s.builder(index)
    lines = [line for doc in docs for line in doc]
    encodings = tok.encode_batch_fast(lines, add_special_tokens=False)
    examples = []
    start = 0
    for doc in docs:
        for encoding in encodings[start : start + len(doc)]:
            examples += builder.add_line(encoding.ids)
        start += len(doc)
        examples += builder.end_document()
    counts = {name: getattr(builder, name, 0) for name in _COUNTS}
    if isinstance(builder, DocumentPacker):
        before, after = s.framing.single
        rows = examples + builder.finish()
        ids, lengths, documents = frame_rows(rows, before, after, s.seq_len, s.pad, s.dtype)
        return _Chunk(ids, lengths, counts, documents)

    ids = np.full((len(examples), s.seq_len), s.pad, dtype=s.dtype)
    lengths = np.empty((len(examples), 2), dtype=np.int16)
    for row, (first, second) in enumerate(examples):
        tokens, type0 = _frame(s.framing, first, second)
        lengths[row] = type0, len(tokens)
        ids[row, : len(tokens)] = tokens
    return _Chunk(ids, lengths, counts)


def _frame(f: Framing, first: list[int], second: list[int]) -> tuple[list[int], int]:
    """A row framed as the tokenizer frames it ([CLS] A [SEP] B [SEP] for BERT), and how many
    of its tokens are type 0 (those up to B when the tokenizer types B 1, else all)."""
    if not second:
        before, after = f.single
        tokens = [*before, *first, *after]
        return tokens, len(tokens)
    before, between, after = f.pair
    tokens = [*before, *first, *between, *second, *after]
    if f.pair_type0_extra is None:
        return tokens, len(tokens)
    return tokens, len(first) + f.pair_type0_extra


_worker_state: tuple[Tokenizer, _PackSettings] | None = None


def _init_worker(tokenizer_json: str, settings: _PackSettings, parent: int) -> None:
    global _worker_state
    # The pool is the parallelism; a Rust thread pool in each worker would only compete.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # Ctrl-C is handled by the parent, which terminates the pool and cleans up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent(parent)
    _worker_state = (Tokenizer.from_str(tokenizer_json), settings)


def _end_with_parent(parent: int) -> None:
    """A worker whose parent is killed ends at once and quietly, rather than finishing its chunk
    and printing a BrokenPipeError traceback as it sends the result to no one: on Linux the
    kernel sends it SIGTERM (whose default ends it without a word) when the parent dies;
    elsewhere a thread watches for the parent's end."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGTERM, 0, 0, 0) == 0:  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # it died before the call took effect
                os._exit(0)
            return
    except (OSError, AttributeError):
        pass
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _pack_in_worker(index: int, docs: list[list[str]]) -> _Chunk:
    assert _worker_state is not None
    tok, settings = _worker_state
    return _pack_chunk(tok, index, docs, settings)


def _chunks(docs: Iterable[list[str]]) -> Iterator[list[list[str]]]:
    chunk: list[list[str]] = []
    chars = 0
    for doc in docs:
        chunk.append(doc)
        chars += sum(map(len, doc))
        if len(chunk) >= CHUNK_DOCS or chars >= CHUNK_CHARS:
            yield chunk
            chunk, chars = [], 0
    if chunk:
        yield chunk


def _pack_all(
    chunks: Iterable[list[list[str]]],
    tok: Tokenizer,
    settings: _PackSettings,
    workers: int,
    consume: Callable[[_Chunk], None],
) -> None:
    """Pack every chunk, handing results to `consume` in chunk order."""
    chunks = iter(chunks)
    head = list(itertools.islice(chunks, 2))
    chunks = itertools.chain(head, chunks)
    # A corpus of one chunk is not worth starting worker processes for.
    if workers == 1 or len(head) < 2:
        for index, chunk in enumerate(chunks):
            consume(_pack_chunk(tok, index, chunk, settings))
        return
    # spawn: forking a process that may hold threads (torch, tokenizers) can deadlock.
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers, _init_worker, (tok.to_str(), settings, os.getpid())) as pool:
        pending: deque = deque()
        for index, chunk in enumerate(chunks):
            pending.append(pool.apply_async(_pack_in_worker, (index, chunk)))
            # A small window of chunks in flight keeps memory bounded on any corpus size.
            if len(pending) >= 2 * workers:
                consume(pending.popleft().get())
        while pending:
            consume(pending.popleft().get())


class _ShardWriter:
    """Collects packed rows and writes them out as shards of `shard_size` examples."""

    def __init__(self, folder: Path, seq_len: int, shard_size: int, dtype: str, documents: bool):
        self.folder = folder
        self.shard_size = shard_size
        self.ids = [np.empty((0, seq_len), dtype=dtype)]
        self.lengths = [np.empty((0, 2), dtype=np.int16)]
        # Document numbers, where rows pack several documents (packing documents).
        self.documents = [np.empty((0, seq_len), dtype=np.uint16)] if documents else None
        self.buffered = 0
        self.shards: list[dict] = []
        self.num_examples = 0
        self.num_tokens = 0
        self.counts = dict.fromkeys(_COUNTS, 0)

    def add(self, chunk: _Chunk) -> None:
        self.ids.append(chunk.ids)
        self.lengths.append(chunk.lengths)
        if self.documents is not None:
            self.documents.append(chunk.documents)
        self.buffered += len(chunk.ids)
        for name, count in chunk.counts.items():
            self.counts[name] += count
        while self.buffered >= self.shard_size:
            self._write(self.shard_size)

    def close(self) -> None:
        if self.buffered:
            self._write(self.buffered)

    def _write(self, n: int) -> None:
        ids = np.concatenate(self.ids)
        lengths = np.concatenate(self.lengths)
        name = f"shard_{len(self.shards):05d}"
        np.save(self.folder / f"{name}.npy", ids[:n])
        np.save(self.folder / f"{name}.len.npy", lengths[:n])
        shard = {"ids": f"{name}.npy", "lengths": f"{name}.len.npy", "num_examples": n}
        if self.documents is not None:
            documents = np.concatenate(self.documents)
            np.save(self.folder / f"{name}.doc.npy", documents[:n])
            shard["documents"] = f"{name}.doc.npy"
            self.documents = [documents[n:]]
        # Read back from the page cache: the digest is of the bytes on disk, checked at open.
        shard[CHECKSUM] = {
            role: file_sha256(self.folder / shard[role])
            for role in ("ids", "lengths", "documents")
            if role in shard
        }
        self.shards.append(shard)
        self.num_examples += n
        self.num_tokens += int(lengths[:n, 1].sum(dtype=np.int64))
        self.ids, self.lengths = [ids[n:]], [lengths[n:]]
        self.buffered -= n


def prepare(
    corpus: Sequence[str],
    tokenizer_path: Path | str,
    seq_len: int,
    out_dir: Path | str,
    *,
    seed: int = 12345,
    shard_size: int = 65536,
    workers: int | None = None,
    overwrite: bool = False,
    packing: str = "carry",
) -> dict:
    """Tokenize and pack `corpus` into the data folder `out_dir`; returns a summary dict.

    The output is byte-identical for the same inputs and seed, whatever `workers` is. The
    folder appears only when complete: work happens in a temporary sibling folder that is
    removed on any error. Worker processes are spawned, so a script calling this with
    workers > 1 needs the usual `if __name__ == "__main__":` guard.
    """
    if isinstance(corpus, str | Path):
        corpus = [str(corpus)]
    workers = _check_prepare_args(seq_len, shard_size, seed, workers, packing)
    out_dir = Path(out_dir)
    _check_out_dir(out_dir, overwrite)
    paths = resolve_paths(corpus)
    tok = load_tokenizer(tokenizer_path)
    # A tokenizer without the tokens a run needs is refused here, before anything is written.
    special = tokenizer_special_ids(tokenizer_path, tok)
    check_distinct(tok, special, str(tokenizer_path))
    settings = _pack_settings(tok, special, seq_len, seed, packing, str(tokenizer_path))

    stats = ReadStats()
    # One writer per folder (a second `prepare` into it is refused), the existing one kept
    # unless `overwrite`: checked again under the lock (`claim_output`).
    reads = [*corpus, tokenizer_path]
    claim = claim_output(out_dir, overwrite, reads=reads, replaces=("meta.json",))
    with claim, atomic_dir(out_dir, tag=_temporary_tag(out_dir)) as tmp:
        writer = _pack_corpus(tmp, paths, tok, settings, shard_size, workers, stats)
        meta = _meta(tok, special, settings, writer, stats, corpus)
        save_tokenizer(tok, tmp / "tokenizer", lowercase=lowercases(tok), special=special)
        (tmp / "meta.json").write_text(
            json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )

    _warn_losses(stats, meta["text_tokens"], packing)
    return {
        "out_dir": str(out_dir),
        "examples": writer.num_examples,
        "tokens": writer.num_tokens,
        "shards": len(writer.shards),
        "files": stats.files,
        "documents": stats.documents,
        "bad_utf8_lines": stats.bad_utf8_lines,
        "long_lines": stats.long_lines,
        "skipped_records": stats.skipped_records,
        "text_tokens": meta["text_tokens"],
        "documents_per_row": meta["builder"].get("documents_per_row"),
    }


def _temporary_tag(out_dir: Path) -> str:
    """The tag of this prepare's temporary folder beside `out_dir`, once the folders that killed
    prepares into it left there are removed (said on stderr). Called holding the output's lock,
    so no other prepare is writing one."""
    for stale in sorted(out_dir.parent.glob(f".{glob.escape(out_dir.name)}.tmp-*")):
        if stale.is_dir() and stale.name != f".{out_dir.name}.tmp-{os.getpid()}":
            shutil.rmtree(stale, ignore_errors=True)
            print(
                f"note: removed {stale}, the unfinished output of an earlier prepare that was "
                "stopped",
                file=sys.stderr,
            )
    return f"tmp-{os.getpid()}"


def _check_prepare_args(
    seq_len: int, shard_size: int, seed: int, workers: int | None, packing: str
) -> int:
    """Checks `prepare`'s numbers and packing; returns the worker count (None: all cores)."""
    check_int(
        "seq_len",
        seq_len,
        MIN_SEQ_LEN,
        MAX_SEQ_LEN,
        ": ELECTRA uses 128 (small) or 512 (base, large); the modern family reads up to 8192",
    )
    check_int("shard_size", shard_size, 1, None)
    check_int("seed", seed, None, None)
    if workers is None:
        workers = os.cpu_count() or 1
    check_int("workers", workers, 1, None)
    if packing not in PACKINGS:
        raise ElectraError(f"packing must be one of {', '.join(PACKINGS)}, got {packing!r}")
    return workers


def _pack_settings(
    tok: Tokenizer, special: SpecialIds, seq_len: int, seed: int, packing: str, source: str
) -> _PackSettings:
    """The builder's settings for `tok`: its framing and pad id, and the smallest dtype its ids
    fit. A tokenizer whose post-processor frames nothing is given a [CLS] $A [SEP] template."""
    frame = framing(tok, special, source)
    if seq_len < frame.pair_extra + 2:
        raise ElectraError(
            f"seq_len {seq_len} leaves no room for text: the tokenizer frames a pair with "
            f"{frame.pair_extra} special tokens; pass a larger --seq-len"
        )
    return _PackSettings(
        seq_len,
        seed,
        frame,
        special.pad,
        _ids_dtype(tok),
        packing,
        continuation_ids(tok),
    )


def _ids_dtype(tok: Tokenizer) -> str:
    return "uint16" if tok.get_vocab_size(with_added_tokens=True) <= 65535 else "int32"


def _pack_corpus(
    folder: Path,
    paths: list[Path],
    tok: Tokenizer,
    settings: _PackSettings,
    shard_size: int,
    workers: int,
    stats: ReadStats,
) -> _ShardWriter:
    """Packs the documents of `paths` into shards in `folder`, counting what is read in `stats`;
    an error when no example came out."""
    documents = settings.packing == "documents"
    writer = _ShardWriter(folder, settings.seq_len, shard_size, settings.dtype, documents)
    docs = iter_documents(paths, stats, max_document_chars=MAX_DOCUMENT_CHARS)
    _pack_all(_chunks(docs), tok, settings, workers, writer.add)
    writer.close()
    if writer.num_examples == 0:
        raise ElectraError(
            f"no text found in the corpus ({stats.files} files read): check the paths "
            "and that the files hold text"
        )
    return writer


def _meta(
    tok: Tokenizer,
    special: SpecialIds,
    settings: _PackSettings,
    writer: _ShardWriter,
    stats: ReadStats,
    corpus: Sequence[str],
) -> dict:
    """The data folder's meta.json: its format, shards, tokenizer and how it was built."""
    builder = {
        "packing": settings.packing,
        "chunk_docs": CHUNK_DOCS,
        "chunk_chars": CHUNK_CHARS,
        "single_segment": writer.counts["single_segment"],
        "random_target": writer.counts["random_target"],
    }
    if settings.packing == "documents":
        builder["documents_per_row"] = round(writer.counts["pieces"] / writer.num_examples, 3)
    return {
        "format": FORMAT,
        "seq_len": settings.seq_len,
        "num_examples": writer.num_examples,
        "num_tokens": writer.num_tokens,
        "shards": writer.shards,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "tokenizer": "tokenizer",
        "tokenizer_fingerprint": fingerprint(tok),
        "special_ids": asdict(special),
        "dtype": settings.dtype,
        "seed": settings.seed,
        "corpus": [str(spec) for spec in corpus],
        "read_stats": asdict(stats),
        "text_tokens": _text_tokens(writer.counts),
        "builder": builder,
    }


def _text_tokens(counts: dict[str, int]) -> dict[str, int]:
    """The corpus's word pieces (specials left out): read from the text, kept in the shards."""
    read, kept = counts["tokens_read"], counts["tokens_kept"]
    return {"read": read, "kept": kept, "dropped": read - kept}


def _warn_losses(stats: ReadStats, tokens: dict[str, int], packing: str) -> None:
    warn_read(stats, MAX_LINE_CHARS)
    if tokens["dropped"] > DROP_WARNING * tokens["read"]:
        why = (
            "the official packing cuts each example at the target length and discards the rest; "
            "the default --packing carry keeps it"
            if packing == "official"
            else f"packing {packing}"
        )
        print(
            f"warning: {tokens['dropped']:,} of the corpus's {tokens['read']:,} tokens "
            f"({tokens['dropped'] / tokens['read']:.1%}) did not reach the shards: {why}",
            file=sys.stderr,
        )


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    if not out_dir.exists():
        return
    if not overwrite:
        raise ElectraError(
            f"output folder {out_dir} already exists: pass --overwrite to replace it, "
            "or choose another folder"
        )
    # Never delete something that is not a data folder (a typo could point at $HOME).
    if not out_dir.is_dir() or not (
        (out_dir / "meta.json").is_file() or not any(out_dir.iterdir())
    ):
        raise ElectraError(
            f"{out_dir} exists and is not an electra data folder: remove it yourself or choose "
            "another output folder"
        )
