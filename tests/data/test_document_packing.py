"""`prepare --packing documents` and document masking: rows that pack several documents, their
document numbers, and attention that stays within each document (issue 39)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from electra.config import ObjectiveConfig
from electra.data.documents import MIN_PIECE, DocumentPacker, frame_rows
from electra.data.prepare import prepare
from electra.data.store import BatchStream, PretrainingData
from electra.data.tokenizer import save_tokenizer, train_tokenizer
from electra.model.cloze import ClozeTowers
from electra.model.modernbert.modeling import ModernBertModel
from electra.objectives import build_objective

from ..conftest import WORDS, assert_one_line_error, run_cli, tiny_modern_config
from ..numerics import encoder_depth, largest, rounding_bound


def pack(documents, seq_len=20, continuation=frozenset()):
    packer = DocumentPacker(seq_len, continuation)
    rows = []
    for doc in documents:
        for line in doc:
            rows += packer.add_line(line)
        rows += packer.end_document()
    return rows + packer.finish(), packer


def test_documents_fill_rows_whole_and_an_overflowing_one_goes_on_in_the_next():
    docs = [[[1, 2, 3], [4]], [[5] * 6], [[7] * 30]]
    rows, packer = pack(docs)
    # 4 + 2 and 6 + 2 framed: 14 of 20 slots; the third (30) cannot open in 4 slots (< MIN_PIECE)
    # nor fit a row (18 pieces + 2): 18 in the next row, 12 in the last.
    assert rows == [[[1, 2, 3, 4], [5] * 6], [[7] * 18], [[7] * 12]]
    assert packer.tokens_read == packer.tokens_kept == 40
    assert packer.pieces == 4


def test_a_document_opens_in_the_room_left_when_a_real_piece_of_it_fits():
    rows, _ = pack([[[1] * 2], [[2] * 40]], seq_len=40)
    assert [len(p) for row in rows for p in row] == [2, 34, 6]  # 34 >= MIN_PIECE fit after 4
    rows, _ = pack([[[1] * 30], [[2] * 40]], seq_len=40)
    assert MIN_PIECE > 40 - 32 - 2 and [len(p) for row in rows for p in row] == [30, 38, 2]


def test_a_cut_falls_on_a_word_start():
    cont = frozenset({9})
    rows, _ = pack([[[1, 9, 9, 2, 9, 3, 9, 9, 9]]], seq_len=8, continuation=cont)
    assert rows == [[[1, 9, 9, 2, 9]], [[3, 9, 9, 9]]]  # not after the 6th piece, inside a word


def test_framed_rows_number_their_documents_and_pad_with_zero():
    ids, lengths, documents = frame_rows([[[5, 6], [7]]], [1], [2], 10, 0, "uint16")
    assert ids.tolist() == [[1, 5, 6, 2, 1, 7, 2, 0, 0, 0]]
    assert documents.tolist() == [[1, 1, 1, 1, 2, 2, 2, 0, 0, 0]]
    assert lengths.tolist() == [[7, 7]]


def lines(d, n, words):
    """Document d: n lines of `words` words."""
    return "\n".join(
        " ".join(WORDS[(d * 5 + i + j) % len(WORDS)] for j in range(words)) for i in range(n)
    )


def write_corpus(root, docs):
    """c.txt (documents separated by blank lines) and a WordPiece tokenizer of it in tok/."""
    (root / "c.txt").write_text("\n\n".join(docs) + "\n")
    tokenizer = train_tokenizer([root / "c.txt"], vocab_size=200, min_frequency=1)
    save_tokenizer(tokenizer, root / "tok", lowercase=True)


@pytest.fixture(scope="module")
def corpus_and_tokenizer(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    write_corpus(root, [lines(d, 1 + d % 4, 3 + d % 9) for d in range(300)])
    return root


def test_prepare_documents_stores_the_numbers_and_batches_give_them_on_request(
    corpus_and_tokenizer,
):
    root = corpus_and_tokenizer
    s = prepare([str(root / "c.txt")], root / "tok", 64, root / "d", workers=1, packing="documents")
    assert s["text_tokens"]["dropped"] == 0 and s["documents_per_row"] > 3
    meta = json.loads((root / "d" / "meta.json").read_text())
    assert meta["shards"][0]["documents"] == "shard_00000.doc.npy"
    data = PretrainingData(root / "d")
    assert data.packs_documents
    numbered = data.batch(np.arange(8), documents=True)
    plain = data.batch(np.arange(8))
    docs = numbered["attention_mask"]
    assert docs.max() > 1 and torch.equal(plain["attention_mask"], (docs != 0).long())
    assert int(numbered["token_type_ids"].sum()) == 0  # one segment per document
    cls = data.special.cls
    starts = torch.cat([docs[:, :1] != 0, docs[:, 1:] != docs[:, :-1]], 1) & (docs != 0)
    assert torch.equal(numbered["input_ids"][starts], torch.full((int(starts.sum()),), cls))
    stream = BatchStream(data, 4, seed=0, documents=True)
    assert next(stream)["attention_mask"].max() > 1


def test_a_plain_folder_gives_padding_masks_whatever_the_setting(corpus_and_tokenizer):
    root = corpus_and_tokenizer
    prepare([str(root / "c.txt")], root / "tok", 64, root / "plain", workers=1)
    data = PretrainingData(root / "plain")
    assert not data.packs_documents
    assert data.batch(np.arange(8), documents=True)["attention_mask"].max() == 1


def packed_row(seed, t=40, first=17):
    """One row: document 1 (`first` tokens), document 2 (the rest but 5), 5 of padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (1, t), generator=g)
    docs = torch.zeros(1, t, dtype=torch.long)
    docs[0, :first], docs[0, first : t - 5] = 1, 2
    return ids, docs


def modern_bound(expected: torch.Tensor, extra: int = 4) -> float:
    """The rounding of the tiny modern encoder on a row of 40: 3 layers, the embeddings' and
    final LayerNorms (and `extra` beyond them); the longest reduction the intermediate size (48,
    above 40 keys and the hidden size 32)."""
    cfg = tiny_modern_config()
    depth = encoder_depth(cfg.num_hidden_layers, extra=extra)
    return rounding_bound(torch.float32, cfg.intermediate_size, depth, largest(expected))


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.mark.numeric
def test_a_token_output_does_not_change_when_another_document_in_its_row_does():
    torch.manual_seed(0)
    model = ModernBertModel(tiny_modern_config()).eval()
    ids, docs = packed_row(0)
    other, _ = packed_row(1)
    changed = torch.where(docs == 2, other, ids)
    with torch.no_grad():
        a, b = model(ids, None, docs), model(changed, None, docs)
        alone = model(ids[:, :17])  # document 1 in a row of its own
        unmasked = model(changed, None, (docs != 0).long())
    first = docs[0] == 1
    bound = modern_bound(a[0])
    assert gap(a[0, first], b[0, first]) <= bound
    assert gap(a[0, :17], alone[0]) <= bound  # rotary: only distances count
    second = docs[0] == 2
    # what the comparisons above allow would not hide the changes below
    assert gap(a[0, second], b[0, second]) > bound
    assert gap(b[0, first], unmasked[0, first]) > bound  # the mask did it


@pytest.mark.numeric
def test_electric_towers_stay_within_their_document(special):
    torch.manual_seed(0)
    cfg = tiny_modern_config()
    objective = build_objective(
        cfg, ObjectiveConfig(name="electric", generator_hidden_fraction=1.0), special, 40
    )
    towers = objective.generator
    assert isinstance(towers, ClozeTowers)
    towers.eval()
    ids, docs = packed_row(0)
    other, _ = packed_row(1)
    changed = torch.where(docs == 2, other, ids)
    with torch.no_grad():
        a = towers(ids, torch.zeros_like(ids), docs)
        b = towers(changed, torch.zeros_like(ids), docs)
    first = docs[0] == 1
    # the towers' join and the MLM head: 5 more reductions
    assert gap(a[0, first], b[0, first]) <= modern_bound(a[0], extra=9)


def documents_folder(tmp_path, capsys, seq_len):
    write_corpus(tmp_path, [lines(d, 3, 40) for d in range(60)])
    flags = f"--seq-len {seq_len} --packing documents --workers 1".split()
    tok, out = tmp_path / "tok", tmp_path / "data"
    code, _, err = run_cli(
        capsys, "prepare", tmp_path / "c.txt", "--tokenizer", tok, "--out", out, *flags
    )
    assert code == 0, err
    return out


TINY = {
    "model.hidden_size": 32,
    "model.intermediate_size": 48,
    "model.num_attention_heads": 2,
    "train.batch_size": 2,
    "train.steps": 2,
    "train.log_every": 1,
    "train.progress": "false",
    "train.tensorboard": "false",
}
TINY_MODERN = [flag for key, value in TINY.items() for flag in (f"--{key}", str(value))]


def pretrain_cli(capsys, preset, data, out, *flags):
    return run_cli(capsys, "pretrain", "--preset", preset, "--data", data, "--out", out, *flags)


def test_pretraining_at_seq_len_1024_on_documents(tmp_path, capsys):
    data = documents_folder(tmp_path, capsys, 1024)
    code, _, err = pretrain_cli(capsys, "modern-tiny", data, tmp_path / "run", *TINY_MODERN)
    assert code == 0, err
    assert "documents on average; each attends only to itself" in err
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["data"] == {"path": str(data), "seq_len": 1024, "document_mask": True}
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line)["loss"] for line in lines]
    assert len(losses) == 2 and np.isfinite(losses).all()


def test_settings_that_cannot_run_are_one_line_and_write_nothing(tmp_path, capsys):
    data = documents_folder(tmp_path, capsys, 128)
    flags = ("--data.document_mask", "true", "--train.steps", "1")
    code, _, err = pretrain_cli(capsys, "tiny", data, tmp_path / "r1", *flags)
    assert_one_line_error(code, err, "data.document_mask=true needs model.arch modernbert")
    flags = ("--model.max_position_embeddings", "64", *TINY_MODERN)
    code, _, err = pretrain_cli(capsys, "modern-tiny", data, tmp_path / "r2", *flags)
    assert_one_line_error(code, err, "model.max_position_embeddings=64", "seq len 128")
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()
