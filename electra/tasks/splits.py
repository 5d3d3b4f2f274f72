"""A data source resolved, once, into its split files (`Task.resolve`): a folder of split files,
one file, or the files given one by one (`--train/--dev/--test`).

`finetune` and `evaluate` resolve what they were given before reading anything; everything after
asks the resolved `SplitFiles` for a split's files, so a task's file names and formats are looked
up in one place. A split that is absent keeps the reason, said where the split is needed; a split
that is there but unreadable as given (two formats, an unknown format, a folder as --dev) is an
error wherever it is asked about.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from electra.errors import ElectraError

SPLITS = ("train", "dev", "test")
DataSource = str | Path | Mapping[str, str | Path]  # a folder, one file, or {split: file}


def source_paths(data: DataSource | None) -> list[str | Path]:
    """The folder or files a `DataSource` names (what a command reads: not to be overwritten)."""
    if data is None:
        return []
    return list(data.values()) if isinstance(data, Mapping) else [data]


# How a task finds one split: {evaluation set name: file}, or why there is none.
Locate = Callable[[Path | Mapping[str, str | Path], str], "dict[str, Path] | str"]


@dataclass(frozen=True)
class SplitFiles:
    """The files of each split found, by evaluation set name (MNLI's dev split has two)."""

    source: Path | Mapping[str, str | Path]  # as given: a folder, a file, or {split: file}
    found: dict[str, dict[str, Path]]
    missing: dict[str, str]  # split: why it is absent
    invalid: dict[str, ElectraError]  # split: what is wrong with the file(s) given for it

    def has(self, split: str) -> bool:
        """Whether the data holds `split` (for an optional one: test)."""
        if split in self.invalid:
            raise self.invalid[split]
        return split in self.found

    def __getitem__(self, split: str) -> dict[str, Path]:
        """The files of `split`; a clear error when it is missing."""
        if not self.has(split):
            raise ElectraError(self.missing[split])
        return self.found[split]

    def file(self, split: str) -> Path:
        """The one file of a split with one evaluation set (train)."""
        return next(iter(self[split].values()))

    @property
    def given(self) -> bool:
        """Whether the files were given one by one (--train/--dev/--test)."""
        return isinstance(self.source, Mapping)


def resolve(data: DataSource, locate: Locate) -> SplitFiles:
    """`data` resolved into the files of every split, each found by `locate`."""
    source = data if isinstance(data, Mapping) else Path(data)
    if isinstance(source, Path) and not source.exists():
        raise ElectraError(f"data not found: {source}")
    found, missing, invalid = {}, {}, {}
    for split in SPLITS:
        try:
            files = locate(source, split)
        except ElectraError as e:
            invalid[split] = e
            continue
        if isinstance(files, str):
            missing[split] = files
        else:
            found[split] = files
    return SplitFiles(source, found, missing, invalid)


def given_file(path: str | Path, split: str) -> Path:
    """A file given as --train/--dev/--test: a folder there is one error saying where it goes."""
    path = Path(path)
    if path.is_dir():
        raise ElectraError(
            f"--{split} {path} is a folder: --{split} takes a file; pass a folder of split "
            "files (train.*, dev.*, test.*) as --data"
        )
    return path
