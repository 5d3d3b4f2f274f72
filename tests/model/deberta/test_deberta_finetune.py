"""Fine-tuning the deberta-v3 family (issue 49): a random-weight `DebertaV2ForMaskedLM` folder with
microsoft's DeBERTa-v3 settings, saved by `transformers`, fine-tunes with our heads
(electra.model.deberta.heads, HF's layout) on every task kind (classification, multilabel,
regression, tagging, linear QA), predicts and evaluates; the fine-tuned folder exports to HF's
`DebertaV2For...` classes with no missing or unexpected weights and every DeBERTa-v3 setting stated
in its config, whose logits and `pipeline()` answers are `electra predict`'s; a task folder saved
by `transformers` runs as it is in `predict` and `evaluate` with transformers' logits, rows of more
than 256 tokens (distances in the log buckets) included, and a config.json key left out is read as
`transformers` reads it; and the recipe's layer-wise LR, weight decay and --dropout reach every
weight and dropout of the heads."""

from __future__ import annotations

import json

import pytest
import torch

from electra.finetuning.loading import load_finetuned_or_hf
from electra.finetuning.loop import layerwise_groups
from electra.finetuning.run import with_dropout
from electra.folders.finetuned import load_finetuned
from electra.model.deberta.heads import (
    DebertaV2ForQuestionAnswering,
    DebertaV2ForSequenceClassification,
    DebertaV2ForTokenClassification,
)
from electra.model.deberta.hf import deberta_config_from_hf
from electra.tasks.finetune_config import FinetuneConfig
from electra.tasks.qa import Question

from ...conftest import CONTEXT, assert_one_line_error, finetune_cli, run_cli, sentence, write_csv
from ...numerics import encoder_depth, largest, rounding_bound
from ..hf import test_hf_finetune
from ..hf.test_hf_finetune import (
    AUTO,
    FLAGS,
    HEADS,
    KINDS,
    RECIPES,
    SHORT_CONTEXT,
    TAGS,
    dev_file,
    dev_texts,
    predicted,
    read_jsonl,
    same_records,
    saved,
    sentences,
    write_jsonl,
    write_qa,
)

pytestmark = pytest.mark.numeric

own_data = test_hf_finetune.own_data  # the tiny files of each task kind (a fixture)

transformers = pytest.importorskip(
    "transformers", reason="transformers (the hf extra) not installed"
)

LAYERS, INTERMEDIATE = 2, 64
# DeBERTa-v3 as microsoft ships it (deberta-v3-base's config.json), written out here so that a
# default of ours or of `transformers` that differs shows.
DEBERTA_V3 = {
    "relative_attention": True,
    "pos_att_type": ["p2c", "c2p"],
    "position_buckets": 256,
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "position_biased_input": False,
    "max_relative_positions": -1,
    "type_vocab_size": 0,
}
# The keys `transformers` reads with defaults that are not DeBERTa-v3's: every export states them.
STATED = ("relative_attention", "position_buckets", "share_att_key", "norm_rel_ebd")
STATED += ("pos_att_type", "max_relative_positions", "position_biased_input")


def tiny_config(vocab: int, **settings):
    sizes = {"hidden_size": 32, "num_hidden_layers": LAYERS, "num_attention_heads": 2}
    sizes |= {"intermediate_size": INTERMEDIATE, "max_position_embeddings": 512}
    return transformers.DebertaV2Config(
        vocab_size=vocab, pad_token_id=0, **sizes, **(DEBERTA_V3 | settings)
    )


# Our model and transformers' compute the same terms in other orders (SDPA with the position terms
# as a bias against its eager softmax, products against the reachable rows only), so by the
# rounding of a tiny encoder with a head: 2 layers (disentangled attention 3 more reductions each:
# the c2p and p2c products and their sum), the embeddings' LayerNorm, the pooler and two products,
# a softmax or sigmoid; the longest reduction the intermediate size 64 or a row's keys.
def head_bound(scale: float, keys: int = 32) -> float:
    depth = encoder_depth(LAYERS, extra=6) + 3 * LAYERS
    return rounding_bound(torch.float32, max(INTERMEDIATE, keys), depth, max(scale, 1.0))


def assert_logits_agree(mine, theirs, keys: int = 32) -> float:
    """Returns the bound kept, which probabilities and values taken from the logits keep too."""
    assert mine.shape == theirs.shape
    bound = head_bound(largest(theirs), keys)
    assert (mine - theirs).abs().max().item() <= bound, (mine - theirs).abs().max().item()
    return bound


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory, task_tokenizer):
    """A random `DebertaV2ForMaskedLM` folder saved by `transformers`."""
    torch.manual_seed(0)
    model = transformers.DebertaV2ForMaskedLM(tiny_config(task_tokenizer.get_vocab_size()))
    return saved(model, tmp_path_factory.mktemp("deberta_base") / "mlm", task_tokenizer)


# --- fine-tuning, export, pipelines -------------------------------------------------------------


def exported(capsys, kind, model, out):
    """`electra export` of a fine-tuned folder: HF's own class, loaded by its Auto class with
    every weight in place, its config stating DeBERTa-v3's settings."""
    code, _, err = run_cli(capsys, "export", "--model", model, "--out", out)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "deberta-v2"
    assert config["architectures"] == [f"DebertaV2For{AUTO[kind]}"]
    assert {k: config[k] for k in STATED} == {k: DEBERTA_V3[k] for k in STATED}
    auto = getattr(transformers, f"AutoModelFor{AUTO[kind]}")
    hf, info = auto.from_pretrained(out, output_loading_info=True, local_files_only=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert type(hf).__name__ == config["architectures"][0]
    assert "no `token_type_ids`" in (out / "README.md").read_text()
    return hf.eval(), config


def export_logits(hf, model_dir, *text):
    """The export's outputs and the fine-tuned model's on one padded batch of the export
    tokenizer's encoding of `text` (texts, or questions and contexts)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf.name_or_path, local_files_only=True)
    batch = tokenizer(*text, padding=True, return_tensors="pt")
    assert "token_type_ids" not in batch  # DeBERTa-v3 has no segments
    _, ours, _, _ = load_finetuned(model_dir)
    with torch.no_grad():
        theirs = hf(**batch)
        mine = ours.eval()(batch["input_ids"], None, batch["attention_mask"])
    return mine, theirs, batch["attention_mask"].bool()


@pytest.mark.parametrize("kind", KINDS)
def test_finetune_predict_evaluate_export_and_pipeline(
    kind, base_folder, own_data, tmp_path, capsys
):
    model = tmp_path / "ft"
    flags = (*FLAGS, *RECIPES.get(kind, []))
    code, _, err = finetune_cli(capsys, base_folder, kind, own_data / kind, model, *flags)
    assert code == 0, err
    results = json.loads((model / "results.json").read_text())
    assert results["task"] == kind and results["config"]["layerwise_lr_decay"] == 0.8
    assert all(0 < loss < 100 for loss in results["per_seed"][0]["train_loss"])
    _, ours, _, _ = load_finetuned(model)
    assert ours.config.arch == "deberta-v3" and type(ours).__module__.endswith("deberta.heads")
    # evaluate scores the dev file as fine-tuning did
    code, _, err = run_cli(
        capsys, "evaluate", "--model", model, "--data", own_data / kind, "--device", "cpu",
        "--out", tmp_path / "ev",
    )  # fmt: skip
    assert code == 0, err
    scored = json.loads((tmp_path / "ev" / "results.json").read_text())["metrics"]
    assert scored == pytest.approx(results["metrics"], abs=1e-6)
    hf, config = exported(capsys, kind, model, tmp_path / "hf")
    CHECKS[kind](model, hf, config, own_data, tmp_path / "hf", capsys)


def check_classifier(model, hf, config, own_data, export, capsys, kind):
    texts_ = dev_texts(own_data, kind)
    mine, theirs, _ = export_logits(hf, model, texts_)
    task, _, _, _ = load_finetuned(model)
    # a regression's export gives the value itself as its logit
    scale = float(task.value_scale) if kind == "regression" else 1.0
    bound = assert_logits_agree(mine * scale, theirs.logits)
    dev = dev_file(own_data, kind)
    records = predicted(capsys, model, dev)
    pipe = transformers.pipeline("text-classification", model=str(export), device=-1)
    if kind == "classification":
        assert config["problem_type"] == "single_label_classification"
        assert config["id2label"] == {"0": "neg", "1": "pos"}
        for r, p in zip(records, pipe(texts_, truncation=True), strict=True):
            assert p["label"] == r["label"] and p["score"] == pytest.approx(r["score"], abs=bound)
    elif kind == "multilabel":
        assert config["problem_type"] == "multi_label_classification"
        answers = pipe(texts_, truncation=True, top_k=None)
        for r, p in zip(records, answers, strict=True):
            assert {a["label"]: pytest.approx(a["score"], abs=bound) for a in p} == r["scores"]
    else:
        assert config["problem_type"] == "regression" and config["num_labels"] == 1
        bound = head_bound(max(abs(r["value"]) for r in records))  # the labels' scale
        for r, p in zip(records, pipe(texts_, truncation=True), strict=True):
            assert p["score"] == pytest.approx(r["value"], abs=bound)
    same_records(records, predicted(capsys, export, dev), bound)


def check_tagger(model, hf, config, own_data, export, capsys):
    task, _, _, _ = load_finetuned(model)
    assert list(config["id2label"].values()) == list(task.labels) and "problem_type" not in config
    dev = dev_file(own_data, "tagging")
    words = [r["tokens"] for r in read_jsonl(dev)]
    sentences_ = [" ".join(w) for w in words]
    mine, theirs, real = export_logits(hf, model, sentences_)
    assert_logits_agree(mine[real], theirs.logits[real])
    records = predicted(capsys, model, dev)
    # Each word's tag is its first token's: the pipeline's token at the word's first character.
    pipe = transformers.pipeline(
        "token-classification", model=str(export), aggregation_strategy="none", ignore_labels=[],
        device=-1,
    )  # fmt: skip
    for text, ws, r in zip(sentences_, words, records, strict=True):
        starts = [sum(len(w) + 1 for w in ws[:i]) for i in range(len(ws))]
        by_start = {}
        for token in pipe(text):
            by_start.setdefault(token["start"], token["entity"])
        assert r["words"] == ws and [by_start[s] for s in starts] == r["tags"], text
    same_records(records, predicted(capsys, export, dev), 0.0)


def check_qa(model, hf, config, own_data, export, capsys):
    questions = ["where was the car ?", "who sat on the mat ?"]
    mine, theirs, real = export_logits(hf, model, questions, [SHORT_CONTEXT] * 2)
    for name in ("start_logits", "end_logits"):
        assert_logits_agree(mine[name][real], getattr(theirs, name)[real])
    short = own_data / "qa" / "short.json"
    records = predicted(capsys, model, short)
    assert {r["id"] for r in records} == {"q1", "q2", "q3", "q4"}
    assert all(r["no_answer"] or r["answer"] in SHORT_CONTEXT for r in records)
    # one window each in both: the same answers and scores
    bound = head_bound(max(abs(r["null_score"]) for r in records))
    same_records(records, predicted(capsys, export, short), bound)


CHECKS = {
    "classification": lambda *a: check_classifier(*a, "classification"),
    "multilabel": lambda *a: check_classifier(*a, "multilabel"),
    "regression": lambda *a: check_classifier(*a, "regression"),
    "tagging": check_tagger,
    "qa": check_qa,
}


def test_rows_past_the_exact_reach_fine_tune_and_export(base_folder, tmp_path, capsys):
    """Rows of 300 tokens: distances past 128 fall in the log buckets, in training, `predict` and
    the export's logits alike."""
    data = tmp_path / "long"
    for split, n, offset in (("train", 8, 0), ("dev", 4, 40)):
        rows = [[sentence(i + offset, 290 + i), ("neg", "pos")[i % 2]] for i in range(n)]
        write_csv(data / f"{split}.csv", ["text", "label"], rows)
    model = tmp_path / "ft"
    flags = [*FLAGS[: FLAGS.index("--max-seq-len")], "--max-seq-len", "300"]
    flags += FLAGS[FLAGS.index("--max-seq-len") + 2 :]
    code, _, err = finetune_cli(capsys, base_folder, "classification", data, model, *flags)
    assert code == 0, err
    hf, _ = exported(capsys, "classification", model, tmp_path / "hf")
    texts_ = [sentence(i + 40, 290 + i) for i in range(4)]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    batch = tokenizer(texts_, padding=True, truncation=True, return_tensors="pt")
    assert batch["input_ids"].shape[1] > 256
    _, ours, _, _ = load_finetuned(model)
    with torch.no_grad():
        theirs = hf(**batch).logits
        mine = ours.eval()(batch["input_ids"], None, batch["attention_mask"])
    assert_logits_agree(mine, theirs, keys=300)


# --- the heads: the recipe's layer-wise LR, weight decay, dropout ---------------------------------


def heads(cfg):
    return (
        DebertaV2ForSequenceClassification(cfg, 3),
        DebertaV2ForTokenClassification(cfg, 3),
        DebertaV2ForQuestionAnswering(cfg),
    )


def our_config(task_tokenizer, **settings):
    raw = tiny_config(task_tokenizer.get_vocab_size(), **settings).to_dict()
    return deberta_config_from_hf(raw, "config.json")


def test_the_recipe_gives_every_weight_of_every_head_its_depth(task_tokenizer):
    """Layer-wise LR decay over HF's names (the embeddings and the relative table with its norm at
    depth 0, the layers, the head and its pooler at the top) and no decay on any norm or bias."""
    recipe = FinetuneConfig(layerwise_lr_decay=0.5, weight_decay=0.01)
    for head in heads(our_config(task_tokenizer)):
        groups = layerwise_groups(head, recipe)
        scale = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
        decay = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
        named = dict(head.named_parameters())
        assert len(scale) == len(named)
        for name, p in named.items():
            want = 1.0  # the head
            if name.startswith("deberta."):
                layer = [int(s) for s in name.split(".") if s.isdigit()]
                want = 0.5 ** (LAYERS + 1 - (layer[0] + 1 if layer else 0))
            assert scale[id(p)] == want, name
            norm = "LayerNorm" in name
            assert decay[id(p)] == (0.0 if norm or name.endswith("bias") else 0.01), name


def test_the_dropout_flag_sets_every_head_dropout(task_tokenizer):
    """--dropout (the family's dropout fields) reaches every dropout of the encoder and the
    heads' own (HF's `cls_dropout` unset: the hidden rate); the context pooler keeps
    `pooler_dropout`, 0 as the hub's models ship it."""
    cfg = with_dropout(our_config(task_tokenizer), 0.3)
    for head in heads(cfg):
        rates = {
            name: m.p
            for name, m in head.named_modules()
            if isinstance(m, torch.nn.Dropout) and name != "pooler.dropout"
        }
        attention = {m.dropout_p for m in head.modules() if hasattr(m, "dropout_p")}
        assert rates and set(rates.values()) == {0.3} and attention == {0.3}, rates
        if isinstance(head, DebertaV2ForSequenceClassification):
            assert head.pooler.dropout.p == 0.0 and "dropout" in rates
        assert head.config == cfg  # what the folder saves: the encoder's config, unchanged


def test_the_classifier_takes_unpacked_rows_only(task_tokenizer):
    head = DebertaV2ForSequenceClassification(our_config(task_tokenizer), 2)
    ids = torch.tensor([[2, 5, 6, 3]])
    with pytest.raises(ValueError, match="unpacked rows"):
        head(ids, None, torch.ones_like(ids), position_ids=torch.arange(4)[None])


# --- task folders saved by transformers run as they are -----------------------------------------


def hf_task_folder(root, tokenizer, kind, **settings):
    """A random task model saved by `transformers` with its labels, every weight moved off its
    initial value so that a misplaced one (the pooler, a bias) shows."""
    head, labels = HEADS[kind]
    torch.manual_seed(1)
    config = tiny_config(tokenizer.get_vocab_size(), **labels, **settings)
    model = getattr(transformers, f"AutoModelFor{head}").from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return saved(model, root / f"deberta-{kind}", tokenizer), model.eval()


def hf_logits(hf, batch):
    with torch.no_grad():
        return hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])


# The pooler's other activation, which our head must read from the file.
FOLDERS = [(k, {}) for k in HEADS] + [("regression", {"pooler_hidden_act": "relu"})]


@pytest.mark.parametrize("kind,settings", FOLDERS)
def test_a_transformers_task_folder_runs_as_it_is(kind, settings, tmp_path, capsys, task_tokenizer):
    folder, hf = hf_task_folder(tmp_path, task_tokenizer, kind, **settings)
    task, model, tokenizer, cfg = load_finetuned_or_hf(folder)
    assert task.name == kind and type(model).__name__ == type(hf).__name__
    assert model.config.arch == "deberta-v3" and cfg.max_seq_len == 512
    assert set(model.state_dict()) == set(hf.state_dict())
    model.eval()
    if kind == "qa":
        check_task_folder_qa(folder, hf, task, model, tokenizer, capsys)
    elif kind == "tagging":
        check_task_folder_tagger(folder, hf, task, model, tokenizer, tmp_path, capsys)
    else:
        check_task_folder_classifier(folder, hf, task, model, tokenizer, kind, tmp_path, capsys)


def check_task_folder_classifier(folder, hf, task, model, tokenizer, kind, tmp, capsys):
    texts_ = sentences(12)
    path = write_csv(tmp / "in.csv", ["text"], [[t] for t in texts_])
    batch = task.encode(task.read_inputs(path), tokenizer, 32, training=False).tensors
    assert batch["attention_mask"].sum(1).unique().numel() > 3  # padding that must change nothing
    theirs = hf_logits(hf, batch).logits
    with torch.no_grad():
        mine = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    bound = assert_logits_agree(mine, theirs)
    records = predicted(capsys, folder, path, "--all-scores")
    if kind == "classification":
        names = ("neg", "pos")
        assert [r["label"] for r in records] == [names[i] for i in theirs.argmax(-1).tolist()]
        got = torch.tensor([[r["scores"][n] for n in names] for r in records])
        want = theirs.softmax(-1)
    elif kind == "multilabel":
        names = ("a", "b", "c")
        want = theirs.sigmoid()
        got = torch.tensor([[r["scores"][n] for n in names] for r in records])
    else:
        got, want = torch.tensor([[r["value"]] for r in records]), theirs  # the logit is the value
    assert (got - want).abs().max().item() <= bound + rounding_bound(torch.float32, 3, 2)
    if kind == "classification":
        gold = [("neg", "pos")[i % 2] for i in range(len(texts_))]
        dev = write_csv(tmp / "dev.csv", ["text", "label"], list(zip(texts_, gold, strict=True)))
        code, _, err = run_cli(
            capsys, "evaluate", "--model", folder, "--dev", dev, "--out", tmp / "ev",
            "--device", "cpu",
        )  # fmt: skip
        assert code == 0, err
        pred = [r["label"] for r in records]
        accuracy = 100 * sum(p == g for p, g in zip(pred, gold, strict=True)) / len(gold)
        results = json.loads((tmp / "ev" / "results.json").read_text())
        assert results["metrics"]["accuracy"] == pytest.approx(accuracy)


def check_task_folder_tagger(folder, hf, task, model, tokenizer, tmp, capsys):
    assert task.labels == TAGS
    words = [s.split() for s in sentences(10, seed=2)]
    dev = write_jsonl(tmp / "dev.jsonl", [{"tokens": w, "tags": ["O"] * len(w)} for w in words])
    encoded = task.encode(task.read_inputs(dev), tokenizer, 32, training=False)
    batch = encoded.tensors
    theirs = hf_logits(hf, batch).logits
    with torch.no_grad():
        mine = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    assert_logits_agree(mine[real], theirs[real])
    records = predicted(capsys, folder, dev)
    for i, r in enumerate(records):
        firsts = encoded.meta["first_tokens"][i]
        assert r["words"] == words[i]
        assert r["tags"] == [TAGS[t] for t in theirs[i, firsts].argmax(-1).tolist()]
    code, _, err = run_cli(
        capsys, "evaluate", "--model", folder, "--dev", dev, "--out", tmp / "ev", "--device", "cpu"
    )
    assert code == 0, err
    assert [r["prediction"] for r in read_jsonl(tmp / "ev" / "predictions.jsonl")] == [
        r["tags"] for r in records
    ]


def check_task_folder_qa(folder, hf, task, model, tokenizer, capsys):
    assert task.qa_head == "linear"
    question = Question("0", "who went to the store", CONTEXT, (), False)
    batch = task.encode([question], tokenizer, 64, training=False).tensors
    theirs = hf_logits(hf, batch)
    with torch.no_grad():
        mine = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    # At padding the outputs are nobody's: HF's padded queries see no key, ours every real one.
    real = batch["attention_mask"].bool()
    for name in ("start_logits", "end_logits"):
        assert_logits_agree(mine[name][real], getattr(theirs, name)[real], keys=64)
    records = predicted(capsys, folder, write_qa(folder.parent / "q.json"))
    assert [r["id"] for r in records] == ["q1"]
    assert records[0]["no_answer"] or records[0]["answer"] in CONTEXT


def test_a_task_folder_runs_rows_past_the_exact_reach(tmp_path, task_tokenizer):
    """Rows of up to 400 tokens, padded: distances in the log buckets give transformers' logits."""
    folder, hf = hf_task_folder(tmp_path, task_tokenizer, "tagging")
    task, model, tokenizer, _ = load_finetuned_or_hf(folder)
    words = [s.split() for s in sentences(3, seed=3, length=(250, 390))]
    dev = write_jsonl(
        tmp_path / "dev.jsonl", [{"tokens": w, "tags": ["O"] * len(w)} for w in words]
    )
    batch = task.encode(task.read_inputs(dev), tokenizer, 400, training=False).tensors
    assert batch["input_ids"].shape[1] > 256
    theirs = hf_logits(hf, batch).logits
    with torch.no_grad():
        mine = model.eval()(batch["input_ids"], None, batch["attention_mask"])
    real = batch["attention_mask"].bool()
    assert_logits_agree(mine[real], theirs[real], keys=400)


def test_a_key_left_out_is_read_as_transformers_reads_it(tmp_path, capsys, task_tokenizer):
    """A config.json without `norm_rel_ebd` is `transformers`' "none" (no norm on the relative
    table), not deberta-v3-base's; without `position_buckets`, `transformers` buckets nothing,
    which the family does not compute: refused in one line."""
    folder, _ = hf_task_folder(tmp_path, task_tokenizer, "classification", norm_rel_ebd="none")
    config = json.loads((folder / "config.json").read_text())
    del config["norm_rel_ebd"]
    (folder / "config.json").write_text(json.dumps(config))
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    task, model, tokenizer, _ = load_finetuned_or_hf(folder)
    assert model.config.norm_rel_ebd == "none"
    path = write_csv(tmp_path / "in.csv", ["text"], [[t] for t in sentences(6)])
    batch = task.encode(task.read_inputs(path), tokenizer, 32, training=False).tensors
    with torch.no_grad():
        mine = model.eval()(batch["input_ids"], None, batch["attention_mask"])
    assert_logits_agree(mine, hf_logits(hf, batch).logits)
    del config["position_buckets"]
    (folder / "config.json").write_text(json.dumps(config))
    code, _, err = run_cli(capsys, "predict", "--model", folder, path)
    assert_one_line_error(code, err, "config.json", "position_buckets", "256")
