"""A data folder's shards carry their SHA-256 in meta.json, checked once per process when the folder
is opened: a flipped byte refuses the folder (and `pretrain`) with one line naming the shard and
saying to run prepare again; a folder written before digests were kept opens as it did."""

from __future__ import annotations

import json
import os

import pytest

import electra.data.store as store
from electra.data.prepare import prepare
from electra.data.store import CHECKSUM, PretrainingData, file_sha256
from tests.data.test_data import marker_corpus, word_tok  # noqa: F401 (a fixture)

from ..conftest import assert_one_line_error, run_cli


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
            assert file_sha256(folder / shard[role]) == digest
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
    calls, real = [], store.file_sha256
    monkeypatch.setattr(store, "file_sha256", lambda path: calls.append(path) or real(path))
    PretrainingData(folder)  # the settings' look, then the run's open: hashed once
    assert calls == []
    # A shard changed since (a flipped byte, a new modification time) is read again, and refused.
    shard = folder / json.loads((folder / "meta.json").read_text())["shards"][0]["ids"]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    stat = shard.stat()
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    with pytest.raises(store.ElectraError, match="run `electra prepare` again"):
        PretrainingData(folder)
    assert calls == [shard]
