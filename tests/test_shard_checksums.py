"""A data folder's shards carry their SHA-256 in meta.json, checked once per process when the folder
is opened: a flipped byte refuses the folder (and `pretrain`) with one line naming the shard and
saying to run prepare again; a folder written before digests were kept opens as it did."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import electra.data.store as store
from electra.data.prepare import prepare
from electra.data.store import CHECKSUM, PretrainingData, file_digest

from .conftest import assert_one_line_error, run_cli
from .test_data import marker_corpus, word_tok  # noqa: F401 (a fixture)


@pytest.fixture
def folder(tmp_path, word_tok):  # noqa: F811 (the fixture imported above)
    corpus = marker_corpus(tmp_path / "c.txt", 300)
    prepare([str(corpus)], word_tok, 16, tmp_path / "data", workers=1, shard_size=64)
    store._checked.clear()  # each test opens its folder as a new process would
    return tmp_path / "data"


def flip_byte(path, at=-5):
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_every_shard_file_has_its_digest_in_meta(folder):
    meta = json.loads((folder / "meta.json").read_text())
    assert len(meta["shards"]) > 2
    for shard in meta["shards"]:
        assert set(shard[CHECKSUM]) == {"ids", "lengths"}
        for role, digest in shard[CHECKSUM].items():
            assert file_digest(folder / shard[role]) == digest
    assert len(PretrainingData(folder)) == meta["num_examples"]


@pytest.mark.parametrize("role", ["ids", "lengths"])
def test_a_flipped_byte_in_a_shard_refuses_the_folder(folder, role):
    shard = json.loads((folder / "meta.json").read_text())["shards"][1]
    flip_byte(folder / shard[role])
    with pytest.raises(store.ElectraError) as e:
        PretrainingData(folder)
    message = str(e.value)
    assert str(folder / shard[role]) in message and "run `electra prepare` again" in message
    assert "\n" not in message


def test_pretrain_refuses_a_flipped_shard_in_one_line(folder, tmp_path, capsys):
    shard = json.loads((folder / "meta.json").read_text())["shards"][0]
    flip_byte(folder / shard["ids"], at=200)  # a token id in the first rows
    code, _, err = run_cli(
        capsys,
        "pretrain",
        "--preset",
        "tiny",
        "--data",
        folder,
        "--out",
        tmp_path / "run",
        "--steps",
        2,
        "--batch-size",
        4,
        "--seq-len",
        16,
        "--train.progress",
        "false",
        "--train.tensorboard=false",
        "--model.num_hidden_layers",
        1,
    )
    assert_one_line_error(code, err, shard["ids"], "run `electra prepare` again")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_folder_without_digests_opens_as_before(folder):
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    for shard in meta["shards"]:
        del shard[CHECKSUM]
    meta_path.write_text(json.dumps(meta))
    data = PretrainingData(folder)
    assert len(data) == meta["num_examples"]


def test_the_digests_are_read_once_per_process(folder, monkeypatch):
    PretrainingData(folder)
    calls = []
    monkeypatch.setattr(store, "file_digest", lambda path: calls.append(path) or "")
    PretrainingData(folder)  # the settings' look, then the run's open: hashed once
    assert calls == []
    # A shard rewritten since (a new mtime) is read again, and refused.
    shard = folder / json.loads((folder / "meta.json").read_text())["shards"][0]["ids"]
    time.sleep(0.01)
    np.save(shard, np.load(shard))
    with pytest.raises(store.ElectraError, match="run `electra prepare` again"):
        PretrainingData(folder)
    assert calls == [shard]


def test_hashing_costs_little_next_to_reading(tmp_path):
    """The digest of a shard of 65,536 rows of 128 (16 MB) takes well under a second."""
    path = tmp_path / "shard.npy"
    np.save(path, np.random.default_rng(0).integers(0, 30000, (65536, 128), dtype=np.uint16))
    start = time.perf_counter()
    file_digest(path)
    assert time.perf_counter() - start < 1.0
