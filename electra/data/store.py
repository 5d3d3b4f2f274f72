"""The shard store: a prepared data folder's format, memory-mapped shards read back as static-shape
batches."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from electra.data.tokenizer import (
    SpecialIds,
    fingerprint,
    load_tokenizer,
    special_ids,
)
from electra.errors import ElectraError

if TYPE_CHECKING:
    import torch

FORMAT = 1
MIN_SEQ_LEN = 8
MAX_SEQ_LEN = 8192  # lengths are stored as int16; full attention is impractical beyond this
# Each shard file's digest, kept in meta.json by `prepare` and checked once per process at open:
# SHA-256 reads 1.3 GB/s on a CPU with SHA extensions (a 16 MB shard of 65,536 rows of 128 in
# 12 ms), and a flipped byte in a shard would otherwise train on silently.
CHECKSUM = "sha256"
_HASH_BLOCK = 4 << 20
# Shard files this process has checked: (path, size, mtime) -> checked, so that the settings'
# look at the folder and the run's own open read each file once.
_checked: set[tuple[str, int, int]] = set()


class PretrainingData:
    """A prepared data folder: memory-mapped shards plus the tokenizer they were built with."""

    def __init__(self, path: Path | str, seq_len: int | None = None):
        self.path = Path(path)
        meta_path = self.path / "meta.json"
        if not meta_path.is_file():
            what = "has no meta.json" if self.path.is_dir() else "does not exist"
            raise ElectraError(f"data folder {self.path} {what}: run `electra prepare` first")
        try:
            self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if self.meta.get("format") != FORMAT:
                raise ValueError(f"unknown format {self.meta.get('format')!r}")
            self.seq_len = int(self.meta["seq_len"])
            self.vocab_size = int(self.meta["vocab_size"])
            shards = [
                (s["ids"], s["lengths"], s.get("documents"), int(s["num_examples"]))
                for s in self.meta["shards"]
            ]
            sums = [s.get(CHECKSUM) or {} for s in self.meta["shards"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ElectraError(
                f"{meta_path} is invalid ({e}): rerun `electra prepare` to rebuild the folder"
            ) from None
        if seq_len is not None and seq_len != self.seq_len:
            raise ElectraError(
                f"data folder {self.path} was built for seq len {self.seq_len}, not {seq_len}: "
                f"pass --seq-len {self.seq_len} (or --data.seq_len {self.seq_len}), or rebuild it "
                f"with `electra prepare --seq-len {seq_len}`"
            )

        self.tokenizer_path = self.path / "tokenizer"
        tok = load_tokenizer(self.tokenizer_path)
        if fingerprint(tok) != self.meta.get("tokenizer_fingerprint"):
            raise ElectraError(
                f"{self.tokenizer_path} is not the tokenizer the data was built with: "
                "rerun `electra prepare`"
            )
        self.special: SpecialIds = self._special_ids(tok)

        self._ids: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        # Each token's document number, where rows pack several documents (packing documents).
        self._documents: list[np.ndarray] = []
        for (ids_name, lengths_name, documents_name, n), digests in zip(shards, sums, strict=True):
            self._check(ids_name, lengths_name, documents_name, digests)
            ids = self._load(ids_name)
            lengths = self._load(lengths_name)
            documents = self._load(documents_name) if documents_name else None
            if (
                ids.shape != (n, self.seq_len)
                or lengths.shape != (n, 2)
                or (documents is not None and documents.shape != ids.shape)
            ):
                raise ElectraError(
                    f"shard {self.path / ids_name} does not match meta.json: rerun `electra prepare`"
                )
            self._ids.append(ids)
            self._lengths.append(lengths)
            if documents is not None:
                self._documents.append(documents)
        if self._documents and len(self._documents) != len(self._ids):
            raise ElectraError(
                f"{meta_path} lists document numbers for some shards only: rerun `electra prepare`"
            )
        counts = [len(ids) for ids in self._ids]
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    def _special_ids(self, tok) -> SpecialIds:
        """The special ids prepare recorded (a tokenizer's own names for them need not be
        BERT's); a folder without them falls back to the tokenizer's known spellings."""
        recorded = self.meta.get("special_ids")
        if recorded is None:
            return special_ids(tok, str(self.tokenizer_path))
        try:
            return SpecialIds(**{k: int(v) for k, v in recorded.items()})
        except (TypeError, ValueError, AttributeError):
            raise ElectraError(
                f"{self.path / 'meta.json'} has invalid special_ids {recorded!r}: rerun "
                "`electra prepare` to rebuild the folder"
            ) from None

    def _check(self, ids: str, lengths: str, documents: str | None, digests: dict) -> None:
        """Each file of a shard against the digest `prepare` recorded for it (a folder written
        before digests were recorded has none: taken as it is)."""
        for role, name in (("ids", ids), ("lengths", lengths), ("documents", documents)):
            expected = digests.get(role) if name else None
            if expected is None:
                if name and digests:  # recorded for the shard's other files, not this one
                    raise ElectraError(
                        f"{self.path / 'meta.json'} records no {CHECKSUM} for {name}: run "
                        f"`electra prepare` again to rebuild {self.path}"
                    )
                continue
            path = self.path / name
            try:
                stat = path.stat()
            except OSError as e:
                raise ElectraError(
                    f"cannot read shard {path} ({e.strerror}): run `electra prepare` again"
                ) from None
            key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
            if key in _checked:
                continue
            try:
                actual = file_sha256(path)
            except OSError as e:
                raise ElectraError(
                    f"cannot read shard {path} ({e.strerror}): run `electra prepare` again"
                ) from None
            if actual != expected:
                raise ElectraError(
                    f"shard {path} is not the file `electra prepare` wrote (its {CHECKSUM} "
                    "differs from meta.json's): run `electra prepare` again to rebuild "
                    f"{self.path}"
                )
            _checked.add(key)

    def _load(self, name: str) -> np.ndarray:
        try:
            return np.load(self.path / name, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise ElectraError(
                f"cannot read shard {self.path / name} ({e}): rerun `electra prepare`"
            ) from None

    @property
    def packs_documents(self) -> bool:
        """Whether rows may hold several documents, whose numbers `batch` can give."""
        return bool(self._documents)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def batch(
        self, indices: np.ndarray | torch.Tensor, documents: bool = False
    ) -> dict[str, torch.Tensor]:
        """input_ids, token_type_ids and attention_mask (int64 [B, T]) for these examples. With
        `documents`, where rows pack several documents, attention_mask holds each token's document
        number (0 for padding), which document-masked attention reads; else it is 1 for every
        real token."""
        import torch  # here, not at the top: prepare's spawned workers need not load torch

        if isinstance(indices, torch.Tensor):
            indices = indices.cpu().numpy()
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"example index out of range 0..{len(self) - 1}")
        ids = np.empty((len(indices), self.seq_len), dtype=np.int64)
        lengths = np.empty((len(indices), 2), dtype=np.int64)
        numbers = np.empty_like(ids) if documents and self._documents else None
        shard_of = np.searchsorted(self._starts, indices, side="right") - 1
        for shard in np.unique(shard_of):
            rows = np.flatnonzero(shard_of == shard)
            local = indices[rows] - self._starts[shard]
            ids[rows] = self._ids[shard][local]
            lengths[rows] = self._lengths[shard][local]
            if numbers is not None:
                numbers[rows] = self._documents[shard][local]
        positions = np.arange(self.seq_len)
        attention = positions < lengths[:, 1:2]
        token_type = attention & (positions >= lengths[:, 0:1])
        return {
            "input_ids": torch.from_numpy(ids),
            "token_type_ids": torch.from_numpy(token_type.astype(np.int64)),
            "attention_mask": torch.from_numpy(
                attention.astype(np.int64) if numbers is None else numbers
            ),
        }


class BatchStream:
    """Endless, deterministic batches: a fresh seeded permutation per epoch, tail dropped.

    Each step takes the next batch_size * world_size examples of the permutation; this rank
    gets its own batch_size slice, so ranks never share an example within an epoch.
    """

    def __init__(
        self,
        data: PretrainingData,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        documents: bool = False,
    ):
        check_int("batch_size", batch_size, 1, None)
        check_int("world_size", world_size, 1, None)
        check_int("rank", rank, 0, world_size - 1, f" (world_size is {world_size})")
        check_int("seed", seed, None, None)
        self.data = data
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.documents = documents  # give document numbers (`PretrainingData.batch`)
        self.step_size = batch_size * world_size
        if len(data) < self.step_size:
            raise ElectraError(
                f"data folder {data.path} has {len(data)} examples, fewer than one batch of "
                f"{self.step_size} ({batch_size} x {world_size} processes): lower the batch "
                "size or add text"
            )
        self.epoch = 0
        self.offset = 0
        self._permutation: torch.Tensor | None = None
        self._permutation_epoch = -1

    def state_dict(self) -> dict:
        """Position of the next batch; `load_state_dict` of it resumes exactly there."""
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict) -> None:
        try:
            epoch, offset = int(state["epoch"]), int(state["offset"])
        except (KeyError, TypeError, ValueError):
            raise ElectraError(
                f"batch stream state {state!r} is invalid: it needs integer epoch and offset"
            ) from None
        if epoch < 0 or not 0 <= offset <= len(self.data):
            raise ElectraError(
                f"batch stream state {state!r} does not fit data of {len(self.data)} examples: "
                "resume with the data folder the run started with"
            )
        self.epoch, self.offset = epoch, offset
        self._skip_incomplete()

    def __iter__(self) -> BatchStream:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        self._skip_incomplete()
        start = self.offset + self.rank * self.batch_size
        indices = self._epoch_permutation()[start : start + self.batch_size]
        self.offset += self.step_size
        self._skip_incomplete()
        return self.data.batch(indices, self.documents)

    def _skip_incomplete(self) -> None:
        if self.offset + self.step_size > len(self.data):
            self.epoch += 1
            self.offset = 0

    def _epoch_permutation(self) -> torch.Tensor:
        import torch

        if self._permutation_epoch != self.epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            self._permutation = torch.randperm(len(self.data), generator=generator)
            self._permutation_epoch = self.epoch
        return self._permutation


def file_sha256(path: str | Path) -> str:
    """The hex SHA-256 of a file, read a block at a time: a shard's checksum, a checkpoint's, a
    fine-tuned model's training file's."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def check_int(name: str, value: object, low: int | None, high: int | None, why: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ElectraError(f"{name} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ElectraError(f"{name} must be at least {low}, got {value}{why}")
    if high is not None and value > high:
        raise ElectraError(f"{name} must be at most {high}, got {value}{why}")
