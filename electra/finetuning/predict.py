"""`electra predict`: a fine-tuned model on new inputs, one JSONL record per input, in order.

Inputs are files in the task's own format (labels in them, if any, are ignored) or `-`, lines of
standard input (a text per line, a pair or a question and its context TAB-separated). They are
encoded as training encodes them (the same maximum length, SQuAD's windows) and run through the
evaluation's batching (`electra.finetuning.inference.predict_outputs`: batches of similar lengths,
each trimmed to its longest row, a classifier's last layer at [CLS] only), and each task turns the
outputs into its records (`Task.records`): a label and its probability, a regression value on the
labels' scale, word tags and entity spans with character offsets, an answer with its offset.

It is a Unix tool: inputs are predicted `CHUNK` at a time and each chunk's records are written (and
flushed) as soon as they are computed, so memory stays flat with the input's length and the first
records come at once; every input keeps its position (a blank line or row gives a record
`{"id", "empty": true}`); a bad line met mid-stream stops with one error naming it, the records
before it already out, while `--out FILE` is written whole or not at all.

From Python, `Predictor.load(folder)` loads a model once and is called on lists of texts or pairs;
`predict` is the command as a function. Both give the records the command writes: the same
reading of the inputs (`Task.from_lines`, `Task.read_inputs`), chunks and batching.
"""

from __future__ import annotations

import codecs
import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import tokenizers
from torch import nn

from electra.config import InferenceRuntime
from electra.engine.progress import progress_bar
from electra.engine.runtime import Runtime
from electra.errors import ElectraError
from electra.finetuning.inference import predict_outputs
from electra.finetuning.loading import load_for_inference
from electra.jsonl import jsonl_writer
from electra.locks import claim_output
from electra.tasks.base import Task, utf8_text
from electra.tasks.finetune_config import FinetuneConfig

STDIN = "-"
# Inputs encoded and predicted at a time: enough for batches of like lengths, little memory.
CHUNK = 4096
# How errors name the inputs of a Python call (counted from 1, as lines).
INPUTS = "the inputs"
# Characters of a line of standard input read at most, per token of the model's length: English
# averages under 5 a word piece, so the model's tokens are read whole with room to spare, and a
# 50 MB line costs what a short one does. A task that reads long texts in windows (qa) reads its
# context up to WINDOWED_LINE_CHARS. The rest of a longer line is skipped unread, and counted.
LINE_CHARS_PER_TOKEN = 64
WINDOWED_LINE_CHARS = 1_000_000
LINE_CHARS = WINDOWED_LINE_CHARS  # where the model's length is not known
_SKIP_BYTES = 1 << 20  # bytes read at a time while skipping the rest of a long line
_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))  # UTF-8's non-first bytes: not characters

Text = str | tuple[str, str] | None


@dataclass
class Predictor:
    """A fine-tuned model loaded once, ready to predict any number of input lists."""

    task: Task
    model: nn.Module
    tokenizer: tokenizers.Tokenizer
    cfg: FinetuneConfig
    runtime: Runtime
    truncated: int = 0  # how many inputs of the last call were cut to the model's length

    @classmethod
    def load(
        cls,
        path: str | Path,
        runtime: InferenceRuntime | None = None,
        reading: dict[str, Any] | None = None,
        *,
        device: str | None = None,
        precision: str | None = None,
        threads: int | None = None,
    ) -> Predictor:
        """The fine-tuned model at `path` (a finetune --out folder: its best seed, or a seed
        folder, or a Hugging Face task folder), run as it was fine-tuned unless `runtime`
        (`electra.config.InferenceRuntime`), `device` or `precision` say otherwise
        (`electra.finetuning.loading.load_for_inference`); `threads` sets torch's CPU threads for
        the process (`--threads`); `reading` ({"text_columns", "delimiter"}) reads new files of your
        own by other columns or separator than its training files'."""
        if threads is not None:
            from electra.engine.cpu_threads import apply_threads

            apply_threads(str(threads))
        given = {"device": device, "precision": precision}
        runtime = replace(runtime or InferenceRuntime(), **{k: v for k, v in given.items() if v})
        predictor = cls(*load_for_inference(path, runtime))
        if reading and any(reading.values()):  # as `evaluate`: unset values read as trained
            predictor.task.read_with(**{k: v for k, v in reading.items() if v})
        return predictor

    def __call__(
        self,
        inputs: Sequence[Text],
        all_scores: bool = False,
        batch_size: int | None = None,
        progress: bool | None = None,
    ) -> list[dict]:
        """The records `electra predict -` writes for these inputs as lines of standard input:
        a text each, or a pair (a tuple; for QA a question and its context). A str is read as
        such a line, so a TAB in it separates a pair's texts. A blank input (or None) gives
        `{"id": its position, "empty": true}`; ids are the positions from "0". `truncated`
        then says how many were cut to the model's maximum length. `progress` (default: the
        model's runtime setting) shows progress on stderr (a bar on a terminal, plain lines
        elsewhere)."""
        check_batch_size(batch_size)
        lines = input_lines(inputs)
        show = self.cfg.progress if progress is None else progress
        records: list[dict] = []
        self.truncated = 0
        with progress_bar(len(lines), "predict", enabled=show, unit="row") as bar:
            for first in range(0, len(lines), CHUNK):
                examples = self.task.from_lines(lines[first : first + CHUNK], INPUTS, first + 1)
                rows, cut = self.records(examples, all_scores, batch_size, bar.update, first)
                records += rows
                self.truncated += cut
        return records

    def records(
        self,
        examples: Sequence[Any],
        all_scores: bool = False,
        batch_size: int | None = None,
        on_batch: Callable[[int], None] | None = None,
        first: int = 0,
    ) -> tuple[list[dict], int]:
        """The records of the task's examples (`Task.records`; None, a blank input, gives
        `{"id": its position, "empty": true}`), the first at position `first`, and how many of
        them were cut to the model's maximum length."""
        given = [e for e in examples if e is not None]
        records, cut = [], 0
        if given:
            task, max_len = self.task, self.cfg.max_seq_len
            encoded = task.encode(given, self.tokenizer, max_len, training=False)
            cut = task.truncated(given, encoded, self.tokenizer, max_len)
            outputs = predict_outputs(
                task, self.model, encoded, self.runtime, batch_size, on_batch=on_batch
            )
            records = task.records(given, encoded, outputs, all_scores)
        found = iter(records)
        return [
            next(found) if e is not None else {"id": str(first + i), "empty": True}
            for i, e in enumerate(examples)
        ], cut


def input_lines(inputs: Sequence[Text]) -> list[str]:
    """The inputs of a Python call as the lines `electra predict -` would read: a pair's texts
    TAB-separated, None blank. A TAB inside a pair's text would split it, so it is refused."""
    if isinstance(inputs, str | Path):
        raise ElectraError(
            "pass a list of texts (or of pairs); for a file in the task's format, use "
            "electra.predict(model, path)"
        )
    lines = []
    for number, given in enumerate(inputs, start=1):
        if given is None:
            lines.append("")
        elif isinstance(given, str):
            lines.append(given)
        elif isinstance(given, tuple | list) and all(isinstance(t, str) for t in given):
            if any("\t" in t for t in given):
                raise ElectraError(
                    f"{INPUTS}, line {number}: a text of the pair holds a TAB, which would "
                    "separate it: replace it with a space"
                )
            lines.append("\t".join(given))
        else:
            raise ElectraError(
                f"{INPUTS}, line {number}: a {type(given).__name__}, not a text or a pair of texts"
            )
    return lines


def input_chunks(
    task: Task,
    name: str,
    stdin: TextIO | None = None,
    line_chars: int | None = None,
    cuts: LineCuts | None = None,
) -> Iterator[tuple[int, list[Any], int | None]]:
    """(position of the first, examples, the input's count where known) of one input, `CHUNK`
    inputs at a time: `-` read from standard input line by line (`Task.from_lines`; count
    unknown), each line read up to `line_chars` characters and the rest of it skipped unread
    (counted in `cuts`), a file read whole by the task first (`Task.read_inputs`: SQuAD's JSON
    and CoNLL's sentences need the whole file). An input with none is an error."""
    if name == STDIN:
        cuts = cuts if cuts is not None else LineCuts()
        lines = _utf8_lines(stdin or sys.stdin, line_chars or LINE_CHARS, cuts)
        position = 0
        while chunk := list(itertools.islice(lines, CHUNK)):
            yield position, task.from_lines(chunk, "standard input", first=position + 1), None
            position += len(chunk)
        if position == 0:
            raise ElectraError("standard input holds no input to predict: nothing written")
        return
    path = Path(name)
    with utf8_text(path):
        examples = task.read_inputs(path)
    if not examples:
        raise ElectraError(f"{name} holds no input to predict: nothing written")
    for start in range(0, len(examples), CHUNK):
        yield start, examples[start : start + CHUNK], len(examples)


def line_chars(task: Task, max_len: int) -> int:
    """The characters of a line of standard input that a model of `max_len` tokens can use, at
    most: `LINE_CHARS_PER_TOKEN` per token, or for a task that reads long texts in windows (qa)
    `WINDOWED_LINE_CHARS`."""
    if task.family == "qa":
        return WINDOWED_LINE_CHARS
    return LINE_CHARS_PER_TOKEN * max_len


@dataclass
class LineCuts:
    """Lines of standard input longer than what the model can use, and the characters of them
    that were never read."""

    lines: int = 0
    chars: int = 0
    limit: int = 0  # the characters read of a line, at most


def _utf8_lines(stream: Any, limit: int, cuts: LineCuts) -> Iterator[str]:
    """Lines of standard input decoded as UTF-8 (whatever the locale), one error naming the line
    where a byte is not. A line is read `limit` characters at most (`readline` with a size, so a
    50 MB line is never held whole); the rest of it is skipped in pieces and counted in `cuts`."""
    cuts.limit = limit
    if hasattr(stream, "buffer"):
        yield from _binary_lines(stream.buffer, limit, cuts)
    elif hasattr(stream, "readline"):  # a text stream (a StringIO), read in pieces
        yield from _text_lines(iter(lambda: stream.readline(limit), ""), limit, cuts, True)
    else:  # any iterable of whole lines, already in memory
        yield from _text_lines(iter(stream), limit, cuts, False)


def _binary_lines(stream: BinaryIO, limit: int, cuts: LineCuts) -> Iterator[str]:
    """Each line decoded on its own (a decoder reading ahead would name a later line), its first
    `limit` characters: 4 bytes a character at most in UTF-8, so `4 * limit` bytes hold them."""
    for number in itertools.count(1):
        raw = stream.readline(4 * limit)
        if not raw:
            return
        whole = raw.endswith(b"\n") or len(raw) < 4 * limit
        rest = 0 if whole else _skip_rest(stream)
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        try:  # a cut line may end inside a character: final=False leaves its bytes out
            line, used = codecs.utf_8_decode(raw, "strict", whole)
        except UnicodeDecodeError as e:
            raise ElectraError(
                f"standard input, line {number}: not UTF-8 text ({e.reason} at byte {e.start} "
                "of the line): save it as UTF-8"
            ) from None
        yield _count_cut(line, limit, rest + (used < len(raw)), cuts)


def _skip_rest(stream: BinaryIO) -> int:
    """Reads the rest of a line in pieces of `_SKIP_BYTES`, keeping none; its characters."""
    chars = 0
    while piece := stream.readline(_SKIP_BYTES):
        chars += len(piece.translate(None, _CONTINUATION_BYTES)) - piece.endswith(b"\n")
        if piece.endswith(b"\n"):
            break
    return chars


def _text_lines(lines: Iterator[str], limit: int, cuts: LineCuts, pieces: bool) -> Iterator[str]:
    """Lines of a text stream, as `_binary_lines` cuts them; read in `pieces` of `limit`
    characters, a piece without its end of line is the start of a long one, whose rest is
    skipped."""
    for line in lines:
        rest = 0
        if pieces and len(line) >= limit and not line.endswith("\n"):
            for piece in lines:
                rest += len(piece) - piece.endswith("\n")
                if piece.endswith("\n") or len(piece) < limit:
                    break
        yield _count_cut(line, limit, rest, cuts)


def _count_cut(line: str, limit: int, rest: int, cuts: LineCuts) -> str:
    """`line` cut to `limit` characters, counted in `cuts` with the `rest` of it not read."""
    rest += max(0, len(line.rstrip("\r\n")) - limit)
    if rest:
        cuts.lines += 1
        cuts.chars += rest
    return line[:limit]


@dataclass
class _Tally:
    """What `electra predict` says once on stderr when it is done."""

    cut: int = 0
    empty: int = 0
    total: int = 0
    lines: LineCuts = field(default_factory=LineCuts)  # of standard input, cut as read

    def notes(self, predictor: Predictor) -> None:
        if self.lines.lines:
            lines, max_len = self.lines, predictor.cfg.max_seq_len
            why = (
                "the most of a context read in windows"
                if predictor.task.family == "qa"
                else f"more than the model's {max_len} tokens hold"
            )
            print(
                f"warning: {lines.lines} of {self.total} input lines were longer than "
                f"{lines.limit:,} characters ({why}): the rest of each was not read "
                f"({lines.chars:,} characters)",
                file=sys.stderr,
            )
        if self.cut:
            note = predictor.task.truncation_note(predictor.cfg.max_seq_len)
            print(f"warning: {self.cut} of {self.total} inputs {note}", file=sys.stderr)
        if self.empty:
            print(
                f"warning: {self.empty} of {self.total} inputs blank: their records say "
                '"empty": true, in their places',
                file=sys.stderr,
            )


def check_batch_size(batch_size: int | None) -> None:
    """None is unset (the task's default); so is 0, its spelling before None meant it."""
    if batch_size is not None and batch_size < 0:
        raise ElectraError(f"--batch-size {batch_size}: at least 1 (unset: the task's default)")


def check_inputs(inputs: list[str], batch_size: int | None) -> None:
    """Before loading the model, and before any record is out."""
    if not inputs:
        raise ElectraError("no input: pass files in the task's format, or - for standard input")
    check_batch_size(batch_size)
    for name in inputs:
        if name != STDIN and not Path(name).is_file():
            raise ElectraError(f"input file not found: {name}")


def input_records(
    predictor: Predictor,
    inputs: list[str],
    tally: _Tally,
    all_scores: bool = False,
    batch_size: int | None = None,
    stdin: TextIO | None = None,
) -> Iterator[list[dict]]:
    """The records of each input (files, or `-`), a chunk at a time (`input_chunks`), as
    `electra predict` writes them: with several inputs, each record names its input
    (`source`). `tally` counts the inputs, the blank and the cut."""
    for name in inputs:
        progress = predictor.cfg.progress and name != STDIN
        bar = None  # made once the input's count is known: a file is read first
        limit = line_chars(predictor.task, predictor.cfg.max_seq_len)
        chunks = input_chunks(predictor.task, name, stdin, limit, tally.lines)
        for first, chunk, count in chunks:
            if bar is None:  # (a tqdm without a total has no truth value)
                bar = progress_bar(count, f"predict {name}", enabled=progress, unit="row")
            rows, cut = predictor.records(
                chunk, all_scores, batch_size, on_batch=bar.update, first=first
            )
            tally.cut, tally.total = tally.cut + cut, tally.total + len(chunk)
            tally.empty += sum(e is None for e in chunk)
            yield [{**r, "source": name} for r in rows] if len(inputs) > 1 else rows
        if bar is not None:
            bar.close()


def predict_inputs(
    model_path: str | Path,
    inputs: list[str],
    out: str | Path | None = None,
    all_scores: bool = False,
    batch_size: int | None = None,
    runtime: InferenceRuntime | None = None,
    stdin: TextIO | None = None,
    reading: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> int:
    """`electra predict`: writes the records of every input to `out` (atomically) or to standard
    output (flushed chunk by chunk) when `out` is None; returns how many. With several inputs,
    each record names its input (`source`). Truncations and blank inputs are said once on
    stderr. An existing `out` is replaced only with `overwrite`, and never while another
    process writes it (`claim_output`)."""
    check_inputs(inputs, batch_size)
    with claim_output(out, overwrite, reads=[model_path, *inputs], folder=False):
        predictor = Predictor.load(model_path, runtime, reading)
        tally = _Tally()
        with jsonl_writer(out) as write:
            for records in input_records(predictor, inputs, tally, all_scores, batch_size, stdin):
                write(records)
    tally.notes(predictor)
    return tally.total


def predict(
    model: str | Path | Predictor,
    inputs: str | Path | Sequence[Text],
    out: str | Path | None = None,
    all_scores: bool = False,
    batch_size: int | None = None,
    runtime: InferenceRuntime | None = None,
    reading: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> list[dict]:
    """`electra predict` from Python: the records of `inputs`, also written to `out` as JSONL
    (atomically) when given (an existing `out` only with `overwrite`). `model` is a fine-tuned
    model folder (as `--model`) or a loaded `Predictor` (then `runtime` and `reading` are its
    own: give them to `Predictor.load`).
    `inputs` is a file in the task's format (a path, as `electra predict FILE`) or a list of
    texts or pairs (as `Predictor.__call__`, the lines of `electra predict -`). Truncations and
    blank inputs are said once on stderr, as the command says them."""
    if isinstance(model, Predictor) and (runtime or reading):
        raise ElectraError(
            "runtime and reading are a model's settings: pass them to Predictor.load"
        )
    if isinstance(inputs, str | Path):
        check_inputs([str(inputs)], batch_size)
    else:  # a bad input is refused before the model loads
        check_batch_size(batch_size)
        lines = input_lines(inputs)
    given = [inputs] if isinstance(inputs, str | Path) else []
    model_dir = [] if isinstance(model, Predictor) else [model]
    with claim_output(out, overwrite, reads=[*model_dir, *given], folder=False):
        loaded = isinstance(model, Predictor)
        predictor = model if loaded else Predictor.load(model, runtime, reading)
        tally = _Tally()
        if isinstance(inputs, str | Path):
            chunks = input_records(predictor, [str(inputs)], tally, all_scores, batch_size)
            records = [r for chunk in chunks for r in chunk]
        else:
            records = predictor(lines, all_scores, batch_size)
            tally = _Tally(predictor.truncated, sum(not x.strip() for x in lines), len(lines))
        if out is not None:
            with jsonl_writer(out) as write:
                write(records)
    tally.notes(predictor)
    return records
