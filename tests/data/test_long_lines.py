"""Long lines and what is read of them (issue 46, items 2, 7 and 8): `predict` reads a line of
standard input a bounded piece at a time and skips what the model cannot use, saying how much;
tokenising cuts a text to a prefix that holds more than the model reads before encoding it;
`prepare` and `tokenizer train` read a long line whole, in pieces; a corpus folder names the files
it skips; a bad byte on standard input names its own line; a killed `prepare` leaves no traceback
and its temporary folder is cleaned by the next one."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from electra.data.corpus import ReadStats, iter_documents, resolve_paths
from electra.data.textcut import MAX_CHARS_PER_TOKEN, cut_to_tokens
from electra.data.tokenizer import load_tokenizer, train_tokenizer
from electra.errors import ElectraError
from electra.finetuning.predict import LineCuts, _utf8_lines, line_chars
from electra.tasks.base import token_ids
from tests.data.test_data import word_tok  # noqa: F401 (a fixture)

from ..conftest import assert_one_line_error, predict_cli, run_cli
from ..finetuned_models import finetuned
from ..numerics import encoder_depth, rounding_bound


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    return finetuned(tmp_path_factory, "sst2")


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i % 1000}" for i in range(start, start + n))


# --------------------------------------------------------------------- cutting before tokenising


def test_a_long_text_is_cut_to_a_prefix_that_keeps_the_models_tokens(word_tok):  # noqa: F811
    tok = load_tokenizer(word_tok)
    text = words(200_000)
    kept, cut = cut_to_tokens(tok, text, 512)
    assert 512 < len(tok.encode(kept, add_special_tokens=False).ids) < 2000
    assert cut == len(text) - len(kept) and text.startswith(kept) and text[len(kept)] == " "
    whole = tok.encode(text, add_special_tokens=False).ids
    assert tok.encode(kept, add_special_tokens=False).ids[:512] == whole[:512]
    assert cut_to_tokens(tok, words(100), 512) == (words(100), 0)  # short: untouched


def test_token_ids_never_hands_the_tokenizer_a_whole_long_text(word_tok):  # noqa: F811
    """evaluate's and predict's tokenising (`electra.tasks.base.token_ids`): a 1.2 MB text is
    tokenised in prefixes of tens of thousands of characters, and gives the same first tokens."""
    tok = load_tokenizer(word_tok)
    seen = []

    class Recording:
        def encode(self, text, **kw):
            seen.append(len(text))
            return tok.encode(text, **kw)

        def encode_batch(self, texts, **kw):
            seen.extend(map(len, texts))
            return tok.encode_batch(texts, **kw)

    text = words(300_000)
    [ids] = token_ids(Recording(), [text])
    assert max(seen) < 300_000 < len(text)
    assert len(ids) > 8192 and ids[:8192] == tok.encode(text, add_special_tokens=False).ids[:8192]


def test_a_text_of_whitespace_is_cut_at_a_bound_not_tokenised_whole(word_tok):  # noqa: F811
    """Runs of whitespace make no tokens: growing prefixes never pass the budget, so the cut is
    at `MAX_CHARS_PER_TOKEN` characters a token, not the whole text."""
    tok = load_tokenizer(word_tok)
    text = "a" + " " * 2_000_000 + "b"
    kept, cut = cut_to_tokens(tok, text, 512)
    assert len(kept) <= 512 * MAX_CHARS_PER_TOKEN and cut == len(text) - len(kept) > 0


# ------------------------------------------------------------------------ predict's standard input


class Stdin:
    """Standard input over bytes, recording the largest read asked of it."""

    def __init__(self, data: bytes):
        self.buffer = self
        self.raw = io.BytesIO(data)
        self.largest = 0

    def readline(self, size=-1):
        assert size > 0, "a line is read whole"
        self.largest = max(self.largest, size)
        return self.raw.readline(size)


def test_a_long_line_is_read_a_bounded_piece_at_a_time_and_the_rest_counted():
    long = "\u00e9" * 3_000_000  # 6 MB of two-byte characters
    stdin = Stdin(f"short\n{long}\nafter\n".encode())
    cuts = LineCuts()
    lines = list(_utf8_lines(stdin, 1000, cuts))
    assert lines == ["short\n", "\u00e9" * 1000, "after\n"]
    assert (cuts.lines, cuts.chars) == (1, 3_000_000 - 1000)
    assert stdin.largest <= 1 << 20  # never the whole line


def test_a_bad_byte_on_standard_input_names_its_own_line(sst2, capsys, monkeypatch):
    data = "".join(f"sentence {i}\n" for i in range(2999)).encode() + b"bad \xff here\nok\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, _, err = predict_cli(capsys, sst2, "-")
    assert_one_line_error(code, err, "standard input, line 3000:", "not UTF-8", "save it as UTF-8")


@pytest.mark.numeric
def test_predict_on_a_long_line_gives_the_short_lines_record_and_says_what_was_cut(
    sst2, capsys, monkeypatch
):
    """The model reads its first tokens either way; the rest of the long line is never read."""
    long = "a fine and warm film " * 100_000  # 2.1 MB
    short = "a fine and warm film " * 100  # more tokens than the model reads, few characters
    data = f"{short}\n{long}\n".encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, out, err = predict_cli(capsys, sst2, "-")
    assert code == 0, err
    first, second = (json.loads(line) for line in out.splitlines())
    # The same tokens, two rows of one batch: they may differ only as two summation orders of the
    # classifier's reductions do (its layers, embeddings and head, the longest sum the
    # intermediate size), on a probability.
    best = json.loads((sst2 / "results.json").read_text())["best_seed_dir"]
    cfg = json.loads((sst2 / best / "config.json").read_text())
    depth = encoder_depth(cfg["num_hidden_layers"], 9)
    bound = rounding_bound(torch.float32, cfg["intermediate_size"], depth)
    assert first["label"] == second["label"]
    assert first["score"] == pytest.approx(second["score"], abs=bound)
    found = re.search(r"warning: 1 of 2 input lines were longer than ([\d,]+) characters", err)
    assert found, err
    limit = int(found[1].replace(",", ""))
    assert f"({len(long) - limit:,} characters)" in err
    assert "2 of 2 inputs were longer than the model's" in err  # both cut to its tokens


def test_qa_reads_a_long_context_further_than_a_classifier():
    from electra.tasks import get_task

    assert line_chars(get_task("qa"), 384) > 100 * line_chars(get_task("sst2"), 128)


# ------------------------------------------------------------------ prepare and tokenizer train


def test_prepare_keeps_every_token_of_a_long_line(tmp_path, word_tok, capsys):  # noqa: F811
    corpus = tmp_path / "c.txt"
    corpus.write_text(f"{words(10)}\n{words(150_000)}\n\n{words(20)}\n")  # a 750 kB line
    args = ["prepare", corpus, "--tokenizer", word_tok, "--seq-len", 32, "--out", tmp_path / "d"]
    code, out, err = run_cli(capsys, *args, "--workers", 1)
    assert code == 0, err
    read = 10 + 150_000 + 20
    assert f"corpus tokens: {read} read, {read} kept (100.0%), 0 dropped" in out
    assert "note: 1 corpus lines were longer than 100,000 characters" in err
    assert "nothing dropped" in err


def test_tokenizer_train_reads_past_the_first_100000_characters_and_says_so(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("alpha " * 20_000 + "zebraword " * 5_000 + "\n")  # zebras from 120,000
    tok = train_tokenizer([corpus], vocab_size=200, min_frequency=2)
    assert tok.token_to_id("zebraword") is not None
    err = capsys.readouterr().err
    assert "1 corpus lines were longer than 100,000 characters" in err


def test_a_corpus_folder_names_what_it_skips_and_why(tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("prose\n")
    (folder / "b.txt.gz").write_bytes(b"\x1f\x8b binary but a format we read")
    (folder / "t.csv").write_text("text,label\nfine,1\n")
    (folder / "u.tsv").write_text("text\tlabel\n")
    (folder / "state.json").write_text("{}")
    (folder / "model.bin").write_bytes(b"\x00\x01\x02" * 100)
    found = resolve_paths([str(folder)])
    assert [p.name for p in found] == ["a.txt", "b.txt.gz"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"skipped 4 of 6 files in {folder}" in err
    assert "2 .csv/.tsv tables: pass them as files to read them as text lines" in err
    assert "1 .json metadata" in err and "1 binary" in err
    # Given by name, a table is read as text lines, as asked.
    assert resolve_paths([str(folder / "t.csv")]) == [folder / "t.csv"]
    assert list(iter_documents([folder / "t.csv"])) == [["text,label", "fine,1"]]
    # A folder of tables only says what it holds.
    for name in ("a.txt", "b.txt.gz", "state.json", "model.bin"):
        (folder / name).unlink()
    with pytest.raises(ElectraError, match=r"corpus folder .* holds no text file to read \(2 "):
        resolve_paths([str(folder)])


def test_an_oversized_jsonl_record_is_skipped_counted_and_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("electra.data.corpus.MAX_JSONL_RECORD_BYTES", 100)
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"text": "x " * 200}) + "\n" + json.dumps({"text": "kept"}) + "\n")
    stats = ReadStats()
    assert list(iter_documents([path], stats)) == [["kept"]]
    assert (stats.skipped_records, stats.skipped_bytes) == (1, 413)
    assert f"{path} line 1: JSON record over 100 bytes, skipped" in capsys.readouterr().err


# --------------------------------------------------------------------------------- a killed prepare


def big_corpus(path, mb: int = 24):
    line = words(40) + "\n"
    with open(path, "w") as f:
        for i in range(mb * 1_000_000 // len(line)):
            f.write(line if i % 30 else "\n" + line)
    return path


def read_all(stream, into: list) -> threading.Thread:
    thread = threading.Thread(target=lambda: into.append(stream.read()), daemon=True)
    thread.start()
    return thread


def test_a_killed_prepare_is_quiet_and_the_next_one_cleans_its_folder(
    tmp_path,
    word_tok,  # noqa: F811
):
    corpus = big_corpus(tmp_path / "c.txt")
    out = tmp_path / "data"
    command = [sys.executable, "-m", "electra.cli", "prepare", str(corpus)]
    command += ["--tokenizer", str(word_tok), "--seq-len", "32", "--out", str(out)]
    proc = subprocess.Popen(
        [*command, "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    err: list[bytes] = []
    reader = read_all(proc.stderr, err)
    deadline = time.time() + 60
    while not list(tmp_path.glob(".data.tmp-*/shard_*")) and time.time() < deadline:
        time.sleep(0.05)  # the workers are packing: the first shard is out
    assert proc.poll() is None, "prepare ended before it could be killed: use a larger corpus"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(timeout=30)  # until every worker has closed its end of stderr
    assert not reader.is_alive(), "a worker outlived its parent"
    assert b"Traceback" not in err[0] and b"BrokenPipe" not in err[0], err[0].decode()
    [stale] = tmp_path.glob(".data.tmp-*")

    small = tmp_path / "small.txt"
    small.write_text(words(2000) + "\n")
    command[4] = str(small)  # the next prepare into the same --out, quicker
    result = subprocess.run([*command, "--workers", "1"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert f"note: removed {stale}, the unfinished output of an earlier prepare" in result.stderr
    assert not stale.exists() and (out / "meta.json").is_file()


def test_evaluate_says_how_many_inputs_it_cut(tmp_path_factory, tmp_path, capsys):
    """evaluate cut texts past the model's length without a word; it says so now, as predict
    does, and records the count."""
    model = finetuned(tmp_path_factory, "sst2")  # max_seq_len 48
    data = tmp_path / "sst"
    data.mkdir()
    rows = [["sentence", "label"], [words(5000, start=3), "1"], ["a short one", "0"]]
    (data / "dev.tsv").write_text("".join("\t".join(r) + "\n" for r in rows))
    out = tmp_path / "eval"
    code, _, err = run_cli(
        capsys, "evaluate", "--model", model, "--dev", data / "dev.tsv", "--out", out
    )
    assert code == 0, err
    assert "warning: dev: 1 of 2 inputs were longer than the model's 48 tokens" in err
    assert json.loads((out / "results.json").read_text())["truncated"] == {"dev": 1}
