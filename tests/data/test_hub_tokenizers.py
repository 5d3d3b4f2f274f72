"""Tokenizers as the hub ships them: a folder with only a SentencePiece model (DeBERTa-v3's
`spm.model`, XLM-R's `sentencepiece.bpe.model`) converted as transformers converts it (the ids
of transformers' own tokenizer and of sentencepiece itself, pairs framed by the model's template);
the one line where the `spm` extra is missing or the file is not a SentencePiece model; a RoBERTa
byte-level BPE tokenizer.json framing pairs `<s> A </s></s> B </s>` as transformers' RoBERTa
does; and `electra prepare` from a folder with only `spm.model`, whose data folder carries a
tokenizer.json that loads without the extra."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from tokenizers import processors
from tokenizers.implementations import ByteLevelBPETokenizer

from electra.data.specials import SpecialIds, framing
from electra.data.store import PretrainingData
from electra.data.tokenizer import (
    fingerprint,
    load_tokenizer,
    lowercases,
    special_ids,
    tokenizer_special_ids,
)
from electra.errors import ElectraError
from electra.folders.model_folder import load_pretrained

from ..conftest import assert_one_line_error, run_cli

needs_spm = pytest.mark.skipif(
    importlib.util.find_spec("sentencepiece") is None
    or importlib.util.find_spec("transformers") is None,
    reason="sentencepiece or transformers is not installed (pip install -e '.[dev]' has both)",
)
needs_hf = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers is not installed (pip install -e '.[dev]' has it)",
)

SENTENCES = (
    "the quick brown fox jumps over a lazy dog",
    "while small birds sing in tall green trees",
    "and children read stories about distant mountains rivers cities oceans",
)
# Made-up words of shared syllables besides them: the model must cut words into pieces.
SYLLABLES = ("ka", "to", "ri", "mel", "son", "dra", "vi", "pex", "lu", "qua", "ne", "bor")
WORDS = [word for line in SENTENCES for word in line.split()]
WORDS += [a + b + c for a in SYLLABLES for b in SYLLABLES[::5] for c in ("", "s", "ka")]
TEXTS = [
    "the quick brown fox",
    "children read stories about distant oceans",
    "a lazy dog sings",
    "Unseen Capitals 42 and the river",  # characters the model never saw: its unknown id
    "  spaces   between\twords  ",
    "kamelka drason vipexs quaneka borto",
]
PLAIN = [
    *TEXTS[:4],
    TEXTS[5],
]  # as sentencepiece itself encodes them (no whitespace the classes treat apart)
PAIR = ("the quick brown fox", "a lazy dog")


def corpus_lines(n: int = 300) -> list[str]:
    return [
        " ".join(WORDS[(7 * i + 3 * j) % len(WORDS)] for j in range(4 + i % 9)) for i in range(n)
    ]


def train_spm(prefix: Path, **ids) -> Path:
    """A small SentencePiece Unigram model (XLM-R's and DeBERTa-v3's are Unigram, whatever the
    file is called) trained on `corpus_lines`; `ids` places its special pieces."""
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines()),
        model_prefix=str(prefix),
        vocab_size=150,
        model_type="unigram",
        hard_vocab_limit=False,
        minloglevel=2,
        **ids,
    )
    Path(f"{prefix}.vocab").unlink()
    return Path(f"{prefix}.model")


@pytest.fixture(scope="session")
def spm_models(tmp_path_factory) -> dict[str, Path]:
    """DeBERTa-v3's piece layout ([PAD] [CLS] [SEP] [UNK] at 0-3) and XLM-R's (<unk> <s> </s>, no
    pad: its tokenizer puts fairseq's <s> <pad> </s> <unk> at 0-3 and shifts the pieces by one)."""
    if importlib.util.find_spec("sentencepiece") is None:
        pytest.skip("sentencepiece is not installed")
    root = tmp_path_factory.mktemp("spm")
    deberta = dict(pad_id=0, pad_piece="[PAD]", bos_id=1, bos_piece="[CLS]", eos_id=2)
    deberta |= dict(eos_piece="[SEP]", unk_id=3, unk_piece="[UNK]")
    return {
        "spm.model": train_spm(root / "spm", **deberta),
        "sentencepiece.bpe.model": train_spm(root / "sentencepiece.bpe"),
    }


def spm_folder(root: Path, model: Path, name: str, **configs: dict) -> Path:
    """A hub-style folder: the model file under `name` and the config files given."""
    root.mkdir(parents=True)
    shutil.copy(model, root / name)
    for file, content in configs.items():
        (root / f"{file}.json").write_text(json.dumps(content))
    return root


def sentencepiece_ids(model: Path, text: str, offset: int, unk: int) -> list[int]:
    """sentencepiece's own ids for `text`, shifted as the tokenizer class shifts them."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
    return [unk if i == sp.unk_id() else i + offset for i in sp.encode(text)]


# Per hub layout: the class transformers reads it with, its roles, the sentencepiece id offset,
# the pair frame (before A, between, after B) and whether B's part is typed 1.
LAYOUTS = {
    "spm.model": (
        "DebertaV2Tokenizer",
        dict(pad="[PAD]", unk="[UNK]", cls="[CLS]", sep="[SEP]", mask="[MASK]"),
        0,
        (("[CLS]",), ("[SEP]",), ("[SEP]",)),
        True,
    ),
    "sentencepiece.bpe.model": (
        "XLMRobertaTokenizer",
        dict(pad="<pad>", unk="<unk>", cls="<s>", sep="</s>", mask="<mask>"),
        1,
        (("<s>",), ("</s>", "</s>"), ("</s>",)),
        False,
    ),
}
# What a hub folder holds beside the model file: nothing; DeBERTa-v3's tokenizer_config.json
# (no class named); the model's config.json (the class found from its model type).
BESIDES = {
    "bare": {},
    "tokenizer_config": {"tokenizer_config": {"do_lower_case": False, "vocab_type": "spm"}},
    "config": {"config": {"model_type": "MODEL_TYPE"}},
}
MODEL_TYPES = {"spm.model": "deberta-v2", "sentencepiece.bpe.model": "xlm-roberta"}


@needs_spm
@pytest.mark.parametrize("besides", list(BESIDES))
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_a_sentencepiece_folder_converts_as_transformers_and_sentencepiece_encode(
    spm_models, name, besides, tmp_path
):
    import transformers

    class_name, roles, offset, frame, typed = LAYOUTS[name]
    configs = json.loads(json.dumps(BESIDES[besides]).replace("MODEL_TYPE", MODEL_TYPES[name]))
    folder = spm_folder(tmp_path / "hub", spm_models[name], name, **configs)
    tok = load_tokenizer(folder)
    hf = getattr(transformers, class_name).from_pretrained(str(folder))

    for text in TEXTS:
        assert tok.encode(text).ids == hf(text)["input_ids"], text
    special = tokenizer_special_ids(folder, tok)
    expected = SpecialIds(**{role: tok.token_to_id(token) for role, token in roles.items()})
    assert special == expected == special_ids(tok)
    assert (expected.pad, expected.mask) == (hf.pad_token_id, hf.mask_token_id)
    for text in PLAIN:  # the pieces are sentencepiece's own
        pieces = sentencepiece_ids(spm_models[name], text, offset, expected.unk)
        assert tok.encode(text, add_special_tokens=False).ids == pieces, text

    # A pair is framed as the model's template says, and electra's framing reads it so.
    a, b = (tok.encode(t, add_special_tokens=False).ids for t in PAIR)
    ids = [tok.token_to_id(t) for t in frame[0]] + a + [tok.token_to_id(t) for t in frame[1]]
    ids += b + [tok.token_to_id(t) for t in frame[2]]
    encoding = tok.encode(*PAIR)
    assert encoding.ids == ids == hf(*PAIR)["input_ids"]
    row_ids, row_types = framing(tok, special, str(folder)).row(a, b)
    assert row_ids == ids
    assert row_types == encoding.type_ids
    assert (1 in row_types) is typed
    assert lowercases(tok) is False


@needs_spm
def test_do_lower_case_in_the_folder_is_kept(spm_models, tmp_path):
    config = {"do_lower_case": True, "vocab_type": "spm"}
    folder = spm_folder(
        tmp_path / "hub", spm_models["spm.model"], "spm.model", tokenizer_config=config
    )
    tok = load_tokenizer(folder)
    assert lowercases(tok) is True
    assert tok.encode("THE Quick").ids == tok.encode("the quick").ids


def test_without_the_extra_a_sentencepiece_folder_is_one_line_and_nothing_is_written(
    tmp_path, capsys, monkeypatch
):
    folder = tmp_path / "deberta-v3"
    folder.mkdir()
    (folder / "spm.model").write_bytes(b"\x00" * 64)  # never read: the extra is checked first
    (tmp_path / "corpus.txt").write_text("\n".join(corpus_lines(20)) + "\n")
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # `import sentencepiece` fails
    out = tmp_path / "data"
    code, _, err = run_cli(
        capsys, "prepare", tmp_path / "corpus.txt", "--tokenizer", folder, "--out", out
    )
    assert_one_line_error(
        code, err, str(folder), "spm.model", "sentencepiece", "pip install 'electra[spm]'"
    )
    assert not out.exists()
    assert sorted(p.name for p in folder.iterdir()) == ["spm.model"]


def test_a_folder_with_a_tokenizer_json_never_converts(tmp_path, monkeypatch):
    """xlm-roberta-base ships both files: its tokenizer.json is read, with or without the extra."""
    folder = tmp_path / "xlmr"
    folder.mkdir()
    roberta_bpe().save(str(folder / "tokenizer.json"))
    (folder / "sentencepiece.bpe.model").write_bytes(b"\x00" * 64)
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    assert load_tokenizer(folder).token_to_id("<mask>") is not None


@needs_spm
def test_a_file_that_is_not_a_sentencepiece_model_is_one_line(tmp_path, capsys):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "spm.model").write_bytes(bytes(range(256)) * 8)
    with pytest.raises(ElectraError, match="is not a SentencePiece model") as error:
        load_tokenizer(folder)
    assert "\n" not in str(error.value) and str(folder / "spm.model") in str(error.value)


def roberta_bpe() -> ByteLevelBPETokenizer:
    tok = ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok.train_from_iterator(corpus_lines(), vocab_size=400, special_tokens=specials)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tok


@needs_hf
def test_a_roberta_byte_level_bpe_frames_pairs_as_roberta(tmp_path):
    from transformers import RobertaTokenizer

    tok = roberta_bpe()
    folder = tmp_path / "roberta"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    vocab = tmp_path / "vocab-merges"  # the same BPE as transformers' RoBERTa reads it
    vocab.mkdir()
    tok.save_model(str(vocab))
    hf = RobertaTokenizer.from_pretrained(str(vocab))

    loaded = load_tokenizer(folder)
    special = special_ids(loaded)
    assert special == SpecialIds(pad=1, unk=3, cls=0, sep=2, mask=4)
    a, b = (loaded.encode(t, add_special_tokens=False).ids for t in PAIR)
    ids, types = framing(loaded, special).row(a, b)
    assert ids == [0, *a, 2, 2, *b, 2] == hf(*PAIR)["input_ids"]
    assert types == [0] * len(ids)  # RoBERTa types nothing
    assert loaded.encode(*PAIR).ids == ids


@needs_spm
def test_prepare_from_a_folder_with_only_spm_model(spm_models, tmp_path, capsys, monkeypatch):
    from transformers import AutoTokenizer

    folder = spm_folder(tmp_path / "deberta-v3", spm_models["spm.model"], "spm.model")
    (tmp_path / "corpus.txt").write_text("\n".join(corpus_lines(200)) + "\n")
    data = tmp_path / "data"
    code, _, err = run_cli(
        capsys, "prepare", tmp_path / "corpus.txt", "--tokenizer", folder, "--out", data,
        "--seq-len", 32,
    )  # fmt: skip
    assert code == 0, err
    assert sorted(p.name for p in folder.iterdir()) == ["spm.model"]  # the hub folder untouched

    converted = load_tokenizer(folder)
    meta = json.loads((data / "meta.json").read_text())
    expected = SpecialIds(pad=0, unk=3, cls=1, sep=2, mask=converted.token_to_id("[MASK]"))
    assert meta["special_ids"] == vars(expected)
    assert meta["tokenizer_fingerprint"] == fingerprint(converted)
    assert (data / "tokenizer" / "tokenizer.json").is_file()
    # The data folder carries a tokenizer.json: it loads, the same, without the extra.
    hf = AutoTokenizer.from_pretrained(str(data / "tokenizer"))
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    assert PretrainingData(data).special == expected
    saved = load_tokenizer(data / "tokenizer")
    for text in TEXTS:
        assert saved.encode(text).ids == converted.encode(text).ids == hf(text)["input_ids"]
    assert saved.encode(*PAIR).ids == converted.encode(*PAIR).ids == hf(*PAIR)["input_ids"]


def deberta_v3_folder(root: Path, model: Path, vocab_size: int) -> Path:
    """A microsoft/deberta-v3-style model folder: weights, config.json, spm.model and the hub's
    tokenizer_config.json, no tokenizer.json."""
    from transformers import DebertaV2Config, DebertaV2ForMaskedLM

    config = DebertaV2Config(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        relative_attention=True,
        position_buckets=16,
        pos_att_type=["p2c", "c2p"],
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        position_biased_input=False,
    )
    DebertaV2ForMaskedLM(config).save_pretrained(str(root))
    shutil.copy(model, root / "spm.model")
    (root / "tokenizer_config.json").write_text('{"do_lower_case": false, "vocab_type": "spm"}')
    return root


@needs_spm
def test_a_deberta_v3_model_folder_loads_with_its_converted_tokenizer(spm_models, tmp_path):
    import sentencepiece

    pieces = sentencepiece.SentencePieceProcessor(model_file=str(spm_models["spm.model"]))
    size = pieces.get_piece_size() + 1  # and the [MASK] the class adds
    folder = deberta_v3_folder(tmp_path / "deberta-v3", spm_models["spm.model"], size + 99)
    model, tok = load_pretrained(folder)
    assert model.config.arch == "deberta-v3"  # model_type deberta-v2: the native family
    assert tok.get_vocab_size() == size
    assert special_ids(tok) == SpecialIds(pad=0, unk=3, cls=1, sep=2, mask=size - 1)
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        "spm.model",
        "tokenizer_config.json",
    ]

    small = deberta_v3_folder(tmp_path / "small", spm_models["spm.model"], size - 20)
    with pytest.raises(
        ElectraError,
        match=f"has {size} tokens, ids up to {size - 1} .* the model {size - 20} \\(vocab",
    ):
        load_pretrained(small)
