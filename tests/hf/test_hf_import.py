"""Hugging Face ELECTRA folders with a task head, or none, as `transformers` saves them (tiny random
models): `finetune --model` takes their encoder (the weights exactly, the head left behind and
said so), and `predict` / `evaluate` run classifiers, taggers and QA models as they are, with
their `id2label`, giving transformers' logits; other folders are one-line errors."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import torch

from electra.data.tokenizer import save_tokenizer
from electra.finetuning.loading import load_finetuned_or_hf
from electra.hf.from_transformers import load_encoder
from electra.model.electra.modeling import ElectraModel
from electra.tasks.qa import Question

from ..conftest import WORDS, assert_one_line_error, run_cli, tiny_model_config
from ..numerics import encoder_depth, largest, rounding_bound

pytestmark = pytest.mark.numeric

transformers = pytest.importorskip(
    "transformers", reason="transformers (the hf extra) not installed"
)

FAST = ["--batch-size", "8", "--no-progress", "--lr", "3e-3", "--epochs", "1"]
FAST += ["--max-seq-len", "32", "--device", "cpu"]
SENTIMENT = {"0": "negative", "1": "positive"}
TAGS = ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")


def hf_folder(root, tokenizer, arch, seed=0, **config):
    """A random `transformers` model of class `arch` saved with `save_pretrained`, every weight
    (biases and LayerNorms too) moved off its initial value so that a misplaced one shows."""
    cfg = tiny_model_config(vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=128)
    torch.manual_seed(seed)
    model = getattr(transformers, arch)(transformers.ElectraConfig(**asdict(cfg), **config))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    out = root / arch
    model.save_pretrained(out)
    save_tokenizer(tokenizer, out, lowercase=True)
    return out, model.eval()


def within_rounding(mine, theirs, head: bool = True) -> float:
    """Asserts our outputs are `transformers`' to the rounding of the tiny encoder (2 layers,
    the embeddings' LayerNorm and projection, and a head's two products or fewer; the longest
    reduction a row's keys, at most the folder's 128 positions, above the intermediate size 64);
    returns the bound, which probabilities and values taken from these outputs keep too."""
    cfg = tiny_model_config()
    depth = encoder_depth(cfg.num_hidden_layers, extra=5 if head else 3)
    terms = max(cfg.intermediate_size, 128)
    bound = rounding_bound(torch.float32, terms, depth, largest(theirs))
    assert (mine - theirs).abs().max().item() <= bound
    return bound


def sentences(n, seed=0, length=(3, 14)):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(*length, (n,), generator=g).tolist()
    return [" ".join(WORDS[i] for i in torch.randint(len(WORDS), (k,), generator=g)) for k in sizes]


def write_csv(path, header, rows):
    path.write_text("\n".join([",".join(header), *(",".join(r) for r in rows)]) + "\n")
    return path


def hf_logits(hf, batch):
    with torch.no_grad():
        return hf(
            input_ids=batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
        )


def predicted(capsys, model, *args):
    code, stdout, err = run_cli(capsys, "predict", "--model", model, *args)
    assert code == 0, err
    return [json.loads(line) for line in stdout.splitlines()]


# --- finetune --model: the encoder of every kind of folder ---------------------------------------


HF_CLASSES = (
    "ElectraModel",
    "ElectraForSequenceClassification",
    "ElectraForTokenClassification",
    "ElectraForQuestionAnswering",
    "ElectraForPreTraining",  # as before
)


@pytest.mark.parametrize("arch", HF_CLASSES)
def test_finetune_takes_the_encoder_of_every_hf_folder(arch, tmp_path, capsys, task_tokenizer):
    folder, hf = hf_folder(tmp_path, task_tokenizer, arch)
    # The encoder's weights exactly, under our names; the head's left out.
    cfg, state, _, source = load_encoder(folder)
    assert source == folder
    base = hf if arch == "ElectraModel" else hf.electra
    ours = ElectraModel(cfg).eval()
    ours.load_state_dict({k.removeprefix("electra."): v for k, v in state.items()})
    ids = torch.tensor([[2, 10, 11, 12, 3, 0, 0], [2, 13, 14, 15, 16, 17, 3]])
    mask = (ids != 0).long()
    with torch.no_grad():
        theirs = base(input_ids=ids, attention_mask=mask).last_hidden_state
        mine = ours(ids, torch.zeros_like(ids), mask)
    within_rounding(mine[mask.bool()], theirs[mask.bool()], head=False)
    capsys.readouterr()
    # A very short fine-tuning run from it: the head is said to be dropped, once.
    rows = [[s, SENTIMENT[str(i % 2)]] for i, s in enumerate(sentences(24))]
    write_csv(tmp_path / "train.csv", ["text", "label"], rows[:16])
    write_csv(tmp_path / "dev.csv", ["text", "label"], rows[16:])
    out = tmp_path / "ft"
    code, _, err = run_cli(
        capsys, "finetune", "--model", folder, "--task", "classification", "--out", out,
        "--data", tmp_path, *FAST,
    )  # fmt: skip
    assert code == 0, err
    note = "head is not used: a new one is trained"
    assert err.count(note) == (0 if arch in ("ElectraModel", "ElectraForPreTraining") else 1)
    if arch == "ElectraForSequenceClassification":
        assert "its classification head is not used: a new one is trained" in err
    assert json.loads((out / "results.json").read_text())["model"] == str(folder)


# --- predict and evaluate: classifiers, taggers and QA models run as they are ------------------

KINDS = {
    "single": dict(id2label=SENTIMENT),
    "multi": dict(
        id2label={"0": "sport", "1": "art", "2": "news"},
        problem_type="multi_label_classification",
    ),
    "regression": dict(num_labels=1),  # no problem_type: HF's loss makes it a regression
}


@pytest.mark.parametrize("kind", KINDS)
def test_predict_runs_an_hf_classifier_with_transformers_logits(
    kind, tmp_path, capsys, task_tokenizer
):
    folder, hf = hf_folder(
        tmp_path, task_tokenizer, "ElectraForSequenceClassification", **KINDS[kind]
    )
    task, model, tokenizer, cfg = load_finetuned_or_hf(folder)
    assert task.name == {"single": "classification", "multi": "multilabel"}.get(kind, kind)
    assert cfg.max_seq_len == 128  # the model's positions (tokenizer_config says 512)
    texts = sentences(12)
    # Rows of different lengths, padded to the longest: the padding must change nothing.
    examples = task.read_inputs(write_csv(tmp_path / "in.csv", ["text"], [[t] for t in texts]))
    batch = task.encode(examples, tokenizer, 32, training=False).tensors
    assert batch["attention_mask"].sum(1).unique().numel() > 3
    theirs = hf_logits(hf, batch).logits
    with torch.no_grad():
        mine = model.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    assert mine.shape == theirs.shape
    bound = within_rounding(mine, theirs)
    records = predicted(capsys, folder, tmp_path / "in.csv", "--all-scores")
    assert [r["id"] for r in records] == [str(i) for i in range(len(texts))]
    if kind == "single":
        probs = theirs.softmax(-1)
        assert [r["label"] for r in records] == [
            SENTIMENT[str(i)] for i in probs.argmax(-1).tolist()
        ]
        got = torch.tensor([[r["scores"][SENTIMENT[str(j)]] for j in range(2)] for r in records])
    elif kind == "multi":
        probs, names = theirs.sigmoid(), ("sport", "art", "news")
        want = [[names[j] for j in range(3) if p[j] > 0.5] for p in probs]
        assert [r["labels"] for r in records] == want
        got = torch.tensor([[r["scores"][n] for n in names] for r in records])
    else:
        probs = theirs  # the logit is the value
        got = torch.tensor([[r["value"]] for r in records])
    # a softmax or sigmoid moves by no more than its logits do (and rounds once or twice more)
    assert (got - probs).abs().max().item() <= bound + rounding_bound(torch.float32, 3, 2)


def test_evaluate_scores_an_hf_classifier(tmp_path, capsys, task_tokenizer):
    folder, hf = hf_folder(
        tmp_path, task_tokenizer, "ElectraForSequenceClassification", seed=3, id2label=SENTIMENT
    )
    texts = sentences(20, seed=1)
    gold = [SENTIMENT[str(i % 2)] for i in range(len(texts))]
    dev = write_csv(tmp_path / "dev.csv", ["text", "label"], list(zip(texts, gold, strict=True)))
    code, stdout, err = run_cli(
        capsys, "evaluate", "--model", folder, "--dev", dev, "--out", tmp_path / "ev",
        "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    task, _, tokenizer, _ = load_finetuned_or_hf(folder)
    batch = task.encode(task.read_inputs(dev), tokenizer, 128, training=False).tensors
    pred = [SENTIMENT[str(i)] for i in hf_logits(hf, batch).logits.argmax(-1).tolist()]
    accuracy = 100 * sum(p == g for p, g in zip(pred, gold, strict=True)) / len(gold)
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert results["task"] == "classification" and results["model"] == str(folder)
    assert results["metrics"]["accuracy"] == pytest.approx(accuracy)
    assert results["baseline"] is None  # no training set is known
    assert f"classification dev accuracy: {accuracy:.2f}" in stdout


def test_predict_and_evaluate_run_an_hf_tagger(tmp_path, capsys, task_tokenizer):
    id2label = dict(enumerate(TAGS))
    folder, hf = hf_folder(
        tmp_path, task_tokenizer, "ElectraForTokenClassification", id2label=id2label
    )
    words = [s.split() for s in sentences(10, seed=2)]
    lines = "".join(json.dumps({"tokens": w, "tags": ["O"] * len(w)}) + "\n" for w in words)
    (tmp_path / "dev.jsonl").write_text(lines)
    task, model, tokenizer, _ = load_finetuned_or_hf(folder)
    assert task.name == "tagging" and task.labels == TAGS
    encoded = task.encode(task.read_inputs(tmp_path / "dev.jsonl"), tokenizer, 64, training=False)
    batch = encoded.tensors
    theirs = hf_logits(hf, batch).logits
    with torch.no_grad():
        mine = model.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    within_rounding(mine[real], theirs[real])
    records = predicted(capsys, folder, tmp_path / "dev.jsonl")
    for i, r in enumerate(records):
        firsts = encoded.meta["first_tokens"][i]
        assert r["words"] == words[i]
        assert r["tags"] == [TAGS[t] for t in theirs[i, firsts].argmax(-1).tolist()]
    code, stdout, err = run_cli(
        capsys, "evaluate", "--model", folder, "--dev", tmp_path / "dev.jsonl",
        "--out", tmp_path / "ev", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    rows = [json.loads(x) for x in (tmp_path / "ev" / "predictions.jsonl").read_text().splitlines()]
    assert [r["prediction"] for r in rows] == [r["tags"] for r in records]
    assert "tagging dev f1:" in stdout


def test_predict_runs_an_hf_qa_model(tmp_path, capsys, task_tokenizer, monkeypatch):
    import io

    folder, hf = hf_folder(tmp_path, task_tokenizer, "ElectraForQuestionAnswering")
    task, model, tokenizer, cfg = load_finetuned_or_hf(folder)
    assert task.name == "qa" and task.qa_head == "linear"
    context = " ".join(sentences(1, seed=4, length=(30, 31)))
    question = Question("0", "who went to the store", context, (), False)
    batch = task.encode([question], tokenizer, cfg.max_seq_len, training=False).tensors
    theirs = hf_logits(hf, batch)
    with torch.no_grad():
        mine = model.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    for name in ("start_logits", "end_logits"):
        within_rounding(mine[name], getattr(theirs, name))
    monkeypatch.setattr("sys.stdin", io.StringIO(f"who went to the store\t{context}\n"))
    (record,) = predicted(capsys, folder, "-")
    assert set(record) == {"id", "answer", "start", "score", "no_answer", "null_score"}
    assert record["no_answer"] or record["answer"] in context


# --- what is refused -------------------------------------------------------------------------


def unsupported_folder(root, tokenizer, config=None):
    """A tiny GPT-2 classifier folder (a type electra does not run), its config.json updated
    with `config`."""
    folder = root / "gpt2"
    transformers.GPT2ForSequenceClassification(
        transformers.GPT2Config(
            vocab_size=tokenizer.get_vocab_size(), n_embd=32, n_layer=1, n_head=2, n_positions=64,
            pad_token_id=0,
        )
    ).save_pretrained(folder)  # fmt: skip
    save_tokenizer(tokenizer, folder, lowercase=True)
    if config:
        raw = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**raw, **config}))
    return folder


def commands_on(capsys, tmp_path, folder, *needles):
    """`predict`, `evaluate` and `finetune` on `folder`: each one line naming `needles`, nothing
    written."""
    (tmp_path / "in.txt").write_text("the cat sat\n")
    for split, rows in (("train", [["the cat", "a"], ["a dog", "b"]]), ("dev", [["a cat", "a"]])):
        write_csv(tmp_path / f"{split}.csv", ["text", "label"], rows)
    finetune = ["--task", "classification", "--data", tmp_path, "--out", tmp_path / "o"]
    commands = {
        "predict": [tmp_path / "in.txt", "--out", tmp_path / "p.jsonl"],
        "evaluate": ["--dev", tmp_path / "dev.csv", "--out", tmp_path / "ev"],
        "finetune": finetune,
    }
    for command, args in commands.items():
        code, _, err = run_cli(capsys, command, "--model", folder, *args)
        assert_one_line_error(code, err, *needles)
    assert not {p.name for p in tmp_path.iterdir()} & {"o", "p.jsonl", "ev"}


def test_a_folder_of_custom_code_is_refused(tmp_path, capsys, task_tokenizer):
    custom = {
        "model_type": "my-bert",
        "architectures": ["MyBertForSequenceClassification"],
        "auto_map": {"AutoModelForSequenceClassification": "modeling_mine.MyBert"},
    }
    folder = unsupported_folder(tmp_path, task_tokenizer, custom)
    commands_on(capsys, tmp_path, folder, "custom code", "auto_map", "bert")


def test_folders_that_cannot_run_are_one_line_errors(tmp_path, capsys, task_tokenizer):
    gpt2 = unsupported_folder(tmp_path, task_tokenizer)
    # the supported types are named, transformers' ones (bert, ...) among them
    commands_on(capsys, tmp_path, gpt2, "'gpt2' model, which electra does not run", "bert")
    discriminator, _ = hf_folder(tmp_path, task_tokenizer, "ElectraForPreTraining")
    code, _, err = run_cli(capsys, "predict", "--model", discriminator, tmp_path / "in.txt")
    assert_one_line_error(code, err, "ElectraForPreTraining, not a fine-tuned model")
    tagger, _ = hf_folder(
        tmp_path, task_tokenizer, "ElectraForTokenClassification", id2label={0: "NOUN", 1: "VERB"}
    )
    code, _, err = run_cli(capsys, "predict", "--model", tagger, tmp_path / "in.txt")
    assert_one_line_error(code, err, "config.json", "NOUN, VERB", "not IOB")
    regression, _ = hf_folder(
        tmp_path,
        task_tokenizer,
        "ElectraForSequenceClassification",
        num_labels=2,
        problem_type="regression",
    )
    code, _, err = run_cli(capsys, "predict", "--model", regression, tmp_path / "in.txt")
    assert_one_line_error(code, err, "regression on 2 outputs")
