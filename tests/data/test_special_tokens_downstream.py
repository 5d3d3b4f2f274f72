"""A tokenizer's own special tokens and framing, past `prepare`: pretraining's model folders,
fine-tuning's rows, export and Hugging Face's tokenizer all use the ids `prepare` found (a pad
token spelled `<|endoftext|>`, say), fine-tuning frames a pair as the tokenizer does (RoBERTa's
`<s> A </s></s> B </s>`, so `pipeline()` agrees with `electra predict`), a modern model folder's
tokenizer truncates where the model stops reading, and `prepare` refuses up front the roles that
training could not keep apart."""

from __future__ import annotations

import json

import pytest
import torch

from electra.data.specials import SpecialIds, bert_framing, framing
from electra.data.tokenizer import load_tokenizer, special_ids, tokenizer_special_ids
from electra.folders.model_folder import save_pretrained
from electra.model.electra.modeling import ElectraForPreTraining
from electra.model.modernbert.config import ModernConfig
from electra.model.modernbert.modeling import ModernBertForPreTraining
from electra.tasks import get_task
from electra.tasks.base import pack
from electra.tasks.labelled import Example
from electra.tasks.qa_files import Question
from electra.tasks.tagging import Sentence
from tests.conftest import assert_one_line_error, finetune_cli, run_cli, write_csv
from tests.data.test_any_tokenizer import as_hub_folder, byte_bpe, prepare_cli, roberta_bpe, unigram
from tests.hf.test_hf import small_config
from tests.model.modernbert.test_modeling import bigger_weights
from tests.numerics import encoder_depth, rounding_bound

transformers = pytest.importorskip("transformers")

ENDOFTEXT = ["<|endoftext|>", "<s>", "</s>", "<mask>"]  # no <pad>, no <unk>: GPT-2's way
RUN_FLAGS = [
    "--train.batch_size=8",
    "--train.warmup_steps=2",
    "--train.log_every=5",
    "--train.save_every=100",
    "--train.progress=false",
    "--train.tensorboard=false",
]
FT_FLAGS = ["--batch-size", "8", "--no-progress", "--max-seq-len", "32", "--epochs", "1"]
FT_FLAGS += ["--device", "cpu", "--precision", "fp32"]
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "near",
    "river",
    "bank",
    "small",
    "red",
    "car",
]


def sentences(n: int, offset: int = 0) -> list[str]:
    return [
        " ".join(WORDS[(i + offset + j) % len(WORDS)] for j in range(3 + i % 4)) for i in range(n)
    ]


def endoftext_folder(root) -> tuple:
    """A byte-level BPE hub folder whose tokenizer_config.json names `<|endoftext|>` as pad (no
    known spelling does), with no post-processor of its own."""
    tok = byte_bpe(ENDOFTEXT)
    return as_hub_folder(tok, root / "hub", {"pad": "<|endoftext|>"}), tok.token_to_id(
        "<|endoftext|>"
    )


def test_an_endoftext_pad_goes_from_prepare_to_a_pipeline(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(sentences(3, d)) for d in range(40)))
    folder, pad = endoftext_folder(tmp_path)
    assert prepare_cli(capsys, corpus, folder, tmp_path / "data")[0] == 0
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys, "pretrain", "--preset", "modern-tiny", "--data", tmp_path / "data", "--out", run,
        "--steps", 3, "--seq-len", 32, *RUN_FLAGS,
    )  # fmt: skip
    assert code == 0, err
    for role in ("discriminator", "generator"):
        config = json.loads((run / role / "config.json").read_text())
        assert config["pad_token_id"] == pad
        tok_config = json.loads((run / role / "tokenizer_config.json").read_text())
        assert tok_config["pad_token"] == "<|endoftext|>" and "unk_token" not in tok_config
        # The model reads 8192 positions: HF's pipeline must not cut at BERT's 512.
        assert tok_config["model_max_length"] == config["max_position_embeddings"] == 8192
    hf_tok = transformers.AutoTokenizer.from_pretrained(run / "discriminator")
    ours = load_tokenizer(run / "discriminator")
    assert hf_tok.pad_token_id == pad == special_ids(ours).pad
    # prepare's BERT template over <s> </s> travelled with the model folder's tokenizer
    assert hf_tok("the dog")["input_ids"] == ours.encode("the dog").ids
    tokens = hf_tok.convert_ids_to_tokens(hf_tok("the dog")["input_ids"])
    assert (tokens[0], tokens[-1]) == ("<s>", "</s>")

    data = tmp_path / "cls"
    for split, n, offset in (("train", 16, 0), ("dev", 8, 5)):
        rows = [[s, "pos" if i % 2 else "neg"] for i, s in enumerate(sentences(n, offset))]
        write_csv(data / f"{split}.csv", ["text", "label"], rows)
    code, _, err = finetune_cli(capsys, run, "classification", data, tmp_path / "ft", *FT_FLAGS)
    assert code == 0, err
    code, _, err = run_cli(capsys, "export", "--model", tmp_path / "ft", "--out", tmp_path / "hf")
    assert code == 0, err
    exported = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert exported.pad_token_id == pad
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["pad_token_id"] == pad
    batch = exported(["the dog", "a quick brown fox jumps"], padding=True)
    assert batch["input_ids"][0][-1] == pad


def test_checkpoint_export_takes_the_special_ids_prepare_found(tmp_path):
    """`electra export --step` builds the objective from the run's tokenizer folder: the ids it
    reads there are the ones prepare recorded."""
    folder, pad = endoftext_folder(tmp_path)
    tok = load_tokenizer(folder)
    assert special_ids(tok) == tokenizer_special_ids(folder, tok)
    assert special_ids(tok).pad == pad


# --- prepare refuses what training could not keep apart ------------------------------------------


@pytest.mark.parametrize(
    "roles, needles",
    [
        ({"pad": "<|endoftext|>", "eos": "<|endoftext|>"}, ("pad and sep", "pad_token")),
        ({"pad": "<s>"}, ("pad and cls",)),
        ({"mask": "</s>", "pad": "<|endoftext|>"}, ("mask and sep", "mask_token")),
        ({"pad": "a", "sep": "</s>"}, ("'a'", "ordinary word", "special token")),
    ],
)
def test_prepare_refuses_roles_training_could_not_keep_apart(roles, needles, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences(20)))
    tok = byte_bpe(ENDOFTEXT)
    folder = as_hub_folder(tok, tmp_path / "hub", roles)
    code, _, err = prepare_cli(capsys, corpus, folder, tmp_path / "data")
    assert_one_line_error(code, err, str(folder), *needles)
    assert not (tmp_path / "data").exists()


# --- fine-tuning rows follow the tokenizer's framing ---------------------------------------------


def test_bert_framing_packs_as_before():
    special = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
    frame = bert_framing(special)
    assert pack([10, 11], [20], special, 8, frame) == ([2, 10, 11, 3, 20, 3], [0] * 4 + [1] * 2)
    assert pack([10, 11], None, special, 8, frame) == ([2, 10, 11, 3], [0] * 4)


@pytest.mark.parametrize("build", [roberta_bpe, unigram], ids=["roberta", "unigram"])
def test_task_rows_are_the_tokenizers_own_encodings(build):
    tok = build()
    frame = framing(tok, special_ids(tok))  # a bare Unigram is given BERT's template, as prepare
    a, b = "the quick dog ran", "to the river bank"

    task = get_task("classification")
    task.text_columns = ("text_a", "text_b")
    row = task.encode([Example("0", a, b, None)], tok, 64, False).tensors
    want = tok.encode(a, b)
    n = len(want.ids)
    assert row["input_ids"][0, :n].tolist() == want.ids
    assert row["token_type_ids"][0, :n].tolist() == want.type_ids
    assert row["attention_mask"][0].sum() == n

    tagger = get_task("tagging")
    words = a.split()
    enc = tagger.encode([Sentence("0", tuple(words), None)], tok, 64, False)
    want = tok.encode(words, is_pretokenized=True)
    assert enc.tensors["input_ids"][0, : len(want.ids)].tolist() == want.ids
    firsts = enc.meta["first_tokens"][0]
    assert [want.word_ids[p] for p in firsts] == list(range(len(words)))

    qa = get_task("qa")
    question = Question("q", b, a, (), is_impossible=True)
    enc = qa.encode([question], tok, 64, False)
    want = tok.encode(b, a)
    assert enc.tensors["input_ids"][0, : len(want.ids)].tolist() == want.ids
    offsets = enc.meta["offsets"][0]
    context = [i for i, o in enumerate(offsets) if o is not None]
    assert [want.sequence_ids[i] for i in context] == [1] * len(context)
    assert len(offsets) == len(want.ids) and frame.pair_extra == len(want.ids) - len(
        tok.encode(a, add_special_tokens=False).ids
    ) - len(tok.encode(b, add_special_tokens=False).ids)


def test_a_model_folder_of_a_bare_tokenizer_carries_the_template(tmp_path):
    """A tokenizer with no post-processor (a SentencePiece Unigram from the hub) is saved with
    BERT's template over its cls/sep, so HF's tokenizer frames rows as fine-tuning does."""
    tok = unigram()
    cfg = small_config(vocab_size=tok.get_vocab_size(), pad_token_id=tok.token_to_id("<pad>"))
    save_pretrained(ElectraForPreTraining(cfg), tmp_path / "m", tok)
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path / "m")
    tokens = hf.convert_ids_to_tokens(hf("the dog", "a fox")["input_ids"])
    assert tokens[0] == "<s>" and tokens[-1] == "</s>" and tokens.count("</s>") == 2
    assert (
        json.loads((tmp_path / "m" / "tokenizer_config.json").read_text())["model_max_length"]
        == 512
    )  # the electra family keeps BERT's 512, whatever its positions


@pytest.mark.numeric
def _roberta_pair_model(folder):
    """A small modern model with RoBERTa's BPE tokenizer (and its pair framing), saved to
    `folder`; returns its config."""
    tok = roberta_bpe()
    cfg = ModernConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=128,
        pad_token_id=tok.token_to_id("<pad>"),
        global_attn_every_n_layers=2,
        local_attention=8,
    )
    torch.manual_seed(0)
    model = ModernBertForPreTraining(cfg)
    bigger_weights(model)  # so that one token more or less moves the scores past rounding
    save_pretrained(model, folder, tok)
    return cfg


def _pair_files(data):
    """train.jsonl (16 pairs) and dev.jsonl (8) with `text_a`, `text_b` and a label."""
    data.mkdir()
    for split, n, offset in (("train", 16, 0), ("dev", 8, 3)):
        a, b = sentences(n, offset), sentences(n, offset + 7)
        rows = [
            {"text_a": x, "text_b": y, "label": "same" if i % 2 else "other"}
            for i, (x, y) in enumerate(zip(a, b, strict=True))
        ]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_roberta_pair_classifier_agrees_with_the_pipeline(tmp_path, capsys):
    cfg = _roberta_pair_model(tmp_path / "model")
    assert (
        json.loads((tmp_path / "model" / "tokenizer_config.json").read_text())["model_max_length"]
        == 128
    )
    data = tmp_path / "pairs"
    _pair_files(data)
    out = tmp_path / "ft"
    code, _, err = finetune_cli(
        capsys, tmp_path / "model", "classification", data, out, *FT_FLAGS, "--lr", "3e-3"
    )
    assert code == 0, err
    code, stdout, err = run_cli(capsys, "predict", "--model", out, data / "dev.jsonl")
    assert code == 0, err
    records = [json.loads(line) for line in stdout.splitlines()]
    code, _, err = run_cli(capsys, "export", "--model", out, "--out", tmp_path / "hf")
    assert code == 0, err
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    dev = [json.loads(line) for line in (data / "dev.jsonl").read_text().splitlines()]
    inputs = [{"text": r["text_a"], "text_pair": r["text_b"]} for r in dev]
    answers = [pipe(x, truncation=True) for x in inputs]
    answers = [a[0] if isinstance(a, list) else a for a in answers]
    assert len(records) == len(answers) == len(dev)
    # The rounding of the classifier (2 layers, the embeddings' and final LayerNorms, the head's
    # dense layer, LayerNorm and output layer, the softmax's sum: 9; the longest reduction the
    # intermediate size 48, above the pairs' rows) at its logits' size; a probability moves no
    # more than its logits do.
    with torch.no_grad():
        logits = [
            pipe.model(**pipe.tokenizer(x["text"], x["text_pair"], return_tensors="pt")).logits
            for x in inputs
        ]
    size = max(1.0, max(z.abs().max().item() for z in logits))
    bound = rounding_bound(torch.float32, cfg.intermediate_size, encoder_depth(2, 9), size)
    for r, p in zip(records, answers, strict=True):
        assert p["label"] == r["label"] and p["score"] == pytest.approx(r["score"], abs=bound)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    tokens = hf_tok.convert_ids_to_tokens(hf_tok(dev[0]["text_a"], dev[0]["text_b"])["input_ids"])
    assert tokens.count("</s>") == 3  # <s> A </s></s> B </s>
    task = get_task("classification")
    task.text_columns = ("text_a", "text_b")
    examples = [Example(str(i), r["text_a"], r["text_b"], None) for i, r in enumerate(dev)]
    rows = task.encode(examples, load_tokenizer(tmp_path / "hf"), 32, False).tensors
    for i, r in enumerate(dev):  # fine-tuning's rows are HF's tokenizer's
        want = hf_tok(r["text_a"], r["text_b"])["input_ids"]
        assert rows["input_ids"][i, : len(want)].tolist() == want
        assert rows["attention_mask"][i].sum() == len(want)
