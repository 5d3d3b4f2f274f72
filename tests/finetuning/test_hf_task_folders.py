"""Classifier, tagger and QA folders saved by `transformers` itself (tiny random ELECTRA and
ModernBERT models, issue 45 item 3), which record no text columns: `electra predict` reads one text
or a pair from a CSV's columns (--text-columns), from a file's default columns and from standard
input (a TAB for a pair, line by line), `evaluate` scores a labelled file by the columns named,
and every record is what transformers' own tokenizer and model give. Our own export, which loses
the columns too, is read alike; what cannot be read is one line saying what to do."""

from __future__ import annotations

import io
import json
from dataclasses import asdict

import pytest
import torch

from electra.data.tokenizer import save_tokenizer
from electra.finetuning.loading import load_finetuned_or_hf
from electra.finetuning.predict import Predictor
from electra.tasks.qa import Question
from tests.hf.test_hf_import import SENTIMENT, TAGS, sentences

from ..conftest import (
    assert_one_line_error,
    run_cli,
    tiny_model_config,
    tiny_modern_config,
    write_csv,
)
from ..finetuned_models import finetuned
from ..numerics import encoder_depth, rounding_bound

pytestmark = pytest.mark.numeric

transformers = pytest.importorskip(
    "transformers", reason="transformers (the hf extra) not installed"
)

FAMILIES = ("electra", "modernbert")
CLASSES = {
    "electra": "Electra",
    "modernbert": "ModernBert",
}
FAST = ["--device", "cpu", "--no-progress"]
# Ours and transformers' fp32 through the tiny encoders (2 or 3 layers, reductions of up to 64
# terms, and a head) differ by rounding only (tests/numerics.py), on logits and probabilities of
# size about 1 (`randomized` weights); a text left out or a wrong segment id moves them by over
# 1e-2 (checked below).
CLOSE = rounding_bound(torch.float32, terms=64, depth=encoder_depth(3, extra=3))


def randomized(model):
    """Weights far enough from transformers' initialisation (whose outputs are near uniform)
    that a text left out, a segment id or a misplaced weight changes every prediction."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm = "norm" in name.lower()
            p.copy_(1 + 0.1 * torch.randn_like(p) if norm else 0.2 * torch.randn_like(p))
    return model.eval()


def hf_config(family, tokenizer, **config):
    """transformers' config of a tiny model of `family`, its special ids the tokenizer's."""
    ids = {r: tokenizer.token_to_id(f"[{r.upper()}]") for r in ("pad", "cls", "sep")}
    if family == "electra":
        cfg = tiny_model_config(
            vocab_size=tokenizer.get_vocab_size(),
            max_position_embeddings=128,
            pad_token_id=ids["pad"],
        )
        return transformers.ElectraConfig(**asdict(cfg), **config)
    from tests.model.modernbert.test_modeling import hf_config as modern_config

    cfg = tiny_modern_config(
        vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=128, pad_token_id=ids["pad"]
    )
    hf_cfg = modern_config(cfg, "sdpa")
    specials = {"cls_token_id": ids["cls"], "bos_token_id": ids["cls"]}
    specials |= {"sep_token_id": ids["sep"], "eos_token_id": ids["sep"]}
    for key, value in {**specials, **config}.items():
        setattr(hf_cfg, key, value)
    return hf_cfg


def saved(family, root, tokenizer, head, **config):
    """(folder, model): a random `transformers` {family}For{head}, saved by `save_pretrained`
    beside the tokenizer (the modern family's emitting no token types, as its own)."""
    arch = f"{CLASSES[family]}For{head}"
    if "id2label" in config:
        config["id2label"] = {int(k): v for k, v in config["id2label"].items()}
        config["label2id"] = {v: k for k, v in config["id2label"].items()}
    torch.manual_seed(1)
    model = randomized(getattr(transformers, arch)(hf_config(family, tokenizer, **config)))
    out = root / arch
    model.save_pretrained(out)
    save_tokenizer(tokenizer, out, lowercase=True, token_types=family == "electra")
    return out, model


def hf_tokenizer(folder):
    return transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)


def predicted(capsys, model, *args, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code, stdout, err = run_cli(capsys, "predict", "--model", model, *args, *FAST)
    assert code == 0, err
    return [json.loads(line) for line in stdout.splitlines()]


def evaluated(capsys, model, dev, out, *flags):
    """`electra evaluate`'s standard output and the predictions it wrote."""
    code, stdout, err = run_cli(
        capsys, "evaluate", "--model", model, "--dev", dev, "--out", out, "--device", "cpu", *flags
    )
    assert code == 0, err
    return stdout, [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]


def hf_probabilities(folder, hf, texts, pairs=None):
    """transformers' softmax over its own tokenizer's batch of the texts (or pairs)."""
    batch = hf_tokenizer(folder)(texts, pairs, padding=True, return_tensors="pt")
    with torch.no_grad():
        return hf(**batch).logits.softmax(-1)


def agree(records, probabilities):
    """Each record's label and scores are transformers' probabilities."""
    names = [SENTIMENT[str(j)] for j in range(2)]
    assert [r["label"] for r in records] == [names[i] for i in probabilities.argmax(-1).tolist()]
    got = torch.tensor([[r["scores"][n] for n in names] for r in records])
    assert (got - probabilities).abs().max().item() <= CLOSE


# --- classifiers: one text or a pair ------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_a_classifier_reads_a_text_or_a_pair_from_columns_files_and_stdin(
    family, tmp_path, capsys, monkeypatch, task_tokenizer
):
    folder, hf = saved(
        family, tmp_path, task_tokenizer, "SequenceClassification", id2label=SENTIMENT
    )
    firsts, seconds = sentences(9, seed=5), sentences(9, seed=6)
    rows = list(zip(firsts, seconds, strict=True))
    table = write_csv(tmp_path / "in.csv", ["sentence1", "sentence2"], rows)
    jsonl = tmp_path / "in.jsonl"  # text_a and text_b: read as a pair with no flag
    jsonl.write_text("".join(json.dumps({"text_a": a, "text_b": b}) + "\n" for a, b in rows))
    single = hf_probabilities(folder, hf, firsts)
    pair = hf_probabilities(folder, hf, firsts, seconds)
    assert (single - pair).abs().max().item() > 1e-2  # the second text matters

    agree(predicted(capsys, folder, table, "--text-columns", "sentence1", "--all-scores"), single)
    lines = "".join(f"{a}\n" for a in firsts)
    agree(
        predicted(capsys, folder, "-", "--all-scores", stdin=lines, monkeypatch=monkeypatch), single
    )
    by_columns = predicted(
        capsys, folder, table, "--text-columns", "sentence1", "sentence2", "--all-scores"
    )
    agree(by_columns, pair)
    agree(predicted(capsys, folder, jsonl, "--all-scores"), pair)
    lines = "".join(f"{a}\t{b}\n" for a, b in rows)
    agree(
        predicted(capsys, folder, "-", "--all-scores", stdin=lines, monkeypatch=monkeypatch), pair
    )

    # Each line by itself: a text, a pair, a blank line, in their places.
    mixed = f"{firsts[0]}\n{firsts[1]}\t{seconds[1]}\n\n"
    records = predicted(capsys, folder, "-", "--all-scores", stdin=mixed, monkeypatch=monkeypatch)
    agree(records[:1], single[:1])
    agree(records[1:2], pair[1:2])
    assert records[2] == {"id": "2", "empty": True}
    # From Python, as from standard input.
    predictor = Predictor.load(folder, device="cpu")
    agree(
        predictor([firsts[0], (firsts[1], seconds[1])], all_scores=True),
        torch.stack([single[0], pair[1]]),
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_evaluate_scores_a_classifier_by_the_columns_named(
    family, tmp_path, capsys, task_tokenizer
):
    folder, hf = saved(
        family, tmp_path, task_tokenizer, "SequenceClassification", id2label=SENTIMENT
    )
    firsts, seconds = sentences(16, seed=7), sentences(16, seed=8)
    gold = [SENTIMENT[str(i % 2)] for i in range(16)]
    dev = write_csv(
        tmp_path / "dev.csv",
        ["premise", "hypothesis", "gold"],
        zip(firsts, seconds, gold, strict=True),
    )
    for columns, probabilities in (
        (["premise"], hf_probabilities(folder, hf, firsts)),
        (["premise", "hypothesis"], hf_probabilities(folder, hf, firsts, seconds)),
    ):
        out = tmp_path / f"ev{len(columns)}"
        flags = ["--text-columns", *columns, "--label-column", "gold"]
        stdout, rows = evaluated(capsys, folder, dev, out, *flags)
        want = [SENTIMENT[str(i)] for i in probabilities.argmax(-1).tolist()]
        accuracy = 100 * sum(p == g for p, g in zip(want, gold, strict=True)) / len(gold)
        results = json.loads((out / "results.json").read_text())
        assert results["metrics"]["accuracy"] == pytest.approx(accuracy)
        assert [r["prediction"] for r in rows] == want and [r["label"] for r in rows] == gold
        assert f"classification dev accuracy: {accuracy:.2f}" in stdout


# --- taggers and QA ----------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_a_tagger_reads_files_and_stdin_with_transformers_tags(
    family, tmp_path, capsys, monkeypatch, task_tokenizer
):
    folder, hf = saved(
        family, tmp_path, task_tokenizer, "TokenClassification", id2label=dict(enumerate(TAGS))
    )
    words = [s.split() for s in sentences(8, seed=9)]
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps({"tokens": w, "tags": ["O"] * len(w)}) + "\n" for w in words))
    batch = hf_tokenizer(folder)(words, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = hf(**batch).logits
    want = []
    for i in range(len(words)):  # each word's tag is its first piece's, as HF's "first"
        ids = batch.word_ids(i)
        firsts = [ids.index(w) for w in range(len(words[i]))]
        want.append([TAGS[t] for t in logits[i, firsts].argmax(-1).tolist()])

    from_file = predicted(capsys, folder, dev)
    assert [r["tags"] for r in from_file] == want
    lines = "".join(" ".join(w) + "\n" for w in words)
    assert predicted(capsys, folder, "-", stdin=lines, monkeypatch=monkeypatch) == from_file
    stdout, rows = evaluated(capsys, folder, dev, tmp_path / "ev")
    assert [r["prediction"] for r in rows] == want and "tagging dev f1:" in stdout


@pytest.mark.parametrize("family", FAMILIES)
def test_a_qa_model_reads_squad_files_and_stdin_as_transformers_encodes(
    family, tmp_path, capsys, monkeypatch, task_tokenizer
):
    folder, hf = saved(family, tmp_path, task_tokenizer, "QuestionAnswering")
    context = " ".join(sentences(1, seed=4, length=(30, 31)))
    questions = ["who went to the store", "where is the cat"]
    task, model, tokenizer, cfg = load_finetuned_or_hf(folder)
    # Our rows are transformers' (question, context) encoding, and so are the logits.
    theirs = hf_tokenizer(folder)(questions, [context] * 2, padding=True, return_tensors="pt")
    examples = [Question(str(i), q, context, (), False) for i, q in enumerate(questions)]
    ours = task.encode(examples, tokenizer, cfg.max_seq_len, training=False).tensors
    ours = {k: v[:, : theirs["input_ids"].shape[1]] for k, v in ours.items()}
    for name in theirs:  # the modern family's tokenizer emits no token types: none to compare
        assert torch.equal(ours[name], theirs[name]), name
    with torch.no_grad():
        want = hf(**theirs)
        got = model.eval()(ours["input_ids"], ours["token_type_ids"], ours["attention_mask"])
    real = theirs["attention_mask"].bool()  # a padded place's logit is nobody's answer
    for name in ("start_logits", "end_logits"):
        assert (getattr(want, name) - got[name])[real].abs().max().item() <= CLOSE

    squad = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": str(i), "question": q, "answers": [{"text": context.split()[0], "answer_start": 0}],
         "is_impossible": False} for i, q in enumerate(questions)
    ]}]}]}  # fmt: skip
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps(squad))
    from_file = predicted(capsys, folder, dev)
    lines = "".join(f"{q}\t{context}\n" for q in questions)
    assert predicted(capsys, folder, "-", stdin=lines, monkeypatch=monkeypatch) == from_file
    stdout, rows = evaluated(capsys, folder, dev, tmp_path / "ev")
    assert "qa dev exact:" in stdout and [r["id"] for r in rows] == ["0", "1"]


# --- our own export, and what is refused -------------------------------------------------------


def test_our_exported_classifier_reads_any_columns_and_stdin(
    tmp_path_factory, tmp_path, capsys, monkeypatch
):
    model = finetuned(tmp_path_factory, "sst2")
    code, _, err = run_cli(capsys, "export", "--model", model, "--out", tmp_path / "hf")
    assert code == 0, err
    texts = ["a good film", "an awful movie , not fun"]
    table = write_csv(tmp_path / "in.csv", ["review"], [[t] for t in texts])
    lines = "".join(f"{t}\n" for t in texts)
    ours = predicted(capsys, model, "-", stdin=lines, monkeypatch=monkeypatch)
    exported = predicted(capsys, tmp_path / "hf", "-", stdin=lines, monkeypatch=monkeypatch)
    by_column = predicted(capsys, tmp_path / "hf", table, "--text-columns", "review")
    for a, b, c in zip(ours, exported, by_column, strict=True):
        assert a["label"] == b["label"] == c["label"]
        assert a["score"] == pytest.approx(b["score"], abs=CLOSE) == c["score"]


def test_what_an_hf_folder_cannot_read_is_one_line(tmp_path, capsys, monkeypatch, task_tokenizer):
    classifier, _ = saved("electra", tmp_path, task_tokenizer, "SequenceClassification")
    table = write_csv(tmp_path / "in.csv", ["a", "b", "c"], [["the cat", "a dog", "the mat"]])
    code, _, err = run_cli(
        capsys, "predict", "--model", classifier, table, "--text-columns", "a", "b", "c"
    )
    assert_one_line_error(code, err, "--text-columns: 3 columns", "name one column, or two")
    code, _, err = run_cli(capsys, "predict", "--model", classifier, table)
    assert_one_line_error(code, err, "no column 'text'", "--text-columns")
    monkeypatch.setattr("sys.stdin", io.StringIO("the cat\ta dog\tthe mat\n"))
    code, _, err = run_cli(capsys, "predict", "--model", classifier, "-")
    assert_one_line_error(
        code, err, "standard input, line 1: 3 TAB-separated fields", "one text, or a pair"
    )
    code, _, err = run_cli(
        capsys, "evaluate", "--model", classifier, "--dev", table, "--text-columns", "a",
        "--label-column", "gold", "--out", tmp_path / "ev",
    )  # fmt: skip
    assert_one_line_error(code, err, "no column 'gold'", "--label-column")
    tagger, _ = saved(
        "electra", tmp_path, task_tokenizer, "TokenClassification", id2label=dict(enumerate(TAGS))
    )
    code, _, err = run_cli(capsys, "predict", "--model", tagger, table, "--text-columns", "a")
    assert_one_line_error(code, err, "--text-columns", "not tagging's")
    qa_model, _ = saved("electra", tmp_path, task_tokenizer, "QuestionAnswering")
    monkeypatch.setattr("sys.stdin", io.StringIO("who sat on the mat\n"))
    code, _, err = run_cli(capsys, "predict", "--model", qa_model, "-")
    assert_one_line_error(code, err, "standard input, line 1", "a question, a TAB and its context")
