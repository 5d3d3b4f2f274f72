"""Any `tokenizers` tokenizer (byte-level BPE with ModernBERT's or RoBERTa's special tokens,
Unigram) from a tokenizer.json or a hub-style folder: its special roles, rows framed as its own
post-processor frames them, the data folder's special ids, a short pretraining run, the folder HF
reads, and the refusal of a tokenizer without a token the run needs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from electra.data.specials import SpecialIds
from electra.data.store import PretrainingData
from electra.data.tokenizer import (
    fingerprint,
    load_tokenizer,
    lowercases,
    save_tokenizer,
    special_ids,
    tokenizer_special_ids,
)
from electra.errors import ElectraError
from tests.conftest import TINY_OVERRIDES, assert_one_line_error, run_cli

LINES = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A small red car drove to the big green house in the old city.",
    "Tokenizers split words into pieces, and pieces into smaller pieces.",
    "Mary went to the store yesterday and bought apples and good bread.",
]
MODERN = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # ModernBERT's/Ettin's order
ROBERTA = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def corpus_text(docs: int = 40) -> str:
    return "\n\n".join(
        "\n".join(LINES[(d + i) % len(LINES)] for i in range(1 + d % 4)) for d in range(docs)
    )


def byte_bpe(specials: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_text().splitlines(), trainer=trainer)
    return tok


def modern_bpe() -> Tokenizer:
    """ModernBERT's shape: byte-level BPE, [CLS] $A [SEP] $B [SEP] all typed 0."""
    tok = byte_bpe(MODERN)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return tok


def roberta_bpe() -> Tokenizer:
    tok = byte_bpe(ROBERTA)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tok


def unigram() -> Tokenizer:
    """SentencePiece's shape: Unigram over Metaspace, and no post-processor of its own."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=150,
        special_tokens=["<pad>", "<unk>", "<s>", "</s>", "<mask>"],
        unk_token="<unk>",
        show_progress=False,
    )
    tok.train_from_iterator(corpus_text().splitlines(), trainer=trainer)
    return tok


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    path.write_text(corpus_text(), encoding="utf-8")
    return path


def as_hub_folder(tok: Tokenizer, folder: Path, roles: dict[str, str], **extra) -> Path:
    """A folder as the hub has them: tokenizer.json and a tokenizer_config.json naming roles."""
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {f"{role}_token": token for role, token in roles.items()}
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, **extra}))
    return folder


def prepare_cli(capsys, corpus, tokenizer, out, *extra):
    return run_cli(
        capsys, "prepare", corpus, "--tokenizer", tokenizer, "--out", out, "--seq-len", 32, *extra
    )


def rows(data: Path) -> tuple[np.ndarray, np.ndarray]:
    ids = np.concatenate([np.load(p) for p in sorted(data.glob("shard_*[0-9].npy"))])
    lengths = np.concatenate([np.load(p) for p in sorted(data.glob("shard_*.len.npy"))])
    return ids, lengths


def check_rows(data: Path, special: SpecialIds, between: list[int]) -> None:
    """Every row opens with cls and closes with sep; a pair has `between` between its segments;
    padding is the pad id; no other special id sits inside the text."""
    ids, lengths = rows(data)
    assert len(ids) > 10
    pairs = 0
    for row, (type0, length) in zip(ids, lengths, strict=True):
        assert row[0] == special.cls and row[length - 1] == special.sep
        assert (row[length:] == special.pad).all()
        inner = row[1 : length - 1].tolist()
        assert special.mask not in inner and special.pad not in inner
        seps = [i for i, t in enumerate(inner) if t == special.sep]
        if seps:
            pairs += 1
            assert inner[seps[0] : seps[0] + len(between)] == between
            assert len(seps) == len(between)
        assert type0 <= length
    assert pairs > 0


@pytest.mark.parametrize(
    ("build", "roles", "pair_between"),
    [
        (modern_bpe, dict(cls="[CLS]", sep="[SEP]", pad="[PAD]", mask="[MASK]", unk="[UNK]"), 1),
        (roberta_bpe, dict(cls="<s>", sep="</s>", pad="<pad>", mask="<mask>", unk="<unk>"), 2),
        (unigram, dict(cls="<s>", sep="</s>", pad="<pad>", mask="<mask>", unk="<unk>"), 1),
    ],
    ids=["modernbert-bpe", "roberta-bpe", "unigram"],
)
def test_prepare_frames_rows_with_the_tokenizers_own_specials(
    build, roles, pair_between, corpus, tmp_path, capsys
):
    tok = build()
    file = tmp_path / "tok" / "tokenizer.json"
    file.parent.mkdir()
    tok.save(str(file))
    expected = SpecialIds(**{role: tok.token_to_id(token) for role, token in roles.items()})
    assert special_ids(load_tokenizer(file)) == expected
    assert lowercases(tok) is False and len(fingerprint(tok)) == 64

    code, _, err = prepare_cli(capsys, corpus, file, tmp_path / "data")
    assert code == 0, err
    data = tmp_path / "data"
    meta = json.loads((data / "meta.json").read_text())
    assert meta["special_ids"] == vars(expected)
    assert meta["vocab_size"] == tok.get_vocab_size()
    assert PretrainingData(data).special == expected  # what the objectives mask around
    check_rows(data, expected, [expected.sep] * pair_between)
    # The data folder's tokenizer frames text as the rows are framed.
    saved = load_tokenizer(data / "tokenizer")
    pair = saved.encode("the dog", "the fox")
    assert pair.ids[0] == expected.cls and pair.ids[-1] == expected.sep
    assert pair.ids.count(expected.sep) == 1 + pair_between
    assert fingerprint(saved) == meta["tokenizer_fingerprint"]


def test_hub_folder_config_names_the_roles(corpus, tmp_path, capsys):
    """A folder's tokenizer_config.json settles the roles, even under unusual spellings; its
    bos/eos stand in for cls/sep."""
    tok = byte_bpe(["<|pad|>", "<|start|>", "<|end|>", "<|hole|>"])
    folder = as_hub_folder(
        tok,
        tmp_path / "hub",
        dict(pad="<|pad|>", bos="<|start|>", eos="<|end|>", mask="<|hole|>"),
        model_max_length=8192,
    )
    special = tokenizer_special_ids(folder, load_tokenizer(folder))
    assert special == SpecialIds(pad=0, unk=0, cls=1, sep=2, mask=3)

    code, _, err = prepare_cli(capsys, corpus, folder, tmp_path / "data")
    assert code == 0, err
    check_rows(tmp_path / "data", special, [special.sep])
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["special_ids"] == vars(special)
    config = json.loads((tmp_path / "data" / "tokenizer" / "tokenizer_config.json").read_text())
    assert config["mask_token"] == "<|hole|>" and config["cls_token"] == "<|start|>"
    assert "unk_token" not in config


@pytest.mark.parametrize("build", [modern_bpe, roberta_bpe], ids=["modernbert", "roberta"])
def test_pretrain_runs_on_a_bpe_data_folder(build, corpus, tmp_path, capsys):
    file = tmp_path / "tokenizer.json"
    build().save(str(file))
    assert prepare_cli(capsys, corpus, file, tmp_path / "data")[0] == 0
    overrides = [f"--{k}={v}" for k, v in TINY_OVERRIDES.items()]
    code, _, err = run_cli(
        capsys,
        "pretrain",
        "--preset",
        "tiny",
        "--data",
        tmp_path / "data",
        "--out",
        tmp_path / "run",
        "--steps",
        3,
        "--seq-len",
        32,
        *overrides,
    )
    assert code == 0, err
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").is_file()


def test_a_tokenizer_without_a_mask_token_is_refused_before_anything_is_written(
    corpus, tmp_path, capsys
):
    file = tmp_path / "nomask" / "tokenizer.json"
    file.parent.mkdir()
    tok = byte_bpe(["<s>", "<pad>", "</s>", "<unk>"])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.save(str(file))
    code, _, err = prepare_cli(capsys, corpus, file, tmp_path / "data")
    assert_one_line_error(code, err, str(file), "no mask token", "mask_token")
    assert not (tmp_path / "data").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["nomask"]  # no temporary folder left


def test_a_config_naming_a_token_the_vocabulary_lacks_is_refused(corpus, tmp_path, capsys):
    folder = as_hub_folder(roberta_bpe(), tmp_path / "hub", dict(mask="[MASK]"))
    code, _, err = prepare_cli(capsys, corpus, folder, tmp_path / "data")
    assert_one_line_error(code, err, "'[MASK]'", "mask_token", "tokenizer_config.json")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("token_types", [True, False])
@pytest.mark.parametrize("build", [modern_bpe, roberta_bpe, unigram])
def test_hugging_face_auto_tokenizer_reads_the_saved_folder(build, token_types, tmp_path):
    transformers = pytest.importorskip("transformers")
    tok = build()
    if tok.post_processor is None:  # as prepare leaves it: framed over its cls/sep
        from electra.data.specials import framing

        framing(tok, special_ids(tok))
    special = special_ids(tok)
    save_tokenizer(tok, tmp_path, lowercase=False, token_types=token_types)
    assert not (tmp_path / "vocab.txt").exists()
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text, pair = "The quick dog ran", "to the river"
    encoded = hf(text, pair)
    assert encoded["input_ids"] == tok.encode(text, pair).ids
    assert ("token_type_ids" in encoded) is token_types
    assert (hf.cls_token_id, hf.sep_token_id) == (special.cls, special.sep)
    assert (hf.pad_token_id, hf.mask_token_id, hf.unk_token_id) == (
        special.pad,
        special.mask,
        special.unk,
    )
    assert special_ids(load_tokenizer(tmp_path)) == special


def test_bert_folder_without_token_types_keeps_its_format(tmp_path, corpus):
    from electra.data.tokenizer import train_tokenizer

    tok = train_tokenizer([corpus], vocab_size=120)
    save_tokenizer(tok, tmp_path, lowercase=True, token_types=False)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["model_input_names"] == ["input_ids", "attention_mask"]
    assert config["tokenizer_class"] == "ElectraTokenizer" and (tmp_path / "vocab.txt").is_file()


def test_missing_role_error_names_the_file_and_what_to_do(tmp_path):
    tok = byte_bpe(["<pad>"])
    file = tmp_path / "tokenizer.json"
    tok.save(str(file))
    with pytest.raises(ElectraError) as e:
        tokenizer_special_ids(file, load_tokenizer(file))
    message = str(e.value)
    assert str(file) in message and "cls/sep/mask" in message
    assert "tokenizer_config.json" in message and "\n" not in message


def test_specials_named_after_their_role_in_other_brackets_are_found():
    tok = byte_bpe(["<|padding|>", "<|bos|>", "<|eos|>", "<|mask|>", "<|unknown|>"])
    assert special_ids(tok) == SpecialIds(pad=0, unk=4, cls=1, sep=2, mask=3)


def test_a_template_framing_with_a_token_that_is_neither_cls_nor_sep_is_refused(
    corpus, tmp_path, capsys
):
    tok = byte_bpe([*MODERN, "<eot>"])
    cls, sep, eot = (tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "<eot>"))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP] <eot>",
        pair="[CLS] $A [SEP] $B [SEP] <eot>",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep), ("<eot>", eot)],
    )
    file = tmp_path / "tokenizer.json"
    tok.save(str(file))
    code, _, err = prepare_cli(capsys, corpus, file, tmp_path / "data")
    assert_one_line_error(code, err, str(file), "<eot>", "cls_token/sep_token")
    assert not (tmp_path / "data").exists()


def test_carry_packing_knows_where_words_start_in_bpe_and_unigram():
    """Examples are cut at word starts: Ġ opens a byte-level word, ▁ a SentencePiece one."""
    from electra.data.tokenizer import continuation_ids

    for tok, mark in ((modern_bpe(), "\u0120"), (unigram(), "\u2581")):
        continuation = continuation_ids(tok)
        vocab = tok.get_vocab(with_added_tokens=False)
        starts = [i for t, i in vocab.items() if t.startswith(mark)]
        inside = [i for t, i in vocab.items() if not t.startswith(mark)]
        assert starts and not continuation & set(starts)
        assert set(inside) - set(tok.get_added_tokens_decoder()) == continuation
