"""`prepare`: a corpus and a tokenizer into packed pretraining examples, written as shards in
parallel, with what was read, kept and dropped counted."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import random
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from electra.atomic import atomic_dir
from electra.data.corpus import ReadStats, iter_documents, resolve_paths
from electra.data.documents import DocumentPacker, frame_rows
from electra.data.specials import Framing, SpecialIds, check_distinct, framing
from electra.data.store import (
    FORMAT,
    MAX_SEQ_LEN,
    MIN_SEQ_LEN,
    check_int,
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

# Chunks of consecutive documents are the unit of parallel work and of RNG seeding. Their
# limits are constants, so chunk boundaries, and thus the output, never depend on worker count.
CHUNK_DOCS = 2000
CHUNK_CHARS = 2_000_000
# Longer documents are packed in parts, so one chunk always fits in memory.
MAX_DOCUMENT_CHARS = 10_000_000
DROP_WARNING = 0.01  # warn when more than this share of the corpus's tokens is dropped

Example = tuple[list[int], list[int]]  # (segment A, segment B) token ids, no specials


class ExampleBuilder:
    """Packs the token ids of a document's lines into examples by the official ELECTRA rules.

    This is `prepare --packing official`: bit-for-bit the official builder, which cuts an example
    at the target length and discards what overflows (a third of paragraph-per-line text).
    `single_extra` and `pair_extra` are the ids the tokenizer frames one and two segments with
    (BERT's 2 and 3; RoBERTa's pair has 4).
    """

    def __init__(
        self, max_len: int, rng: random.Random, single_extra: int = 2, pair_extra: int = 3
    ):
        self.max_len = max_len
        self.single_extra = single_extra
        self.pair_extra = pair_extra
        self.rng = rng
        self.target = max_len
        self.lines: list[list[int]] = []
        self.length = 0
        self.single_segment = 0  # examples whose 10% coin made them one segment
        self.random_target = 0  # examples built with a randint(5, max_len) target length
        self.tokens_read = 0
        self.tokens_kept = 0

    def add_line(self, ids: list[int]) -> list[Example]:
        """Add one line; returns the example it completes, if any."""
        if not ids:
            return []
        self.tokens_read += len(ids)
        self.lines.append(ids)
        self.length += len(ids)
        if self.length >= self.target:
            return [self._create()]
        return []

    def end_document(self) -> list[Example]:
        """Examples never cross documents: flush whatever has accumulated."""
        return [self._create()] if self.length else []

    def _create(self) -> Example:
        if self.rng.random() < 0.1:
            first_target = 100_000
            self.single_segment += 1
        else:
            first_target = (self.target - self.pair_extra) // 2  # less [CLS] and two [SEP]
        first: list[int] = []
        second: list[int] = []
        for ids in self.lines:
            # Same short-circuit order as the official code, so the 0.5 coin is drawn only
            # when reached and the random stream matches it.
            if (
                not first
                or len(first) + len(ids) < first_target
                or (not second and len(first) < first_target and self.rng.random() < 0.5)
            ):
                first += ids
            else:
                second += ids
        first = first[: self.max_len - self.single_extra]
        second = second[: max(0, self.max_len - len(first) - self.pair_extra)]
        self.tokens_kept += len(first) + len(second)
        self._next_example()
        return first, second

    def _next_example(self) -> None:
        """Counts the example just built and draws the next one's target length."""
        self.random_target += self.target != self.max_len
        self.lines, self.length = [], 0
        if self.rng.random() < 0.05:
            self.target = self.rng.randint(5, self.max_len)
        else:
            self.target = self.max_len


class CarryingBuilder(ExampleBuilder):
    """The default packing (`prepare --packing carry`): the official builder's target lengths,
    10% single-segment and 5% random-length examples, and document boundaries, but nothing is
    discarded. A line that does not fit the current example is cut at a word start and its rest
    opens the next example of the same document; segment B starts at the line boundary nearest
    the official A length, or at a word start when no line boundary is near (a long line).

    A departure from the official code (docs: faithfulness notes): on paragraph-per-line text
    the official rule drops about a third of the tokens, this one none.
    """

    def __init__(
        self,
        max_len: int,
        rng: random.Random,
        continuation: frozenset[int],
        single_extra: int = 2,
        pair_extra: int = 3,
    ):
        super().__init__(max_len, rng, single_extra, pair_extra)
        self.continuation = continuation  # ids of word pieces that continue a word ("##ing")
        # Drawn as an example opens, not as it closes, so a single segment fills its extra slot.
        self.single = self.rng.random() < 0.1

    def add_line(self, ids: list[int]) -> list[Example]:
        examples = []
        self.tokens_read += len(ids)
        while ids:
            room = self._capacity() - self.length
            cut = len(ids) if len(ids) <= room else self._word_start(ids, room)
            if cut == 0 and self.length:  # the word at hand does not fit: it opens the next one
                examples.append(self._create())
                continue
            cut = cut or room  # a word longer than a whole example is cut where it must be
            self.lines.append(ids[:cut])
            self.length += cut
            ids = ids[cut:]
            if self.length >= self._capacity() or ids:
                examples.append(self._create())
        return examples

    def _capacity(self) -> int:
        """Word pieces the open example holds: the target less [CLS] and one [SEP] per segment
        (at least one, should a random target be shorter than a long framing)."""
        return max(1, self.target - (self.single_extra if self.single else self.pair_extra))

    def _word_start(self, ids: list[int], at: int) -> int:
        """The last position in 1..at where a word starts, or 0 when there is none."""
        for i in range(at, 0, -1):
            if ids[i] not in self.continuation:
                return i
        return 0

    def _create(self) -> Example:
        tokens = [i for line in self.lines for i in line]
        self.single_segment += self.single
        cut = 0 if self.single or len(tokens) < 2 else self._segment_cut(tokens)
        self.tokens_kept += len(tokens)
        self._next_example()
        self.single = self.rng.random() < 0.1
        return (tokens[:cut], tokens[cut:]) if cut else (tokens, [])

    def _segment_cut(self, tokens: list[int]) -> int:
        """Where B starts: the official A length, moved to the nearest line boundary within half
        of it, else to a word start; both segments keep at least one token."""
        want = max(1, (self.target - self.pair_extra) // 2)
        boundaries = list(itertools.accumulate(len(line) for line in self.lines))[:-1]
        if boundaries:
            nearest = min(boundaries, key=lambda b: abs(b - want))
            if abs(nearest - want) <= want // 2:
                return nearest
        want = min(want, len(tokens) - 1)
        return self._word_start(tokens, want) or want


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


def _init_worker(tokenizer_json: str, settings: _PackSettings) -> None:
    global _worker_state
    # The pool is the parallelism; a Rust thread pool in each worker would only compete.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # Ctrl-C is handled by the parent, which terminates the pool and cleans up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_state = (Tokenizer.from_str(tokenizer_json), settings)


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
    with context.Pool(workers, _init_worker, (tok.to_str(), settings)) as pool:
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
    with atomic_dir(out_dir, tag=f"tmp-{os.getpid()}") as tmp:
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
        "truncated_lines": stats.truncated_lines,
        "text_tokens": meta["text_tokens"],
        "documents_per_row": meta["builder"].get("documents_per_row"),
    }


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
    for count, what in (
        (stats.bad_utf8_lines, "had invalid UTF-8 (decoded with U+FFFD)"),
        (stats.truncated_lines, "were longer than the line limit and cut"),
    ):
        if count:
            print(f"warning: {count} corpus lines {what}", file=sys.stderr)
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
