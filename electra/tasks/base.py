"""What every fine-tuning task provides, and the encoding helpers they share.

A task finds a data source's split files once (`resolve`), reads them (which changes nothing in
it), is fitted to its training split (`fit`: a new task, with the label set or what else the
training file decides), encodes examples into fixed-width tensors, builds its head, turns a batch
into per-example losses, decodes model outputs into predictions, and scores them. The training and
evaluation loops (`electra.finetuning`) know nothing else about tasks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tokenizers
import torch
from torch import nn

from electra.data.specials import Framing, bert_framing, framing
from electra.data.textcut import cut_texts
from electra.data.tokenizer import SpecialIds, special_ids
from electra.errors import ElectraError
from electra.model.configs import AnyModelConfig
from electra.tasks.splits import DataSource, SplitFiles, given_file, resolve

Batch = dict[str, torch.Tensor]
# Tokens of a text `token_ids` tokenises at most: one more than the longest sequence any model
# here reads (electra.data.store.MAX_SEQ_LEN), so truncating callers see that a text was cut.
TOKEN_BUDGET = 8192 + 1


@dataclass
class Encoded:
    """A split's model inputs: equal-length tensors, one row per model input (an example, or a
    window of one), plus whatever the task needs to map rows back to examples."""

    tensors: Batch
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.tensors.values())))


class Task:
    """A fine-tuning task: what it reads (`resolve`, `read`, `fit`), how it encodes examples and
    builds its head, its losses, inference, decoding and scores. The general tasks on your own
    files subclass it; the benchmarks are named configurations of those."""

    name: str = ""
    family: str = ""
    epochs: int = 3  # docs/specification.md §Fine-tuning: 3, except RTE/STS-B 10 and SQuAD 2
    max_seq_len: int = 128
    eval_batch_size: int = 64
    main_metric: str = ""
    token_outputs: tuple[str, ...] = ()  # outputs of `infer` with one value per token
    regression = False  # a value per example, not a class (its head and export differ)
    multilabel = False  # any number of classes per example: a sigmoid per label
    # `losses` takes packed batches (electra.finetuning.packing): tasks with one output per example
    packable: bool = False
    # split name -> {evaluation set name: candidate file names}; one set for most tasks.
    files: dict[str, dict[str, tuple[str, ...]]] = {}
    # `finetune` also predicts a test split where there is one (the user's own data tasks), and
    # `evaluate` writes a benchmark's submission files for a test split, labelled or not.
    finetune_test: bool = False
    writes_submission: bool = True
    # A benchmark's published splits (GLUE, SQuAD, CoNLL-2003), which share a few rows between
    # train and dev or test: scored as published, with a note (`electra.finetuning.overlap`).
    fixed_splits: bool = False

    @property
    def dev_set(self) -> str:
        """The name of the task's one dev set (most tasks': "dev")."""
        return next(iter(self.files.get("dev", {"dev": ()})))

    def resolve(self, data: DataSource) -> SplitFiles:
        """The data's split files, found once (`electra.tasks.splits`): `data` is a folder, a
        file (every split's), or a {split: file} mapping (--train/--dev/--test)."""
        return resolve(data, self.locate)

    def locate(self, data: Path | Mapping[str, str | Path], split: str) -> dict[str, Path] | str:
        """The files of a split, by evaluation set name, found by the task's file names; or why
        there are none."""
        sets = self.files.get(split, {})
        if isinstance(data, Mapping):
            if not data.get(split) or len(sets) != 1:
                where = (
                    f"pass --{split} FILE" if len(sets) == 1 else "pass the task's folder as --data"
                )
                return f"no {split} file for {self.name}: {where}"
            return {next(iter(sets)): given_file(data[split], split)}
        if not sets:
            return f"{self.name} has no {split!r} split: use one of {', '.join(self.files)}"
        found = {}
        for set_name, candidates in sets.items():
            paths = [data / c for c in candidates] if data.is_dir() else [data]
            path = next((p for p in paths if p.is_file()), None)
            if path is None:
                return (
                    f"no {split} split for {self.name} in {data}: expected "
                    f"{' or '.join(candidates)}"
                )
            found[set_name] = path
        return found

    def fit(self, train: list[Any], path: Path) -> Task:
        """This task fitted to its training examples (read from `path`): what the training split
        decides, such as a label set, a tag set, a regression scale. A new task; this one is
        unchanged, and reading a file never changes a task. The benchmarks are fixed: `self`."""
        return self

    def read(self, path: Path, split: str) -> list[Any]:
        raise NotImplementedError

    def row_texts(self, example: Any) -> tuple[str | None, ...]:
        """An example's text fields, what makes it the same row wherever it is found (never its
        label): `electra.finetuning.overlap` keys held-out rows by them."""
        raise NotImplementedError

    def is_labelled(self, example: Any) -> bool:
        """Whether an example carries its gold answer (a test file's may not): a set with none
        is predicted, not scored."""
        raise NotImplementedError

    def encode(
        self, examples: list[Any], tokenizer: tokenizers.Tokenizer, max_len: int, training: bool
    ) -> Encoded:
        raise NotImplementedError

    def build_model(self, cfg: AnyModelConfig) -> nn.Module:
        """The task's head on an encoder of the family `cfg.arch` names."""
        raise NotImplementedError

    def losses(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Per-example losses [B] (the loop sums or averages them)."""
        raise NotImplementedError

    def infer(self, model: nn.Module, batch: Batch) -> Batch:
        """Model outputs for a batch, on the host side of the decode."""
        raise NotImplementedError

    def decode(self, examples: list[Any], encoded: Encoded, outputs: Batch) -> list[dict]:
        """Per-example predictions: {"id", "prediction", "label"} (label where known)."""
        raise NotImplementedError

    def score(self, predictions: list[dict]) -> dict[str, float]:
        raise NotImplementedError

    def baseline(self, train: list[Any]) -> dict[str, Any] | None:
        """The trivial predictor a fine-tuned model has to beat, fitted on the training examples:
        {"rule": what it predicts, in words, "prediction": the one value it predicts}. None where
        no trivial predictor is meaningful: better no bar than an invented one."""
        return None

    def constant_predictions(self, prediction: Any, examples: list[Any]) -> list[dict]:
        """`decode`'s rows for `examples`, each predicting `prediction`, for `score`."""
        raise NotImplementedError

    def head_config(self) -> dict[str, Any]:
        """What `build_model` needs besides the encoder config, saved with a fine-tuned model."""
        return {}

    def with_head_config(self, head: dict[str, Any]) -> Task:
        """This task set up from a saved fine-tuned model's head config."""
        return self

    # --- `electra predict`: new inputs, no labels --------------------------------------------

    def read_inputs(self, path: Path) -> list[Any]:
        """Examples from a file in the task's own format; labels in it, if any, are ignored."""
        return self.read(path, "test")

    def from_lines(self, lines: Iterable[str], source: str, first: int = 1) -> list[Any | None]:
        """Examples from lines of text (standard input), the first of them line `first`: each
        line's (`from_line`), or None for a blank line, kept so that every input keeps its
        position. `source` names them in errors."""
        return [
            self.from_line(line.rstrip("\r\n"), number, source) if line.strip() else None
            for number, line in enumerate(lines, start=first)
        ]

    def from_line(self, line: str, number: int, source: str) -> Any:
        """The example of line `number` (not blank): a text, or a pair (qa: question and context)
        TAB-separated; its id is the line's position from 0."""
        raise ElectraError(f"{self.name} cannot read plain text lines: pass a file")

    def records(
        self, examples: list[Any], encoded: Encoded, outputs: Batch, all_scores: bool = False
    ) -> list[dict]:
        """`electra predict`'s JSONL records, one per example, in order."""
        raise NotImplementedError

    def truncated(
        self, examples: list[Any], encoded: Encoded, tokenizer: tokenizers.Tokenizer, max_len: int
    ) -> int:
        """How many of `examples` lost tokens to `max_len` when encoded (`electra predict` says so
        once on stderr); 0 where the task keeps everything (windows)."""
        return 0

    def truncation_note(self, max_len: int) -> str:
        """What `truncated` counted and what it means for the predictions, after "N of M inputs"
        in `electra predict`'s warning."""
        return (
            f"were longer than the model's {max_len} tokens and were cut to fit, as in training "
            "(the end of the longer text first)"
        )

    def double_unordered(self, examples: list[Any]) -> list[Any]:
        raise ElectraError(
            f"double_unordered applies to MRPC and STS-B, whose pairs are unordered, not {self.name}"
        )

    def write_submission(self, predictions: list[dict], set_name: str, out_dir: Path) -> Path:
        raise ElectraError(f"{self.name} has no test submission format")

    def read_with(
        self,
        text_columns: Sequence[str] = (),
        delimiter: str | None = None,
        label_column: str | None = None,
    ) -> None:
        """This task reading new files by other text columns, separator or label column than
        its training files' (`electra predict` and `evaluate`'s --text-columns, --delimiter,
        --label-column): the tasks on your own tables."""
        raise ElectraError(
            f"--text-columns, --label-column and --delimiter read files of your own "
            f"(classification, multilabel, regression), not {self.name}'s"
        )


def truncate_longest_first(a: list[int], b: list[int] | None, budget: int) -> None:
    """Drops tokens from the end of the longer sequence until both fit (BERT's pair truncation)."""
    while len(a) + len(b or ()) > budget:
        longer = b if b and len(b) > len(a) else a
        longer.pop()


def row_format(tokenizer: tokenizers.Tokenizer) -> tuple[SpecialIds, Framing]:
    """The special ids of a model's tokenizer (as its folder names them: `special_ids`) and how
    it frames a row, so that fine-tuning rows are the tokenizer's own (and HF's pipeline's)."""
    special = special_ids(tokenizer)
    return special, framing(tokenizer, special)


def pack(
    a: list[int],
    b: list[int] | None,
    special: SpecialIds,
    max_len: int,
    frame: Framing | None = None,
) -> tuple[list[int], list[int]]:
    """a (and b) framed as `frame` frames them (BERT's `[CLS] a [SEP] (b [SEP])` by default) with
    segment ids, truncated longest-first to max_len."""
    frame = frame or bert_framing(special)
    a = list(a)
    b = None if b is None else list(b)
    truncate_longest_first(a, b, max_len - (frame.single_extra if b is None else frame.pair_extra))
    return frame.row(a, b)


def to_tensors(rows: list[tuple[list[int], list[int]]], max_len: int, pad: int) -> Batch:
    """Pads (ids, segment ids) rows to max_len: input_ids, token_type_ids, attention_mask."""
    n = len(rows)
    ids = torch.full((n, max_len), pad, dtype=torch.long)
    types = torch.zeros((n, max_len), dtype=torch.long)
    mask = torch.zeros((n, max_len), dtype=torch.long)
    for i, (row_ids, row_types) in enumerate(rows):
        ids[i, : len(row_ids)] = torch.tensor(row_ids)
        types[i, : len(row_types)] = torch.tensor(row_types)
        mask[i, : len(row_ids)] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def token_ids(
    tokenizer: tokenizers.Tokenizer, texts: list[str], budget: int = TOKEN_BUDGET
) -> list[list[int]]:
    """The tokens of each text, a text of more than `budget` tokens cut first to a prefix that
    holds a few more (`electra.data.textcut`): a tokenizer takes a few hundred bytes per character
    it encodes, so a 50 MB line would take gigabytes to give the model its first 512 tokens. The
    default budget is more than any model reads, so callers that truncate see the same tokens and
    still see that a text was cut."""
    texts, _ = cut_texts(tokenizer, texts, budget)
    return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]


def require_suffix(path: Path, suffixes: tuple[str, ...], task: str) -> None:
    """Refuses an input file whose extension is not one of the task's formats (before reading it
    as something it is not); a name without an extension is taken as it is."""
    path = Path(path)
    if path.suffix and path.suffix.lower() not in suffixes:
        raise ElectraError(
            f"{path}: {task} reads {' or '.join(suffixes)} files, not {path.suffix}: pass a file "
            "in the task's format, or - for lines of text on standard input"
        )


@contextlib.contextmanager
def utf8_text(path: Path) -> Iterator[None]:
    """Reading `path` inside: a file that is not UTF-8 is one error naming it and the byte, where
    every task's reader would otherwise end in a traceback."""
    try:
        yield
    except UnicodeDecodeError as e:
        raise ElectraError(
            f"{path}: not UTF-8 text ({e.reason} at byte {e.start}): save it as UTF-8"
        ) from None
