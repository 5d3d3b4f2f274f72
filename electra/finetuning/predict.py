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

import io
import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import tokenizers
from torch import nn

from electra.config import InferenceRuntime
from electra.engine.progress import progress_bar
from electra.engine.runtime import Runtime
from electra.errors import ElectraError
from electra.finetuning.config import FinetuneConfig
from electra.finetuning.inference import predict_outputs
from electra.hf.finetuned import load_for_inference
from electra.jsonl import jsonl_writer
from electra.tasks.base import Task, utf8_text

STDIN = "-"
# Inputs encoded and predicted at a time: enough for batches of like lengths, little memory.
CHUNK = 4096
# How errors name the inputs of a Python call (counted from 1, as lines).
INPUTS = "the inputs"

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
        (`electra.hf.finetuned.load_for_inference`); `threads` sets torch's CPU threads for the
        process (`--threads`); `reading` ({"text_columns", "delimiter"}) reads new files of your
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


@dataclass
class _Tally:
    """What `electra predict` says once on stderr when it is done."""

    cut: int = 0
    empty: int = 0
    total: int = 0

    def notes(self, predictor: Predictor) -> None:
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
        for first, chunk, count in input_chunks(predictor.task, name, stdin):
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
) -> int:
    """`electra predict`: writes the records of every input to `out` (atomically) or to standard
    output (flushed chunk by chunk) when `out` is None; returns how many. With several inputs,
    each record names its input (`source`). Truncations and blank inputs are said once on
    stderr."""
    check_inputs(inputs, batch_size)
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
) -> list[dict]:
    """`electra predict` from Python: the records of `inputs`, also written to `out` as JSONL
    (atomically) when given. `model` is a fine-tuned model folder (as `--model`) or a loaded
    `Predictor` (then `runtime` and `reading` are its own: give them to `Predictor.load`).
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
    predictor = model if isinstance(model, Predictor) else Predictor.load(model, runtime, reading)
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
