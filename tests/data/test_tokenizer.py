"""WordPiece tokenizer: training, saving, loading from tokenizer.json or vocab.txt, special ids."""

import json
from pathlib import Path

import pytest

from electra.data.tokenizer import (
    SPECIAL_TOKENS,
    SpecialIds,
    fingerprint,
    load_tokenizer,
    save_tokenizer,
    special_ids,
    train_tokenizer,
)
from electra.errors import ElectraError

TEXT = """The quick brown fox jumps over the lazy dog.
A Café in Zürich serves coffee; the coffee is strong.

Tokenizers split words into word pieces, and pieces into smaller pieces.
The dog sleeps while the fox runs through the forest near the river.
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    path.write_text(TEXT * 20, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tok(corpus):
    return train_tokenizer([corpus], vocab_size=200)


def test_special_tokens_take_ids_zero_to_four(tok):
    assert special_ids(tok) == SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
    assert [tok.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS)
    assert 5 < tok.get_vocab_size() <= 200


def test_lowercases_strips_accents_and_adds_bert_specials(tok):
    pair = tok.encode("The CAFÉ", "the dog")
    assert pair.tokens[0] == "[CLS]" and pair.tokens.count("[SEP]") == 2
    assert "cafe" in "".join(t.removeprefix("##") for t in pair.tokens)
    first_sep = pair.tokens.index("[SEP]")
    assert pair.type_ids == [0] * (first_sep + 1) + [1] * (len(pair.tokens) - first_sep - 1)
    bare = tok.encode("the dog", add_special_tokens=False)
    assert bare.tokens == ["the", "dog"]
    assert tok.decode(tok.encode("the forest").ids) == "the forest"


def test_cased_tokenizer_keeps_case(corpus):
    cased = train_tokenizer([corpus], vocab_size=200, lowercase=False)
    assert "The" in cased.encode("The", add_special_tokens=False).tokens


def test_trains_from_jsonl_corpus(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": line}) + "\n" for line in TEXT.splitlines() * 5))
    tok = train_tokenizer([path], vocab_size=150)
    assert special_ids(tok).mask == 4 and tok.token_to_id("fox") is not None


def test_save_then_load_from_tokenizer_json_and_vocab_txt(tok, tmp_path):
    out = tmp_path / "tok"
    save_tokenizer(tok, out, lowercase=True)
    assert sorted(p.name for p in out.iterdir()) == [
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "ElectraTokenizer" and config["do_lower_case"] is True
    assert config["mask_token"] == "[MASK]" and config["model_max_length"] == 512
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab == [tok.id_to_token(i) for i in range(tok.get_vocab_size())]

    from_json = load_tokenizer(out)
    (out / "tokenizer.json").unlink()
    from_vocab = load_tokenizer(out)
    from_vocab_file = load_tokenizer(out / "vocab.txt")
    text = "The Café dog runs; zebra xylophone [MASK] quickly!"
    for other in (from_json, from_vocab, from_vocab_file):
        for pair in ((text,), (text, "the fox")):
            assert other.encode(*pair).ids == tok.encode(*pair).ids
            assert other.encode(*pair).type_ids == tok.encode(*pair).type_ids
        assert fingerprint(other) == fingerprint(tok)
        assert special_ids(other) == special_ids(tok)


def test_vocab_txt_respects_do_lower_case_false(tmp_path):
    out = tmp_path / "cased"
    out.mkdir()
    (out / "vocab.txt").write_text("\n".join([*SPECIAL_TOKENS, "The", "the", "##e", "t", "h"]))
    (out / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    cased = load_tokenizer(out)
    assert cased.encode("The", add_special_tokens=False).tokens == ["The"]
    (out / "tokenizer_config.json").unlink()
    lowered = load_tokenizer(out)
    assert lowered.encode("The", add_special_tokens=False).tokens == ["the"]
    assert fingerprint(cased) != fingerprint(lowered)


def test_hugging_face_auto_tokenizer_reads_the_folder(tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    save_tokenizer(tok, tmp_path, lowercase=True)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text, pair = "The Café dog runs quickly!", "the fox"
    assert hf(text, pair)["input_ids"] == tok.encode(text, pair).ids
    assert hf(text, pair)["token_type_ids"] == tok.encode(text, pair).type_ids
    assert hf.mask_token_id == 4 and hf.pad_token_id == 0


def test_missing_special_token_is_a_user_error(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    with pytest.raises(ElectraError, match=r"no \[MASK\] token: .*BERT's special tokens"):
        load_tokenizer(tmp_path)


def test_missing_or_broken_tokenizer_is_a_user_error(tmp_path):
    with pytest.raises(ElectraError, match="tokenizer not found"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(ElectraError, match="neither tokenizer.json nor vocab.txt"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ElectraError, match="cannot read tokenizer"):
        load_tokenizer(tmp_path)


def test_fingerprint_equal_for_equal_tokenizers_and_differs_otherwise(corpus, tok, tmp_path):
    # WordPiece training itself is not reproducible across runs (tokens with tied counts come
    # out in a random order), so equality is checked on copies of one trained tokenizer.
    save_tokenizer(tok, tmp_path, lowercase=True)
    assert fingerprint(load_tokenizer(tmp_path)) == fingerprint(tok)
    assert fingerprint(load_tokenizer(tmp_path / "vocab.txt")) == fingerprint(tok)
    assert len(fingerprint(tok)) == 64
    assert fingerprint(train_tokenizer([corpus], vocab_size=150)) != fingerprint(tok)
    cased = train_tokenizer([corpus], vocab_size=200, lowercase=False)
    assert fingerprint(cased) != fingerprint(tok)
    # Same tokens in another order map text to other ids: a different tokenizer.
    vocab = (tmp_path / "vocab.txt").read_text().splitlines()
    vocab[10], vocab[11] = vocab[11], vocab[10]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    assert fingerprint(load_tokenizer(tmp_path / "vocab.txt")) != fingerprint(tok)


def test_cli_says_when_the_corpus_gave_fewer_tokens_than_asked(corpus, tmp_path, capsys):
    from electra.cli.main import main

    out = tmp_path / "tok"
    assert (
        main(["tokenizer", "train", str(corpus), "--vocab-size", "30522", "--out", str(out)]) == 0
    )
    size = load_tokenizer(out).get_vocab_size()
    assert size < 30522
    assert capsys.readouterr().out == (
        f"note: the corpus gave {size} tokens, fewer than --vocab-size 30522 (WordPiece stops "
        f"when no pair of pieces occurs --min-frequency 2 times); tokenizer with {size} tokens "
        f"-> {out}\n"
    )
