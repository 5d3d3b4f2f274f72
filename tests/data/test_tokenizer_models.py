"""`electra tokenizer train --model wordpiece|bpe|unigram`: each kind's special tokens, pipeline
and framing, its case setting, the folder HF's AutoTokenizer reads alike, and the round trip
through `prepare` and a few pretraining steps of both families; a wrong kind or setting is one
error line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from electra.data.specials import SpecialIds
from electra.data.tokenizer import (
    continuation_ids,
    fingerprint,
    load_tokenizer,
    lowercases,
    special_ids,
    train_tokenizer,
)
from electra.errors import ElectraError
from tests.conftest import assert_one_line_error, run_cli

NOUNS = ["dog", "fox", "river", "Café", "house", "city", "market", "teacher", "Zürich", "garden"]
VERBS = ["jumps over", "walks to", "looks at", "paints", "remembers", "builds", "finds"]
ADJECTIVES = ["quick", "lazy", "old", "green", "quiet", "famous", "small", "bright"]

# kind -> (the tokens at ids 0-4, the pipeline's pre-tokenizer and decoder, cased by default)
KINDS = {
    "bpe": (["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "ByteLevel", True),
    "unigram": (["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"], "Metaspace", True),
    "wordpiece": (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "BertPreTokenizer", False),
}
ROLES = {
    "bpe": dict(cls="<s>", pad="<pad>", sep="</s>", unk="<unk>", mask="<mask>"),
    "unigram": dict(pad="[PAD]", cls="[CLS]", sep="[SEP]", unk="[UNK]", mask="[MASK]"),
    "wordpiece": dict(pad="[PAD]", unk="[UNK]", cls="[CLS]", sep="[SEP]", mask="[MASK]"),
}
TEXT, PAIR = "The quick dog walks to the old Café", "a famous teacher paints in 1990"
TINY = ["--model.hidden_size", "32", "--model.intermediate_size", "48"]
TINY += ["--model.num_attention_heads", "2", "--batch-size", "2", "--steps", "2"]
TINY += ["--train.progress", "false", "--train.tensorboard", "false", "--device", "cpu"]


SYLLABLES = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "in", "es", "bra", "qu", "on"]


def sentences(n: int, seed: int = 0) -> list[str]:
    """Sentences over a few real words and many made-up ones: a vocabulary with shared pieces,
    as Unigram's seeding (substrings of several distinct words) needs."""
    rng = random.Random(seed)

    def made_up() -> str:
        return "".join(rng.choice(SYLLABLES) for _ in range(rng.randrange(1, 4)))

    return [
        f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} {rng.choice(VERBS)} the "
        f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} in {rng.randrange(1900, 2025)}, "
        f"{made_up()} {made_up()} {made_up()}s."
        for _ in range(n)
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    lines = sentences(600)
    docs = ["\n".join(lines[i : i + 6]) for i in range(0, len(lines), 6)]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def train_cli(capsys, corpus, out, *flags):
    return run_cli(capsys, "tokenizer", "train", corpus, "--vocab-size", 400, "--out", out, *flags)


@pytest.fixture(scope="module")
def folders(corpus, tmp_path_factory) -> dict[str, Path]:
    """A tokenizer folder per kind, trained by the command with its defaults."""
    from electra.cli.main import main

    root = tmp_path_factory.mktemp("tokenizers")
    argv = ["tokenizer", "train", str(corpus), "--vocab-size", "400"]
    for kind in KINDS:
        assert main([*argv, "--model", kind, "--out", str(root / kind)]) == 0
    return {kind: root / kind for kind in KINDS}


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_each_kind_has_its_specials_pipeline_and_framing(kind, folders):
    tokens, pre_tokenizer, _ = KINDS[kind]
    folder = folders[kind]
    assert sorted(p.name for p in folder.iterdir()) == [
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    tok = load_tokenizer(folder)
    assert [tok.id_to_token(i) for i in range(5)] == tokens
    expected = SpecialIds(**{role: tokens.index(t) for role, t in ROLES[kind].items()})
    assert special_ids(tok) == expected
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert {role: config[f"{role}_token"] for role in ROLES[kind]} == ROLES[kind]
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    pipeline = json.loads(tok.to_str())
    assert pipeline["model"]["type"] == ("BPE" if kind == "bpe" else "Unigram")
    assert pipeline["pre_tokenizer"]["type"] == pipeline["decoder"]["type"] == pre_tokenizer
    assert 300 < tok.get_vocab_size() <= 400
    assert continuation_ids(tok)  # carry packing finds where words start

    a = tok.encode(TEXT, add_special_tokens=False).ids
    b = tok.encode(PAIR, add_special_tokens=False).ids
    pair = tok.encode(TEXT, PAIR)
    cls, sep = [expected.cls], [expected.sep]
    if kind == "bpe":  # RoBERTa: <s> A </s></s> B </s>, all of type 0
        assert pair.ids == cls + a + sep + sep + b + sep
        assert pair.type_ids == [0] * len(pair.ids)
    else:  # DeBERTa-v3: [CLS] A [SEP] B [SEP], B's part typed 1
        assert pair.ids == cls + a + sep + b + sep
        assert pair.type_ids == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    assert tok.encode(TEXT).ids == cls + a + sep
    assert tok.decode(tok.encode(TEXT).ids) == TEXT  # cased: the text comes back as it went in


def test_byte_level_bpe_is_robertas(folders):
    tok = load_tokenizer(folders["bpe"])
    pipeline = json.loads(tok.to_str())
    assert pipeline["pre_tokenizer"]["add_prefix_space"] is False
    assert pipeline["post_processor"]["type"] == "RobertaProcessing"
    assert pipeline["normalizer"] is None
    # No unknown token: a character the corpus never had is spelled in bytes.
    unseen = "naïve ☃ 東京"
    assert tok.decode(tok.encode(unseen).ids) == unseen
    assert special_ids(tok).unk not in tok.encode(unseen).ids
    # <mask> takes the space before it, as RoBERTa's, so "a <mask>" masks a whole word.
    masked = tok.encode("the <mask> dog", add_special_tokens=False)
    assert masked.ids == [
        *tok.encode("the", add_special_tokens=False).ids,
        special_ids(tok).mask,
        *tok.encode(" dog", add_special_tokens=False).ids,
    ]


def test_unigram_is_sentencepiece_shaped(folders):
    tok = load_tokenizer(folders["unigram"])
    pipeline = json.loads(tok.to_str())
    assert pipeline["pre_tokenizer"]["replacement"] == "\u2581"
    words = tok.encode("the dog", add_special_tokens=False).tokens
    assert words[0].startswith("\u2581") and sum(w.startswith("\u2581") for w in words) == 2
    # NFKC and runs of spaces as one, as SentencePiece normalizes by default.
    assert tok.encode("the\u00a0dog   ran").ids == tok.encode("the dog ran").ids
    assert tok.decode(tok.encode("the \ufb01sh").ids) == "the fish"


@pytest.mark.parametrize("kind", list(KINDS))
def test_cased_and_uncased_mean_a_normalizer(kind, folders, corpus, tmp_path, capsys):
    cased_default = KINDS[kind][2]
    default = load_tokenizer(folders[kind])
    assert lowercases(default) is not cased_default
    flag = "--uncased" if cased_default else "--cased"
    code, _, err = train_cli(capsys, corpus, tmp_path / "other", "--model", kind, flag)
    assert code == 0, err
    other = load_tokenizer(tmp_path / "other")
    assert lowercases(other) is cased_default
    config = json.loads((tmp_path / "other" / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is cased_default
    assert fingerprint(other) != fingerprint(default)
    cased, lowered = (other, default) if cased_default is False else (default, other)
    assert "The" in cased.decode(cased.encode("The dog").ids)
    assert "the dog" in lowered.decode(lowered.encode("The Dog").ids)


def test_wordpiece_stays_the_default_and_unchanged(folders, corpus, tmp_path, capsys):
    """No --model is --model wordpiece, and both are what `train_tokenizer` built before the flag
    (WordPiece orders tied counts at random, so the vocabularies themselves may differ)."""
    code, out, err = train_cli(capsys, corpus, tmp_path / "plain")
    assert code == 0, err
    assert out.endswith(f" tokens -> {tmp_path / 'plain'}\n")
    library = train_tokenizer([corpus], 400)
    for folder in (tmp_path / "plain", folders["wordpiece"]):
        assert (folder / "vocab.txt").is_file()
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            assert (folder / name).read_text() == (folders["wordpiece"] / name).read_text()
        saved = json.loads((folder / "tokenizer.json").read_text())
        built = json.loads(library.to_str())
        assert len(saved["model"].pop("vocab")) == len(built["model"].pop("vocab")) == 400
        assert saved == built
    assert (
        json.loads((tmp_path / "plain" / "tokenizer_config.json").read_text())["tokenizer_class"]
        == "ElectraTokenizer"
    )


@pytest.mark.parametrize("kind", list(KINDS))
def test_hugging_face_auto_tokenizer_encodes_like_ours(kind, folders):
    transformers = pytest.importorskip("transformers")
    ours = load_tokenizer(folders[kind])
    hf = transformers.AutoTokenizer.from_pretrained(str(folders[kind]))
    mask = ROLES[kind]["mask"]
    for args in ((TEXT,), (TEXT, PAIR), (f"the {mask} dog",), ("naïve Zürich ☃",)):
        encoded = hf(*args)
        assert encoded["input_ids"] == ours.encode(*args).ids
        assert encoded["token_type_ids"] == ours.encode(*args).type_ids
    special = special_ids(ours)
    assert (hf.pad_token_id, hf.unk_token_id, hf.cls_token_id) == (
        special.pad,
        special.unk,
        special.cls,
    )
    assert (hf.sep_token_id, hf.mask_token_id) == (special.sep, special.mask)
    ids = ours.encode(TEXT).ids
    assert hf.decode(ids, skip_special_tokens=True) == ours.decode(ids)


@pytest.fixture(scope="module")
def data(folders, corpus, tmp_path_factory) -> dict[str, Path]:
    from electra.cli.main import main

    root = tmp_path_factory.mktemp("data")
    for kind in ("bpe", "unigram"):
        argv = ["prepare", str(corpus), "--tokenizer", str(folders[kind]), "--seq-len", "32"]
        assert main([*argv, "--out", str(root / kind), "--workers", "1"]) == 0
    return {kind: root / kind for kind in ("bpe", "unigram")}


@pytest.mark.parametrize("preset", ["tiny", "modern-tiny"])
@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_prepare_and_pretraining_run_on_what_it_writes(
    kind, preset, folders, data, tmp_path, capsys
):
    transformers = pytest.importorskip("transformers")
    meta = json.loads((data[kind] / "meta.json").read_text())
    tok = load_tokenizer(folders[kind])
    assert meta["special_ids"] == vars(special_ids(tok))
    assert meta["tokenizer_fingerprint"] == fingerprint(tok)
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys, "pretrain", "--preset", preset, "--data", data[kind], "--out", run, *TINY
    )
    assert code == 0, err
    folder = run / "discriminator"
    assert fingerprint(load_tokenizer(folder)) == fingerprint(tok)
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert hf(TEXT, PAIR)["input_ids"] == tok.encode(TEXT, PAIR).ids
    model = transformers.AutoModel.from_pretrained(str(folder))
    assert model.config.pad_token_id == special_ids(tok).pad


def test_an_unknown_kind_is_one_error_line(corpus, tmp_path, capsys):
    code, _, err = train_cli(capsys, corpus, tmp_path / "tok", "--model", "sentencepiece")
    assert_one_line_error(code, err, "'sentencepiece'", "wordpiece, bpe, unigram")
    assert not (tmp_path / "tok").exists()
    with pytest.raises(ElectraError, match="unknown tokenizer model"):
        train_tokenizer([corpus], 400, model="BPE")


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (["--model", "bpe", "--vocab-size", "261"], ["256 byte tokens", "5 special tokens"]),
        (["--model", "unigram", "--vocab-size", "12"], ["vocab_size 12", "every character"]),
        (["--model", "unigram", "--min-frequency", "3"], ["--min-frequency", "Unigram"]),
    ],
    ids=["bpe-below-its-alphabet", "unigram-below-its-characters", "unigram-min-frequency"],
)
def test_settings_a_kind_cannot_train_with_are_one_error_line(
    flags, needles, corpus, tmp_path, capsys
):
    code, _, err = run_cli(capsys, "tokenizer", "train", corpus, "--out", tmp_path / "tok", *flags)
    assert_one_line_error(code, err, *needles)
    assert not (tmp_path / "tok").exists()


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_an_empty_corpus_is_one_error_line(kind, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    code, _, err = train_cli(capsys, empty, tmp_path / "tok", "--model", kind)
    assert_one_line_error(code, err, "no text found")
    assert not (tmp_path / "tok").exists()


@pytest.mark.parametrize(("kind", "why"), [("bpe", "BPE stops"), ("unigram", "Unigram keeps")])
def test_a_short_vocabulary_is_explained_for_the_kind(kind, why, corpus, tmp_path, capsys):
    code, out, err = run_cli(
        capsys,
        "tokenizer",
        "train",
        corpus,
        "--model",
        kind,
        "--vocab-size",
        50000,
        "--out",
        tmp_path / "tok",
    )
    assert code == 0, err
    assert out.startswith("note: the corpus gave") and why in out
