"""Operating-system errors are one line: a read-only output folder, an output path under a file, a
full disk (also as safetensors and torch.save report it) or an unreadable input end a command with
`electra: error: PATH: cause: what to do` and exit 2, leaving nothing half-written.

The faults are made here: a read-only folder by chmod (as root, which ignores permissions, by a
read-only tmpfs where one can be mounted), a full disk by a tiny tmpfs where one can be mounted,
and otherwise, so that every case runs for every user, by writes that raise."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

import electra.folders.model_folder
from electra.atomic import atomic_dir, atomic_path, writing
from electra.cli.os_errors import os_error_line
from electra.hf.export import export_hf

from ..conftest import assert_one_line_error, run_cli

COMMANDS = ["tokenizer", "prepare", "finetune", "export", "predict", "plot", "demo"]


@contextmanager
def mounted_tmpfs(path: Path, options: str):
    """A tmpfs at `path` (root only); skips the test where none can be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root; the monkeypatched tests stand in")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True
    )
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip()})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextmanager
def read_only_folder(path: Path):
    """A folder nobody may write in: by chmod for a user, a read-only tmpfs for root."""
    if os.geteuid() == 0:
        with mounted_tmpfs(path, "size=64k,ro"):
            yield path
        return
    path.mkdir()
    path.chmod(0o555)
    try:
        yield path
    finally:
        path.chmod(0o755)


@pytest.fixture
def inputs(tmp_path):
    """A corpus and a run folder with metrics, for the commands that read them."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nthe dog ran to the house\n" * 50)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "mlm_loss": 2.0, "disc_auc": 0.6}) + "\n"
    )
    return corpus, run


def command(kind: str, out: Path, inputs, model: Path) -> list:
    corpus, run = inputs
    argv = {
        "tokenizer": ["tokenizer", "train", corpus, "--vocab-size", "60"],
        "prepare": ["prepare", corpus, "--tokenizer", model, "--seq-len", "16"],
        "finetune": ["finetune", "--model", model, "--task", "sst2", "--data", corpus.parent],
        "export": ["export", "--model", model],
        "predict": ["predict", "--model", model, corpus],
        "plot": ["plot", run],
        "demo": ["demo"],
    }[kind]
    return [*argv, "--out", out]


@pytest.mark.parametrize("kind", COMMANDS)
def test_a_read_only_output_folder_is_one_line(kind, tmp_path, inputs, tiny_pretrained, capsys):
    with read_only_folder(tmp_path / "ro") as ro:
        out = ro / ("p.png" if kind == "plot" else "out")
        code, _, err = run_cli(capsys, *command(kind, out, inputs, tiny_pretrained))
        cause = "Read-only file system" if os.geteuid() == 0 else "Permission denied"
        assert_one_line_error(code, err, str(out), cause, "choose another --out")
        assert "Traceback" not in err and os.listdir(ro) == []


@pytest.mark.parametrize("kind", COMMANDS)
def test_an_output_path_under_a_file_is_one_line(kind, tmp_path, inputs, tiny_pretrained, capsys):
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    out = tmp_path / "notes.txt" / "sub" / "out"
    code, _, err = run_cli(capsys, *command(kind, out, inputs, tiny_pretrained))
    assert_one_line_error(code, err, "notes.txt", "Not a directory", "a part of the path is a file")
    assert (tmp_path / "notes.txt").read_text() == "a file, not a folder"


def test_a_refused_write_is_one_line_for_root_too(tmp_path, inputs, capsys, monkeypatch):
    """The same as a read-only folder, by a write that raises: it runs as any user."""

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "tok" / "x"))

    monkeypatch.setattr("electra.data.tokenizer_folder.save_tokenizer", refused)
    code, _, err = run_cli(capsys, *command("tokenizer", tmp_path / "tok", inputs, Path()))
    assert_one_line_error(code, err, "tok/x: Permission denied", "check the permissions")
    assert not (tmp_path / "tok").exists() and not list(tmp_path.glob(".tok*"))


def test_an_unreadable_input_is_one_line(tmp_path, capsys, monkeypatch, inputs):
    corpus, _ = inputs

    def unreadable(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(corpus))

    monkeypatch.setattr("electra.data.tokenizer_folder.resolve_paths", unreadable)
    code, _, err = run_cli(capsys, *command("tokenizer", tmp_path / "tok", inputs, Path()))
    assert_one_line_error(code, err, f"{corpus}: Permission denied", "check the permissions")


def test_a_full_disk_while_exporting_is_one_line_and_leaves_nothing(
    tiny_pretrained, tmp_path, capsys
):
    with mounted_tmpfs(tmp_path / "small", "size=64k") as small:
        out = small / "hf"
        code, _, err = run_cli(capsys, "export", "--model", tiny_pretrained, "--out", out)
        assert_one_line_error(code, err, str(out), "No space left on device", "free space")
        assert os.listdir(small) == []  # no half folder, no temporary, no lock


def test_safetensors_on_a_full_disk_is_an_os_error_naming_the_file(
    tiny_pretrained, tmp_path, capsys, monkeypatch
):
    """safetensors raises its own error on a full disk ("os error 28"): export says it as the
    disk's error, naming the file the user asked for, not the temporary one."""

    def disk_fills(state, path, metadata=None):
        Path(path).write_bytes(b"partial")
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(electra.folders.model_folder, "save_file", disk_fills)
    out = tmp_path / "hf"
    code, _, err = run_cli(capsys, "export", "--model", tiny_pretrained, "--out", out)
    assert_one_line_error(
        code, err, f"{out / 'model.safetensors'}: No space left on device", "free space"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(OSError) as e:
        export_hf(tiny_pretrained, out)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(out / "model.safetensors")


def test_torch_save_on_a_full_disk_becomes_enospc(tmp_path, monkeypatch):
    """torch.save's RuntimeError on a full disk says only "unexpected pos": a disk with no space
    left makes it ENOSPC; on a disk with room it is an I/O error in torch's words; other
    RuntimeErrors pass as they are."""
    path = tmp_path / "state.pt"

    def full_torch_save(*args):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    monkeypatch.setattr(torch, "save", full_torch_save)
    monkeypatch.setattr("shutil.disk_usage", lambda p: type("U", (), {"free": 0})())
    with pytest.raises(OSError) as e, writing(path):
        torch.save({}, path)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path)
    monkeypatch.setattr("shutil.disk_usage", lambda p: type("U", (), {"free": 1 << 30})())
    with pytest.raises(OSError) as e, writing(path):
        torch.save({}, path)
    assert e.value.errno == errno.EIO and e.value.strerror == "unexpected pos 576 vs 534"
    with pytest.raises(RuntimeError, match="a kernel's"), writing(path):
        raise RuntimeError("a kernel's error")
    with pytest.raises(ValueError), writing(path):
        raise ValueError("not a disk's error")


def test_an_error_inside_an_atomic_write_names_the_target(tmp_path):
    with pytest.raises(OSError) as e, atomic_path(tmp_path / "a.json") as tmp:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert e.value.filename == str(tmp_path / "a.json")
    with pytest.raises(OSError) as e, atomic_dir(tmp_path / "folder") as tmp:
        raise OSError(errno.ENOSPC, "No space left on device")  # a write to an open file
    assert e.value.filename == str(tmp_path / "folder")
    with pytest.raises(OSError) as e, atomic_dir(tmp_path / "folder") as tmp:
        raise OSError(errno.EIO, "Input/output error", str(tmp / "shard_0.bin"))
    assert e.value.filename == str(tmp_path / "folder" / "shard_0.bin")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("code", "remedy"),
    [
        (errno.EACCES, "check the permissions of the file and its folder"),
        (errno.EROFS, "the file system is read-only: choose another --out"),
        (errno.ENOSPC, "free space and run it again"),
        (errno.EDQUOT, "quota"),
        (errno.ENOTDIR, "a part of the path is a file: choose another path"),
        (errno.EISDIR, "it is a folder where a file was expected"),
        (errno.ENOENT, "check the path"),
        (errno.ELOOP, "check the path and the disk"),
    ],
)
def test_each_errno_has_its_remedy(code, remedy):
    line = os_error_line(OSError(code, os.strerror(code), "/a/b", None, "/c\nd"))
    assert line.startswith(f"/a/b -> /c d: {os.strerror(code)}: ") and remedy in line
    assert "\n" not in line
    assert os_error_line(OSError(code, os.strerror(code))).startswith(os.strerror(code))


def test_the_tokenizers_library_error_on_a_full_disk_becomes_enospc(tmp_path):
    """`tokenizers` raises a bare Exception with the system's words."""
    path = tmp_path / "tokenizer.json"
    with pytest.raises(OSError) as e, writing(path):
        raise Exception("No space left on device (os error 28)")  # noqa: TRY002
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path)
    with pytest.raises(Exception, match="a library's own"), writing(path):
        raise Exception("a library's own")  # noqa: TRY002


def test_a_short_write_without_an_errno_reads_as_a_full_disk(tmp_path, monkeypatch):
    """numpy's `tofile` on a full disk raises OSError("N requested and M written"), no errno:
    on a disk with no room it is ENOSPC; elsewhere its own words, never "[Errno None] None"."""
    monkeypatch.setattr("shutil.disk_usage", lambda p: type("U", (), {"free": 0})())
    with pytest.raises(OSError) as e, atomic_dir(tmp_path / "data"):
        raise OSError("152864 requested and 10176 written")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "data")
    assert os_error_line(e.value).startswith(f"{tmp_path / 'data'}: No space left on device: free")
    monkeypatch.setattr("shutil.disk_usage", lambda p: type("U", (), {"free": 1 << 30})())
    with pytest.raises(OSError) as e, atomic_dir(tmp_path / "data"):
        raise OSError("152864 requested and 10176 written")
    assert "152864 requested and 10176 written" in os_error_line(e.value)
    assert "None" not in os_error_line(e.value)
