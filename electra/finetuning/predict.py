"""`electra predict`: a fine-tuned model on new inputs, one JSONL record per input, in order.

Inputs are files in the task's own format (labels in them, if any, are ignored) or `-`, lines of
standard input (a text per line, a pair or a question and its context TAB-separated). They are
encoded as training encodes them (the same maximum length, SQuAD's windows) and run through the
evaluation loop's batching (`electra.finetuning.loop.predict_outputs`: batches of similar lengths, each
trimmed to its longest row, a classifier's last layer at [CLS] only), and each task turns the
outputs into its records (`Task.records`): a label and its probability, a regression value on the
labels' scale, word tags and entity spans with character offsets, an answer with its offset.

It is a Unix tool: inputs are predicted `CHUNK` at a time and each chunk's records are written (and
flushed) as soon as they are computed, so memory stays flat with the input's length and the first
records come at once; every input keeps its position (a blank line or row gives a record
`{"id", "empty": true}`); a bad line met mid-stream stops with one error naming it, the records
before it already out, while `--out FILE` is written whole or not at all.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import tokenizers
from torch import nn
from tqdm import tqdm

from electra.atomic import atomic_path
from electra.engine.runtime import Runtime
from electra.errors import ElectraError
from electra.finetuning.config import FinetuneConfig
from electra.finetuning.loop import predict_outputs
from electra.hf.finetuned import load_for_inference
from electra.tasks.base import Task, utf8_text

STDIN = "-"
# Inputs encoded and predicted at a time: enough for batches of like lengths, little memory.
CHUNK = 4096


@dataclass
class Predictor:
    """A fine-tuned model loaded once, ready to predict any number of example lists."""

    task: Task
    model: nn.Module
    tokenizer: tokenizers.Tokenizer
    cfg: FinetuneConfig
    runtime: Runtime

    @classmethod
    def load(
        cls,
        path: str | Path,
        runtime: dict[str, Any] | None = None,
        reading: dict[str, Any] | None = None,
    ) -> Predictor:
        """The fine-tuned model at `path` (a finetune --out folder: its best seed, or a seed
        folder), run as it was fine-tuned unless `runtime` says otherwise
        (`electra.hf.finetuned.load_for_inference`); `reading` ({"text_columns", "delimiter"})
        reads new files of your own by other columns or separator than its training files'."""
        predictor = cls(*load_for_inference(path, runtime))
        if reading and any(reading.values()):
            if not hasattr(predictor.task, "read_with"):
                raise ElectraError(
                    f"--text-columns and --delimiter read files of your own (classification, "
                    f"multilabel, regression), not {predictor.task.name}'s"
                )
            predictor.task.read_with(**reading)
        return predictor

    def __call__(
        self,
        examples: Sequence[Any],
        all_scores: bool = False,
        batch_size: int = 0,
        progress: bool = False,
    ) -> tuple[list[dict], int]:
        """The records of `examples` (`Task.records`; None, a blank input, gives `{"id": its
        position, "empty": true}`), and how many of them were cut to the model's maximum
        length."""
        with tqdm(
            total=len(examples), disable=not progress, unit="row", file=sys.stderr, leave=False
        ) as bar:
            return self.records(examples, all_scores, batch_size, on_batch=bar.update)

    def records(
        self,
        examples: Sequence[Any],
        all_scores: bool = False,
        batch_size: int = 0,
        on_batch: Callable[[int], None] | None = None,
        first: int = 0,
    ) -> tuple[list[dict], int]:
        """`__call__`'s records for inputs whose first is at position `first`."""
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


def read_examples(task: Task, inputs: list[str], stdin: TextIO | None = None) -> list[list]:
    """The examples of each input, whole, in order (see `input_chunks`)."""
    return [
        [e for _, chunk, _ in input_chunks(task, name, stdin) for e in chunk] for name in inputs
    ]


def input_chunks(
    task: Task, name: str, stdin: TextIO | None = None
) -> Iterator[tuple[int, list[Any], int | None]]:
    """(position of the first, examples, the input's count where known) of one input, `CHUNK`
    inputs at a time: `-` read from standard input line by line (`Task.from_lines`; count
    unknown), a file read whole by the task first (`Task.read_inputs`: SQuAD's JSON and CoNLL's
    sentences need the whole file). An input with none is an error."""
    if name == STDIN:
        lines = _utf8_lines(stdin or sys.stdin)
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


def _utf8_lines(stream: TextIO) -> Iterator[str]:
    """Lines of standard input decoded as UTF-8 (whatever the locale), one error naming the line
    where a byte is not."""
    if hasattr(stream, "buffer"):
        stream = io.TextIOWrapper(stream.buffer, encoding="utf-8-sig", newline="")
    number = 0
    try:
        for number, line in enumerate(stream, start=1):  # noqa: B007 (read in the except)
            yield line
    except UnicodeDecodeError as e:
        raise ElectraError(
            f"standard input, line {number + 1}: not UTF-8 text ({e.reason}): save it as UTF-8"
        ) from None


def predict_inputs(
    model_path: str | Path,
    inputs: list[str],
    out: str | Path | None = None,
    all_scores: bool = False,
    batch_size: int = 0,
    runtime: dict[str, Any] | None = None,
    stdin: TextIO | None = None,
    reading: dict[str, Any] | None = None,
) -> int:
    """`electra predict`: writes the records of every input to `out` (atomically) or to standard
    output (flushed chunk by chunk) when `out` is None; returns how many. With several inputs,
    each record names its input (`source`). Truncations and blank inputs are said once on
    stderr."""
    if not inputs:
        raise ElectraError("no input: pass files in the task's format, or - for standard input")
    if batch_size < 0:
        raise ElectraError(f"--batch-size {batch_size}: at least 1 (or 0, the task's default)")
    for name in inputs:  # before loading the model, and before any record is out
        if name != STDIN and not Path(name).is_file():
            raise ElectraError(f"input file not found: {name}")
    predictor = Predictor.load(model_path, runtime, reading)
    cut = total = empty = 0
    with record_writer(out) as write:
        for name in inputs:
            progress = predictor.cfg.progress and name != STDIN
            bar = None  # made once the input's count is known: a file is read first
            for first, chunk, count in input_chunks(predictor.task, name, stdin):
                if bar is None:  # (a tqdm without a total has no truth value)
                    bar = tqdm(
                        total=count, disable=not progress, unit="row", file=sys.stderr, leave=False
                    )
                rows, n_cut = predictor.records(
                    chunk, all_scores, batch_size, on_batch=bar.update, first=first
                )
                write([{**r, "source": name} for r in rows] if len(inputs) > 1 else rows)
                cut, total = cut + n_cut, total + len(chunk)
                empty += sum(e is None for e in chunk)
            if bar is not None:
                bar.close()
    _notes(predictor, cut, empty, total)
    return total


def _notes(predictor: Predictor, cut: int, empty: int, total: int) -> None:
    if cut:
        note = predictor.task.truncation_note(predictor.cfg.max_seq_len)
        print(f"warning: {cut} of {total} inputs {note}", file=sys.stderr)
    if empty:
        print(
            f"warning: {empty} of {total} inputs blank: their records say "
            '"empty": true, in their places',
            file=sys.stderr,
        )


@contextlib.contextmanager
def record_writer(out: str | Path | None) -> Iterator[Callable[[list[dict]], None]]:
    """A function writing records as JSONL, one a line: to standard output, flushed at each call,
    or to `out` through a temporary file renamed into place once every record is in."""
    if out is None:

        def to_stdout(records: list[dict]) -> None:
            sys.stdout.write(_jsonl(records))
            sys.stdout.flush()

        yield to_stdout
        return
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        yield lambda records: f.write(_jsonl(records))


def write_records(records: list[dict], out: str | Path | None) -> None:
    """JSONL, one record a line: to `out` through a temporary file, or to standard output."""
    with record_writer(out) as write:
        write(records)


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
