"""`prepare` (carrying and official ELECTRA packing, sharded store), `PretrainingData` and
`BatchStream`."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import electra.data.prepare
from electra.data.prepare import CarryingBuilder, ExampleBuilder, prepare
from electra.data.store import BatchStream, PretrainingData
from electra.data.tokenizer import SPECIAL_TOKENS, load_tokenizer, save_tokenizer, train_tokenizer
from electra.errors import ElectraError

from ..conftest import shared_data as need

PAD, UNK, CLS, SEP, MASK = range(5)
WORDS = 1000  # the word tokenizer knows w0 .. w999, one token each


def word_id(i: int) -> int:
    return len(SPECIAL_TOKENS) + i


@pytest.fixture(scope="module")
def word_tok(tmp_path_factory) -> Path:
    """A vocab.txt tokenizer where `w<i>` is always the single token word_id(i)."""
    folder = tmp_path_factory.mktemp("word_tok")
    tokens = [*SPECIAL_TOKENS, *(f"w{i}" for i in range(WORDS))]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")
    return folder


def write_docs(path: Path, docs: list[list[str]]) -> Path:
    path.write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n")
    return path


def marker_corpus(path: Path, num_docs: int, seed: int = 0) -> Path:
    """Document i repeats only the word w<i>, in lines of 1..30 words, 1..40 lines."""
    rng = random.Random(seed)
    docs = [
        [" ".join([f"w{i % WORDS}"] * rng.randint(1, 30)) for _ in range(rng.randint(1, 40))]
        for i in range(num_docs)
    ]
    return write_docs(path, docs)


def load_rows(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    meta = json.loads((folder / "meta.json").read_text())
    ids = np.concatenate([np.load(folder / s["ids"]) for s in meta["shards"]])
    lengths = np.concatenate([np.load(folder / s["lengths"]) for s in meta["shards"]])
    return ids, lengths


def check_layout(ids: np.ndarray, lengths: np.ndarray, seq_len: int) -> None:
    """Every row is [CLS] A [SEP] (B [SEP]) followed by padding only."""
    assert ids.shape[1] == seq_len and lengths.shape == (len(ids), 2)
    for row, (first, real) in zip(ids, lengths, strict=True):
        assert 3 <= first <= real <= seq_len  # A is never empty
        assert row[0] == CLS and CLS not in row[1:]
        assert (row[real:] == PAD).all() and PAD not in row[:real]
        seps = np.flatnonzero(row == SEP).tolist()
        if real == first:  # one segment
            assert seps == [real - 1]
        else:  # B holds at least one token
            assert seps == [first - 1, real - 1] and real - first >= 2


def files_bytes(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# ---------------------------------------------------------------- the packing rules


class OfficialBuilder:
    """Transcription of google-research/electra build_pretraining_dataset.ExampleBuilder,
    fed line by line like its write_examples (blank lines end documents, and so does file
    end); the one deliberate difference is that lines tokenizing to nothing are skipped."""

    def __init__(self, tok, max_length, rng):
        self.tok, self.rng = tok, rng
        self.current_sentences, self.current_length = [], 0
        self.max_length = self.target_length = max_length

    def add_line(self, line):
        line = line.strip().replace("\n", " ")
        if (not line) and self.current_length != 0:
            return self.create_example()
        tokids = self.tok.encode(line, add_special_tokens=False).ids
        if not tokids:
            return None
        self.current_sentences.append(tokids)
        self.current_length += len(tokids)
        if self.current_length >= self.target_length:
            return self.create_example()
        return None

    def create_example(self):
        if self.rng.random() < 0.1:
            first_segment_target_length = 100000
        else:
            first_segment_target_length = (self.target_length - 3) // 2
        first_segment, second_segment = [], []
        for sentence in self.current_sentences:
            if (
                len(first_segment) == 0
                or len(first_segment) + len(sentence) < first_segment_target_length
                or (
                    len(second_segment) == 0
                    and len(first_segment) < first_segment_target_length
                    and self.rng.random() < 0.5
                )
            ):
                first_segment += sentence
            else:
                second_segment += sentence
        first_segment = first_segment[: self.max_length - 2]
        second_segment = second_segment[: max(0, self.max_length - len(first_segment) - 3)]
        self.current_sentences, self.current_length = [], 0
        if self.rng.random() < 0.05:
            self.target_length = self.rng.randint(5, self.max_length)
        else:
            self.target_length = self.max_length
        input_ids = [CLS, *first_segment, SEP]
        first = len(input_ids)
        if second_segment:
            input_ids += [*second_segment, SEP]
        return input_ids, first


def official_rows(path: Path, tok, max_length: int, rng: random.Random) -> list:
    builder = OfficialBuilder(tok, max_length, rng)
    rows = []
    with path.open(encoding="utf-8") as f:
        for line in [*f, ""]:
            example = builder.add_line(line)
            if example:
                rows.append(example)
    return rows


@pytest.fixture(scope="module")
def wiki_tok(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wiki_tok")
    tok = train_tokenizer([need("wikitext-2-raw/wiki.valid.raw")], vocab_size=1000)
    save_tokenizer(tok, folder, lowercase=True)
    return folder


@pytest.fixture(scope="module")
def wiki_data(tmp_path_factory, wiki_tok) -> Path:
    out = tmp_path_factory.mktemp("wiki_data") / "data"
    prepare(
        [str(need("wikitext-2-raw/wiki.valid.raw"))],
        wiki_tok,
        128,
        out,
        workers=1,
        packing="official",
    )
    return out


def test_real_text_follows_the_official_packing_exactly(wiki_data, wiki_tok):
    source = need("wikitext-2-raw/wiki.valid.raw")
    meta = json.loads((wiki_data / "meta.json").read_text())
    ids, lengths = load_rows(wiki_data)
    check_layout(ids, lengths, 128)
    assert meta["num_examples"] == len(ids) > 1000
    assert meta["num_tokens"] == int(lengths[:, 1].sum())
    assert meta["seq_len"] == 128 and meta["dtype"] == "uint16" and ids.dtype == np.uint16

    # The corpus is a single chunk, so its builder RNG is seeded "<seed>-0".
    expected = official_rows(
        source, load_tokenizer(wiki_tok), 128, random.Random(f"{meta['seed']}-0")
    )
    assert len(expected) == len(ids)
    for row, (first, real), (want, want_first) in zip(ids, lengths, expected, strict=True):
        assert row[:real].tolist() == want and first == want_first


def test_real_text_segment_and_target_rates(wiki_data):
    meta = json.loads((wiki_data / "meta.json").read_text())
    n = meta["num_examples"]
    assert 0.06 < meta["builder"]["single_segment"] / n < 0.14
    assert 0.02 < meta["builder"]["random_target"] / n < 0.09


def corpus_token_stream(path: Path, tok) -> list[int]:
    """The corpus's word pieces in order, read independently of `prepare`."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [i for line in lines if line for i in tok.encode(line, add_special_tokens=False).ids]


def shard_token_stream(folder: Path) -> list[int]:
    ids, lengths = load_rows(folder)
    return [
        int(i) for row, (_, real) in zip(ids, lengths, strict=True) for i in row[:real] if i > MASK
    ]


def test_default_packing_keeps_every_token_of_paragraph_per_line_text(
    tmp_path, wiki_tok, wiki_data
):
    # WikiText-2 holds a paragraph per line: the official rule drops about a third of it.
    source = need("wikitext-2-raw/wiki.valid.raw")
    summary = prepare([str(source)], wiki_tok, 128, tmp_path / "out", workers=1)
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    stream = corpus_token_stream(source, load_tokenizer(wiki_tok))
    assert shard_token_stream(tmp_path / "out") == stream  # every token, in corpus order
    assert meta["text_tokens"] == {"read": len(stream), "kept": len(stream), "dropped": 0}
    assert summary["text_tokens"] == meta["text_tokens"] and meta["builder"]["packing"] == "carry"
    ids, lengths = load_rows(tmp_path / "out")
    check_layout(ids, lengths, 128)
    # Rows are at least as full as the official rule's (which fills, then cuts).
    assert lengths[:, 1].mean() >= load_rows(wiki_data)[1][:, 1].mean()
    vocab = load_tokenizer(wiki_tok).get_vocab()
    starts_word = {i for t, i in vocab.items() if not t.startswith("##")}
    # An example opens inside a word only when the word outgrows a whole (randomly short) one.
    assert sum(row[1] not in starts_word for row in ids) <= 0.001 * len(ids)
    n = meta["num_examples"]
    assert 0.06 < meta["builder"]["single_segment"] / n < 0.14
    assert 0.02 < meta["builder"]["random_target"] / n < 0.09


def test_official_packing_counts_and_warns_what_it_drops(wiki_data, capsys):
    # The official rule is kept for exact reproduction; its loss is counted, never silent.
    prepare(
        [str(need("wikitext-2-raw/wiki.valid.raw"))],
        wiki_data / "tokenizer",
        128,
        wiki_data.parent / "again",
        workers=1,
        packing="official",
    )
    meta = json.loads((wiki_data / "meta.json").read_text())
    tokens = meta["text_tokens"]
    assert tokens["read"] == tokens["kept"] + tokens["dropped"]
    assert tokens["kept"] == len(shard_token_stream(wiki_data))
    assert 0.2 < tokens["dropped"] / tokens["read"] < 0.6  # a third to a half, by vocabulary
    err = capsys.readouterr().err
    assert f"warning: {tokens['dropped']:,} of the corpus's {tokens['read']:,} tokens" in err
    assert "the default --packing carry keeps it" in err


@pytest.mark.parametrize("packing", ["carry", "official"])
def test_examples_never_cross_documents(tmp_path, word_tok, packing):
    corpus = marker_corpus(tmp_path / "docs.txt", num_docs=400)
    prepare([str(corpus)], word_tok, 32, tmp_path / "out", workers=1, packing=packing)
    ids, lengths = load_rows(tmp_path / "out")
    check_layout(ids, lengths, 32)
    markers = []
    for row, (_, real) in zip(ids, lengths, strict=True):
        words = set(row[:real].tolist()) - {CLS, SEP}
        assert len(words) == 1  # one document's marker only
        markers.append(words.pop())
    # Every document is used, in order.
    assert list(dict.fromkeys(markers)) == [word_id(i) for i in range(400)]


@pytest.mark.parametrize("packing", ["carry", "official"])
def test_segment_and_short_target_rates_on_one_token_lines(tmp_path, word_tok, packing):
    # With one-token lines, a two-segment example always has a non-empty B, and only a
    # randomised target gives a row shorter than seq_len (besides each document's tail).
    docs = [[f"w{d}"] * 4000 for d in range(30)]
    corpus = str(write_docs(tmp_path / "c.txt", docs))
    prepare([corpus], word_tok, 32, tmp_path / "out", workers=1, packing=packing)
    ids, lengths = load_rows(tmp_path / "out")
    check_layout(ids, lengths, 32)
    n = len(ids)
    single = np.mean(lengths[:, 0] == lengths[:, 1])
    short = (np.sum(lengths[:, 1] < 32) - len(docs)) / n
    assert n > 3000
    assert 0.07 < single < 0.13
    assert 0.03 < short < 0.07


def test_builder_cuts_overflow_and_never_carries_it_over():
    builder = ExampleBuilder(16, random.Random(0))
    assert builder.add_line([7] * 5) == []
    [(first, second)] = builder.add_line([8] * 40)  # reaches the target: one example
    assert len(first) + len(second) + 2 + bool(second) <= 16
    assert builder.lines == [] and builder.length == 0  # the overflow is discarded
    assert builder.end_document() == []
    assert builder.add_line([]) == [] and builder.end_document() == []
    assert (builder.tokens_read, builder.tokens_kept) == (45, len(first) + len(second))


def test_carrying_builder_keeps_every_token_in_order_and_cuts_at_word_starts():
    continuation = frozenset(range(100, 200))  # ids 100.. continue a word
    builder = CarryingBuilder(16, random.Random(0), continuation)
    line = [7, 101, 102, 8, 103, 9, 10, 104, 105, 106, 11] * 6  # words of 1 to 4 pieces
    examples = builder.add_line(line) + builder.add_line([12] * 5) + builder.end_document()
    assert [i for a, b in examples for i in a + b] == line + [12] * 5
    assert builder.tokens_read == builder.tokens_kept == len(line) + 5
    for a, b in examples:
        assert a and len(a) + len(b) + 2 + bool(b) <= 16
        assert a[0] not in continuation and (not b or b[0] not in continuation)
    # A word longer than a whole example is cut where it must be, and still kept.
    builder = CarryingBuilder(8, random.Random(0), continuation)
    long_word = [7] + [101] * 20
    assert [i for a, b in builder.add_line(long_word) + builder.end_document() for i in a + b] == (
        long_word
    )


def test_random_target_lengths_are_between_5_and_max_len():
    builder = ExampleBuilder(64, random.Random(1))
    targets = []
    for _ in range(3000):
        builder.add_line([9] * 64)
        targets.append(builder.target)
    short = [t for t in targets if t != 64]
    assert 0.03 < len(short) / len(targets) < 0.07
    assert min(short) >= 5 and max(short) <= 64 and len(set(short)) > 20


# ---------------------------------------------------------------- determinism and layout


def test_identical_bytes_on_rerun_and_for_any_worker_count(tmp_path, word_tok, monkeypatch):
    # Small chunks and shards so that chunks, the in-flight window and shards all interleave.
    monkeypatch.setattr(electra.data.prepare, "CHUNK_DOCS", 40)
    corpus = marker_corpus(tmp_path / "docs.txt", num_docs=500, seed=3)
    outs = []
    for run, workers in enumerate([1, 2, 2, 3]):
        out = tmp_path / f"out{run}"
        summary = prepare([str(corpus)], word_tok, 48, out, workers=workers, shard_size=700)
        assert summary["shards"] > 2
        outs.append(files_bytes(out))
    assert outs[0] == outs[1] == outs[2] == outs[3]
    assert "tokenizer/tokenizer.json" in outs[0] and "shard_00002.len.npy" in outs[0]


def test_real_text_identical_with_one_or_two_workers(tmp_path, wiki_tok, monkeypatch):
    source = str(need("wikitext-2-raw/wiki.valid.raw"))
    monkeypatch.setattr(
        electra.data.prepare, "CHUNK_DOCS", 100
    )  # several chunks, so the pool is used
    prepare([source], wiki_tok, 128, tmp_path / "one", workers=1)
    prepare([source], wiki_tok, 128, tmp_path / "two", workers=2)
    assert files_bytes(tmp_path / "one") == files_bytes(tmp_path / "two")


def test_meta_and_folder_layout(tmp_path, word_tok):
    corpus = marker_corpus(tmp_path / "docs.txt", num_docs=50)
    summary = prepare([str(corpus)], word_tok, 64, tmp_path / "out", workers=1, shard_size=100)
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["format"] == 1 and meta["corpus"] == [str(corpus)]
    assert meta["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert meta["vocab_size"] == WORDS + 5 and len(meta["tokenizer_fingerprint"]) == 64
    assert sum(s["num_examples"] for s in meta["shards"]) == meta["num_examples"]
    assert all(s["num_examples"] <= 100 for s in meta["shards"])
    assert meta["read_stats"]["documents"] == 50 and meta["read_stats"]["files"] == 1
    assert summary["examples"] == meta["num_examples"] and summary["tokens"] == meta["num_tokens"]
    assert summary["shards"] == len(meta["shards"])
    shard = np.load(tmp_path / "out" / "shard_00000.npy", mmap_mode="r")
    assert isinstance(shard, np.memmap) and shard.shape == (100, 64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.txt", "out"]


def test_reads_every_corpus_format(tmp_path, word_tok):
    import gzip

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("w1 w1\n\nw2\n")
    with gzip.open(folder / "b.jsonl.gz", "wt") as f:
        f.write(json.dumps({"text": "w3\nw3"}) + "\n")
    (folder / "wiki_00").write_text('<doc id="4" title="w9">\nw9\n\nw4 w4\n</doc>\n')
    prepare([str(folder)], word_tok, 16, tmp_path / "out", workers=1)
    ids, lengths = load_rows(tmp_path / "out")
    pairs = zip(ids, lengths, strict=True)
    rows = [sorted(set(row[1 : real - 1].tolist()) - {SEP}) for row, (_, real) in pairs]
    assert rows == [[word_id(1)], [word_id(2)], [word_id(3)], [word_id(4)]]


def test_reports_bad_utf8_and_long_lines(tmp_path, word_tok):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"w1 w2 \xff\n" + b"w3 " * 60_000 + b"\n")
    summary = prepare([str(corpus)], word_tok, 16, tmp_path / "out", workers=1)
    assert summary["bad_utf8_lines"] == 1 and summary["long_lines"] == 1
    # The long line whole, in pieces (the normalizer drops U+FFFD).
    assert summary["text_tokens"]["read"] == 2 + 60_000


# ---------------------------------------------------------------- user errors


def test_empty_corpus_leaves_nothing_behind(tmp_path, word_tok):
    (tmp_path / "blank.txt").write_text("\n\n   \n")
    with pytest.raises(ElectraError, match="no text found in the corpus"):
        prepare([str(tmp_path / "blank.txt")], word_tok, 32, tmp_path / "out", workers=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank.txt"]


def test_interrupt_removes_temp_folder_and_keeps_old_output(tmp_path, word_tok, monkeypatch):
    corpus = str(marker_corpus(tmp_path / "docs.txt", num_docs=20))
    prepare([corpus], word_tok, 32, tmp_path / "out", workers=1)
    before = files_bytes(tmp_path / "out")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(electra.data.prepare, "_pack_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare([corpus], word_tok, 32, tmp_path / "out", workers=1, overwrite=True, seed=7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.txt", "out"]
    assert files_bytes(tmp_path / "out") == before


def test_existing_output_needs_overwrite(tmp_path, word_tok):
    corpus = str(marker_corpus(tmp_path / "docs.txt", num_docs=20))
    prepare([corpus], word_tok, 32, tmp_path / "out", workers=1)
    with pytest.raises(ElectraError, match="already exists: pass --overwrite"):
        prepare([corpus], word_tok, 32, tmp_path / "out", workers=1)
    prepare([corpus], word_tok, 64, tmp_path / "out", workers=1, overwrite=True)
    assert PretrainingData(tmp_path / "out").seq_len == 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.txt", "out"]

    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("keep me")
    with pytest.raises(ElectraError, match="not an electra data folder"):
        prepare([corpus], word_tok, 32, tmp_path / "precious", workers=1, overwrite=True)
    assert (tmp_path / "precious" / "notes.txt").read_text() == "keep me"


def test_invalid_arguments_fail_before_any_work(tmp_path, word_tok):
    corpus = str(marker_corpus(tmp_path / "docs.txt", num_docs=5))
    out = tmp_path / "out"
    with pytest.raises(ElectraError, match="seq_len must be at least 8"):
        prepare([corpus], word_tok, 4, out)
    with pytest.raises(ElectraError, match="seq_len must be at most 8192"):
        prepare([corpus], word_tok, 10_000, out)
    with pytest.raises(ElectraError, match="corpus path not found"):
        prepare([str(tmp_path / "missing.txt")], word_tok, 32, out)
    with pytest.raises(ElectraError, match="tokenizer not found"):
        prepare([corpus], tmp_path / "no_tok", 32, out)
    with pytest.raises(ElectraError, match="workers must be at least 1"):
        prepare([corpus], word_tok, 32, out, workers=0)
    assert not out.exists()


def test_pretraining_data_errors(tmp_path, word_tok):
    with pytest.raises(ElectraError, match="does not exist: run `electra prepare` first"):
        PretrainingData(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ElectraError, match="has no meta.json: run `electra prepare` first"):
        PretrainingData(tmp_path / "empty")

    corpus = str(marker_corpus(tmp_path / "docs.txt", num_docs=20))
    prepare([corpus], word_tok, 128, tmp_path / "out", workers=1)
    with pytest.raises(ElectraError) as error:
        PretrainingData(tmp_path / "out", seq_len=256)
    message = str(error.value)
    assert message == (
        f"data folder {tmp_path / 'out'} was built for seq len 128, not 256: pass --seq-len 128 "
        "(or --data.seq_len 128), or rebuild it with `electra prepare --seq-len 256`"
    )
    (tmp_path / "out" / "meta.json").write_text("{broken")
    with pytest.raises(ElectraError, match="meta.json is invalid"):
        PretrainingData(tmp_path / "out")


# ---------------------------------------------------------------- batches


@pytest.fixture(scope="module")
def unique_data(tmp_path_factory, word_tok) -> PretrainingData:
    """Example i is exactly [CLS] w<i> [SEP], spread over several shards."""
    folder = tmp_path_factory.mktemp("unique")
    corpus = write_docs(folder / "c.txt", [[f"w{i}"] for i in range(103)])
    prepare([str(corpus)], word_tok, 8, folder / "data", workers=1, shard_size=10)
    return PretrainingData(folder / "data", seq_len=8)


def example_numbers(batch: dict) -> list[int]:
    return [int(i) - len(SPECIAL_TOKENS) for i in batch["input_ids"][:, 1]]


def test_batch_gathers_across_shards(unique_data):
    assert len(unique_data) == 103 and len(unique_data.meta["shards"]) == 11
    indices = np.array([102, 0, 55, 9, 10, 55])
    batch = unique_data.batch(indices)
    assert example_numbers(batch) == indices.tolist()
    assert example_numbers(unique_data.batch(torch.tensor([3, 99]))) == [3, 99]
    assert batch["attention_mask"][0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]


def test_batch_matches_real_shards(wiki_data):
    data = PretrainingData(wiki_data, seq_len=128)
    assert data.special.cls == CLS and data.tokenizer_path == wiki_data / "tokenizer"
    assert data.vocab_size == 1000
    ids, lengths = load_rows(wiki_data)
    picks = np.random.default_rng(0).choice(len(data), 64, replace=False)
    batch = data.batch(picks)
    assert all(t.dtype == torch.int64 and t.shape == (64, 128) for t in batch.values())
    assert (batch["input_ids"].numpy() == ids[picks]).all()
    for row, (first, real) in enumerate(lengths[picks]):
        assert batch["attention_mask"][row].tolist() == [1] * real + [0] * (128 - real)
        types = [0] * first + [1] * (real - first) + [0] * (128 - real)
        assert batch["token_type_ids"][row].tolist() == types


def test_batch_stream_is_deterministic_and_covers_each_epoch(unique_data):
    stream = BatchStream(unique_data, batch_size=10, seed=5)
    batches = [example_numbers(next(stream)) for _ in range(25)]
    again = BatchStream(unique_data, batch_size=10, seed=5)
    assert [example_numbers(b) for b, _ in zip(again, range(25), strict=False)] == batches
    other = BatchStream(unique_data, batch_size=10, seed=6)
    assert example_numbers(next(other)) != batches[0]

    # 103 examples: 10 full batches an epoch, the 3 left over are dropped.
    for epoch in range(2):
        seen = [i for b in batches[epoch * 10 : epoch * 10 + 10] for i in b]
        assert len(set(seen)) == 100
        generator = torch.Generator().manual_seed(5 * 1_000_003 + epoch)
        assert seen == torch.randperm(103, generator=generator)[:100].tolist()
    assert batches[0] != batches[10]


def test_batch_stream_resumes_from_state(unique_data):
    stream = BatchStream(unique_data, batch_size=7, seed=1)
    for _ in range(13):  # 14 batches an epoch: stop just before the boundary
        next(stream)
    state = stream.state_dict()
    assert state == {"epoch": 0, "offset": 91}
    expected = [example_numbers(next(stream)) for _ in range(20)]
    assert stream.state_dict()["epoch"] == 2

    resumed = BatchStream(unique_data, batch_size=7, seed=1)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert [example_numbers(next(resumed)) for _ in range(20)] == expected

    with pytest.raises(ElectraError, match="state"):
        resumed.load_state_dict({"epoch": 0})


def test_world_size_splits_each_step_between_ranks(unique_data):
    streams = [BatchStream(unique_data, 8, seed=3, rank=r, world_size=3) for r in range(3)]
    single = BatchStream(unique_data, 24, seed=3)
    for _ in range(9):  # 4 steps an epoch: crosses two epoch boundaries
        parts = [example_numbers(next(s)) for s in streams]
        assert all(len(p) == 8 for p in parts)
        assert len(set(parts[0] + parts[1] + parts[2])) == 24
        assert parts[0] + parts[1] + parts[2] == example_numbers(next(single))


def test_batch_stream_needs_enough_examples(unique_data):
    with pytest.raises(ElectraError, match="has 103 examples.*lower the batch size or add text"):
        BatchStream(unique_data, batch_size=52, seed=0, world_size=2)
    with pytest.raises(ElectraError, match="rank"):
        BatchStream(unique_data, batch_size=4, seed=0, rank=2, world_size=2)


def test_prepare_command_reports_tokens_read_kept_and_dropped(tmp_path, word_tok, capsys):
    from electra.cli.main import main

    # Ten words a line, lines that overflow a 16-long example: the official rule drops tokens.
    write_docs(tmp_path / "c.txt", [[" ".join(f"w{i}" for i in range(10))] * 20] * 3)
    args = ["prepare", str(tmp_path / "c.txt"), "--tokenizer", str(word_tok), "--seq-len", "16"]
    assert main([*args, "--out", str(tmp_path / "carry"), "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    assert "corpus tokens: 600 read, 600 kept (100.0%), 0 dropped" in out and err == ""

    assert main([*args, "--out", str(tmp_path / "off"), "--packing", "official"]) == 0
    out, err = capsys.readouterr()
    kept = json.loads((tmp_path / "off" / "meta.json").read_text())["text_tokens"]["kept"]
    assert f"corpus tokens: 600 read, {kept} kept ({kept / 600:.1%}), {600 - kept} dropped" in out
    assert err.startswith(f"warning: {600 - kept} of the corpus's 600 tokens") and kept < 540
