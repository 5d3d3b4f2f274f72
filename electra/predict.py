"""`electra predict`: a fine-tuned model on new inputs, one JSONL record per input, in order.

Inputs are files in the task's own format (labels in them, if any, are ignored) or `-`, lines of
standard input (a text per line, a pair or a question and its context TAB-separated). They are
encoded as training encodes them (the same maximum length, SQuAD's windows) and run through the
evaluation loop's batching (`electra.finetune.predict_outputs`: batches of similar lengths, each
trimmed to its longest row, a classifier's last layer at [CLS] only), and each task turns the
outputs into its records (`Task.records`): a label and its probability, a regression value on the
labels' scale, word tags and entity spans with character offsets, an answer with its offset.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import tokenizers
from torch import nn
from tqdm import tqdm

from electra.atomic import atomic_path
from electra.config import FinetuneConfig
from electra.errors import ElectraError
from electra.finetune import load_for_inference, predict_outputs
from electra.runtime import Runtime
from electra.tasks.base import Task, utf8_text

STDIN = "-"


@dataclass
class Predictor:
    """A fine-tuned model loaded once, ready to predict any number of example lists."""

    task: Task
    model: nn.Module
    tokenizer: tokenizers.Tokenizer
    cfg: FinetuneConfig
    runtime: Runtime

    @classmethod
    def load(cls, path: str | Path, runtime: dict[str, Any] | None = None) -> Predictor:
        """The fine-tuned model at `path` (a finetune --out folder: its best seed, or a seed
        folder), run as it was fine-tuned unless `runtime` says otherwise
        (`electra.finetune.load_for_inference`)."""
        return cls(*load_for_inference(path, runtime))

    def __call__(
        self,
        examples: list[Any],
        all_scores: bool = False,
        batch_size: int = 0,
        progress: bool = False,
    ) -> tuple[list[dict], int]:
        """The records of `examples` (`Task.records`), and how many of them were cut to the
        model's maximum length."""
        if not examples:
            return [], 0
        task, max_len = self.task, self.cfg.max_seq_len
        encoded = task.encode(examples, self.tokenizer, max_len, training=False)
        cut = task.truncated(examples, encoded, self.tokenizer, max_len)
        with tqdm(
            total=len(encoded), disable=not progress, unit="row", file=sys.stderr, leave=False
        ) as bar:
            outputs = predict_outputs(
                task, self.model, encoded, self.runtime, batch_size, on_batch=bar.update
            )
        return task.records(examples, encoded, outputs, all_scores), cut


def read_examples(task: Task, inputs: list[str], stdin: TextIO | None = None) -> list[list]:
    """The examples of each input, in order: a file read by the task (`Task.read_inputs`), or
    `-` for lines of standard input (`Task.from_lines`). An input with none is an error."""
    found = []
    for name in inputs:
        if name == STDIN:
            lines = (stdin or sys.stdin).read().splitlines()
            examples = task.from_lines(lines, "standard input")
        else:
            path = Path(name)
            if not path.is_file():
                raise ElectraError(f"input file not found: {path}")
            with utf8_text(path):
                examples = task.read_inputs(path)
        if not examples:
            where = "standard input" if name == STDIN else name
            raise ElectraError(f"{where} holds no input to predict: nothing written")
        found.append(examples)
    return found


def predict_inputs(
    model_path: str | Path,
    inputs: list[str],
    out: str | Path | None = None,
    all_scores: bool = False,
    batch_size: int = 0,
    runtime: dict[str, Any] | None = None,
    stdin: TextIO | None = None,
) -> int:
    """`electra predict`: writes the records of every input to `out` (atomically) or to standard
    output when `out` is None; returns how many. With several inputs, each record names its
    input (`source`). A truncation is said once on stderr."""
    if not inputs:
        raise ElectraError("no input: pass files in the task's format, or - for standard input")
    predictor = Predictor.load(model_path, runtime)
    sets = read_examples(predictor.task, inputs, stdin)
    records, cut, total = [], 0, 0
    for name, examples in zip(inputs, sets, strict=True):
        rows, n_cut = predictor(
            examples, all_scores, batch_size, progress=predictor.cfg.progress and name != STDIN
        )
        records += [{**r, "source": name} for r in rows] if len(inputs) > 1 else rows
        cut, total = cut + n_cut, total + len(examples)
    if cut:
        note = predictor.task.truncation_note(predictor.cfg.max_seq_len)
        print(f"warning: {cut} of {total} inputs {note}", file=sys.stderr)
    write_records(records, out)
    return len(records)


def write_records(records: list[dict], out: str | Path | None) -> None:
    """JSONL, one record a line: to `out` through a temporary file, or to standard output."""
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if out is None:
        sys.stdout.write(lines)
        sys.stdout.flush()
        return
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        tmp.write_text(lines, encoding="utf-8")
