"""A dev split held out of the training file (`--dev-split`), and the guard that keeps every score
off the rows a model trained on (docs/finetuning.md §One file).

A user with one file gets what `GroupShuffleSplit` gives: a seeded fraction of its distinct rows
held out of training and scored as dev, every copy of a row (the same text,
`electra.finetuning.overlap`) on the same side, so that no dev row is also a training row. The
rows held out are saved with the run and with each model, so that `finetune --resume` and
`evaluate` see the same ones, and a training file that changed since is refused rather than
silently split anew. Data with no dev split and no `--dev-split` is refused, naming the flags: a
score on training rows looks like a result and is not one.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from electra.data.store import file_sha256
from electra.errors import ElectraError
from electra.finetuning.overlap import same_rows

SPLIT_FILE = "dev_split.json"  # in a finetune --out folder, beside results.json


@dataclass(frozen=True)
class HeldOut:
    """Which examples of a training file are dev: their positions in the order the task reads
    them, drawn once with `seed` and kept."""

    file: str
    sha256: str  # the file's contents when the split was drawn
    fraction: float
    seed: int
    examples: int  # what the file held
    dev: tuple[int, ...]  # positions of the held-out examples, ascending
    duplicates: int = 0  # examples that repeat an earlier one's text, kept on its side

    def split(self, examples: list) -> tuple[list, list]:
        """(training examples, dev examples) of `examples`, read from a file whose SHA-256 the
        caller found to be `sha256`; a count that differs (another reader) is refused."""
        if len(examples) != self.examples:
            raise ElectraError(
                f"{self.file} read as {len(examples)} examples, {self.examples} when its dev "
                "split was drawn: fine-tune again on it (without --resume)"
            )
        held = set(self.dev)
        train = [e for i, e in enumerate(examples) if i not in held]
        return train, [examples[i] for i in self.dev]

    def describe(self) -> str:
        copies = (
            f"; {self.duplicates} repeat another's text, each kept on its side"
            if self.duplicates
            else ""
        )
        return (
            f"{len(self.dev)} of the {self.examples} examples of {self.file} held out as dev "
            f"(--dev-split {self.fraction:g}, seed {self.seed}{copies}); training on the other "
            f"{self.examples - len(self.dev)}"
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "dev": list(self.dev)}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> HeldOut:
        return cls(**{**value, "dev": tuple(value["dev"])})


def draw(path: Path, sha256: str, keys: np.ndarray, fraction: float, seed: int) -> HeldOut:
    """A seeded `fraction` of the distinct rows of a file (whose SHA-256 is `sha256` and whose
    examples' keys are `keys`, `electra.finetuning.overlap.row_keys`), each with all its copies:
    a fraction that holds out none, or all, is refused rather than rounded to one."""
    groups = same_rows(keys)
    n, distinct = len(keys), len(groups)
    if distinct < 2:
        what = f"{n} example" + ("s, all with one text" if n > 1 else "")
        raise ElectraError(
            f"{path} holds {what}: --dev-split needs two different ones at least (one to train "
            "on, one to score): add examples, or pass a --dev FILE"
        )
    k = round(distinct * fraction)
    if not 1 <= k < distinct:
        bound = f"at least {1 / distinct:.3g}" if k < 1 else f"at most {1 - 1 / distinct:.3g}"
        side = "none as dev" if k < 1 else "none to train on"
        raise ElectraError(
            f"--dev-split {fraction:g} of the {distinct} different examples of {path} leaves "
            f"{side}: pass a fraction {bound}, or a --dev FILE"
        )
    # Without copies this is the draw of positions it always was: the same rows for a seed.
    dev = sorted(i for g in random.Random(seed).sample(range(distinct), k) for i in groups[g])
    return HeldOut(str(path), sha256, fraction, seed, n, tuple(dev), n - distinct)


def one_file_as_train(data: str | Path | Mapping) -> str | Path | Mapping:
    """A lone file given as --data is the training file, and only that: reading it as the dev
    and test split too would score the model on its own training rows."""
    if not isinstance(data, Mapping) and Path(data).is_file():
        return {"train": Path(data)}
    return data


def no_dev_error(
    data: str | Path | Mapping, train_file: Path, task: str, expected: list[str]
) -> ElectraError:
    """No dev split, and none asked for: the flags that give one."""
    if isinstance(data, Mapping):
        where = f"{train_file} is the only file given"
    else:
        where = f"no dev split for {task} in {data} (expected {' or '.join(expected)})"
    return ElectraError(
        f"{where}, and a score must come from examples the model did not train on: pass "
        "--dev-split 0.1 to hold out a seeded 10% of the training examples as dev, or --dev FILE"
    )


def trained_on(path: Path, record: dict[str, Any] | None) -> bool:
    """Whether `path` is the file a fine-tuned model's `record` ({"file", "sha256"}) trained on:
    the same contents, wherever the file now lies."""
    return bool(record) and file_sha256(path) == record["sha256"]
