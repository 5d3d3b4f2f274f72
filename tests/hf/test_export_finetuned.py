"""`electra export` of fine-tuned models: folders that transformers' AutoModelFor* classes load
with no missing or unexpected weights, the labels and problem type in config.json, logits equal to
ours in fp32, pipelines giving `electra predict`'s answers, a model card; the exact rewrite of the
one-layer classifier; the official QA head refused in one line."""

from __future__ import annotations

import json
import math

import pytest
import torch

from electra.errors import ElectraError
from electra.folders.finetuned import load_finetuned
from electra.model.electra import head_rewrite
from electra.model.electra.head_rewrite import exact_classification_head

from ..conftest import CONTEXT, assert_one_line_error, run_cli, tiny_model_config
from ..finetuned_models import best_seed, data_dirs, finetuned
from ..numerics import encoder_depth, largest, rounding_bound

transformers = pytest.importorskip(
    "transformers", reason="transformers (the hf extra) not installed"
)

AUTO = {
    "ElectraForSequenceClassification": "AutoModelForSequenceClassification",
    "ElectraForTokenClassification": "AutoModelForTokenClassification",
    "ElectraForQuestionAnswering": "AutoModelForQuestionAnswering",
}


def exported(capsys, model, out):
    code, stdout, err = run_cli(capsys, "export", "--model", model, "--out", out)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    auto = getattr(transformers, AUTO[config["architectures"][0]])
    hf, info = auto.from_pretrained(out, output_loading_info=True, local_files_only=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert AUTO[config["architectures"][0]] in stdout
    return hf.eval(), config


def export_bound(logits: torch.Tensor, rewritten: bool = True) -> float:
    """How far the export's outputs may lie from ours, at `logits` of this size: the rounding
    of the tiny encoder (2 layers, the embeddings' LayerNorm and projection, HF's head's two
    products; the longest reduction the intermediate size 64, above rows of at most 64 tokens)
    and, for a rewritten classifier, the rewrite's own allowance, which export checks on the
    worst-case inputs before writing. Probabilities and values taken from the logits move no
    more than the logits do."""
    cfg = tiny_model_config()
    size = largest(logits)
    bound = rounding_bound(
        torch.float32, cfg.intermediate_size, encoder_depth(cfg.num_hidden_layers, 5), size
    )
    if rewritten:
        bound += head_rewrite.REWRITE_TOLERANCE * max(1.0, size / 50)
    return bound


def predicted(capsys, model, *inputs):
    code, stdout, err = run_cli(capsys, "predict", "--model", model, *inputs)
    assert code == 0, err
    return [json.loads(line) for line in stdout.splitlines()]


def hf_inputs(out, texts, pairs=None):
    tokenizer = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    return tokenizer(
        texts, pairs, padding=True, truncation=True, max_length=48, return_tensors="pt"
    )


def dev_texts(data, column=0, n=40):
    rows = [line.split("\t") for line in (data / "dev.tsv").read_text().splitlines()[1 : n + 1]]
    return [r[column] for r in rows]


@pytest.mark.numeric
def test_classifier_exports_with_equal_logits_and_pipeline_answers(
    tmp_path_factory, tmp_path, capsys
):
    model, data = finetuned(tmp_path_factory, "sst2"), data_dirs(tmp_path_factory)["sst2"]
    hf, config = exported(capsys, model, tmp_path / "hf")
    assert config["id2label"] == {"0": "0", "1": "1"} and config["label2id"] == {"0": 0, "1": 1}
    assert config["problem_type"] == "single_label_classification"
    texts = dev_texts(data)
    batch = hf_inputs(tmp_path / "hf", texts)
    _, ours, _, _ = load_finetuned(model)
    with torch.no_grad():
        theirs = hf(**batch).logits
        mine = ours.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    bound = export_bound(mine)
    assert (theirs - mine).abs().max().item() <= bound
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    records = predicted(capsys, model, data / "dev.tsv")[: len(texts)]
    for r, p in zip(records, pipe(texts, truncation=True), strict=True):
        assert p["label"] == r["label"] and p["score"] == pytest.approx(r["score"], abs=bound)
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "sst2" in card and "accuracy" in card and "`0`, `1`" in card
    assert "pipeline_tag: text-classification" in card
    assert "GELU(a) - GELU(-a) = a" in card  # the head that keeps training (docs/huggingface.md)
    results = json.loads((model / "results.json").read_text())
    assert f"{results['per_seed'][0]['metrics']['accuracy']:.2f}" in card


@pytest.mark.numeric
def test_regression_exports_its_value_as_the_logit(tmp_path_factory, tmp_path, capsys):
    model, data = finetuned(tmp_path_factory, "stsb"), data_dirs(tmp_path_factory)["stsb"]
    hf, config = exported(capsys, model, tmp_path / "hf")
    assert config["problem_type"] == "regression" and config["num_labels"] == 1
    a, b = dev_texts(data, 7), dev_texts(data, 8)
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    answers = pipe(
        [{"text": x, "text_pair": y} for x, y in zip(a, b, strict=True)], truncation=True
    )
    records = predicted(capsys, model, data / "dev.tsv")[: len(a)]
    with torch.no_grad():
        values = hf(**hf_inputs(tmp_path / "hf", a, b)).logits  # STS-B's 0-5 scale, no sigmoid
    for r, p in zip(records, answers, strict=True):
        assert p["score"] == pytest.approx(r["value"], abs=export_bound(values))


@pytest.mark.numeric
def test_tagger_exports_and_grouped_entities_match(tmp_path_factory, tmp_path, capsys, monkeypatch):
    import io

    model, data = finetuned(tmp_path_factory, "conll"), data_dirs(tmp_path_factory)["conll"]
    hf, config = exported(capsys, model, tmp_path / "hf")
    task, ours, _, _ = load_finetuned(model)
    assert list(config["id2label"].values()) == list(task.labels)  # CoNLL's nine tags
    assert (
        config["label2id"]["B-PER"] == task.labels.index("B-PER") and "problem_type" not in config
    )
    # Words without punctuation: HF's word grouping splits "Paris," where a whitespace split
    # does not, so the two agree on words like these (docs/huggingface.md).
    blocks = (data / "valid.txt").read_text().split("\n\n")[1:40]
    words = [[line.split(" ")[0] for line in b.splitlines()] for b in blocks if b.strip()]
    sentences = [" ".join(w for w in ws if w.isalpha()) for ws in words]
    sentences = [x for x in sentences if x]
    batch = hf_inputs(tmp_path / "hf", sentences)
    with torch.no_grad():
        theirs = hf(**batch).logits
        mine = ours.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    # a linear classifier, exported as it is
    assert (theirs - mine)[real].abs().max().item() <= export_bound(mine[real], rewritten=False)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(sentences) + "\n"))
    records = predicted(capsys, model, "-")
    pipe = transformers.pipeline(
        "token-classification",
        model=str(tmp_path / "hf"),
        aggregation_strategy="first",
        device=-1,
    )
    found = 0
    for sentence, r in zip(sentences, records, strict=True):
        groups = [(g["entity_group"], g["start"], g["end"]) for g in pipe(sentence)]
        assert groups == [(e["entity"], e["start"], e["end"]) for e in r["entities"]], sentence
        found += len(groups)
    assert found, "no entity in the sentences compared"


@pytest.mark.numeric
def test_linear_qa_head_exports_with_equal_logits(tmp_path_factory, tmp_path, capsys):
    model = finetuned(tmp_path_factory, "qa")
    hf, config = exported(capsys, model, tmp_path / "hf")
    assert config["architectures"] == ["ElectraForQuestionAnswering"]
    batch = hf_inputs(tmp_path / "hf", ["where was the car ?"], [CONTEXT[:60]])
    _, ours, _, _ = load_finetuned(model)
    with torch.no_grad():
        theirs = hf(**batch)
        mine = ours.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    for name in ("start_logits", "end_logits"):  # a linear layer, exported as it is
        bound = export_bound(mine[name], rewritten=False)
        assert (getattr(theirs, name) - mine[name]).abs().max().item() <= bound
    if "question-answering" not in transformers.pipelines.SUPPORTED_TASKS:
        return  # transformers 5 has no question-answering pipeline
    pipe = transformers.pipeline("question-answering", model=str(tmp_path / "hf"), device=-1)
    record = predicted(capsys, model, data_dirs(tmp_path_factory)["qa"] / "dev.json")[0]
    answer = pipe(question="where was the car ?", context=CONTEXT, max_answer_len=30)
    assert (answer["answer"], answer["start"]) == (record["answer"], record["start"])


def test_official_qa_head_is_refused_in_one_line(tmp_path_factory, tmp_path, capsys):
    model = finetuned(tmp_path_factory, "squad2")
    code, _, err = run_cli(capsys, "export", "--model", model, "--out", tmp_path / "hf")
    assert_one_line_error(code, err, "XLNet-style", "--qa-head linear")
    assert not (tmp_path / "hf").exists()


def test_model_card_names_seed_and_recipe(tmp_path_factory, tmp_path, capsys):
    model = finetuned(tmp_path_factory, "sst2")
    seed = best_seed(model)
    exported(capsys, seed, tmp_path / "hf")  # a seed folder exports too
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "(this model)" in card and '"lr": 0.003' in card and "Base model" in card
    assert "train: `" in card and "sst2/train.tsv`" in card


def layer_norm_outputs(gamma, beta, n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, gamma.numel(), generator=g) * 3 + torch.randn(n, 1, generator=g)
    return torch.nn.functional.layer_norm(x, (gamma.numel(),), gamma, beta)


@pytest.mark.parametrize(
    "hidden,labels", [(32, 2), (256, 3), (768, 2), (1024, 9), (32, 1), (32, 16), (16, 9)]
)
@pytest.mark.numeric
def test_the_classifier_rewrite_is_exact_in_fp32(hidden, labels):
    """HF's dense + GELU + out_proj gives our logits to fp32 rounding for any LayerNorm output: in
    GELU pairs, GELU(a) - GELU(-a) = a; past H/2 labels (9 on 16 units) in offset units, where
    GELU is the identity."""
    g = torch.Generator().manual_seed(hidden + labels)
    gamma = 1 + 0.5 * torch.randn(hidden, generator=g)
    beta = 0.2 * torch.randn(hidden, generator=g)
    weight = torch.randn(labels, hidden, generator=g) * 3 * math.sqrt(2 / (hidden + labels))
    bias = torch.randn(labels, generator=g)
    head = exact_classification_head(weight, bias, gamma, beta, "m")
    x = layer_norm_outputs(gamma, beta)
    hidden_units = x @ head["dense.weight"].T + head["dense.bias"]
    if head_rewrite.pairs_fit(labels, hidden):
        pairs = min(head_rewrite.MAX_PAIRS, hidden // (2 * labels))
        assert ((head["out_proj.weight"] != 0).sum(1) == 2 * pairs).all()  # each label's own
    else:
        z = torch.linspace(6, 6 + 2 * head_rewrite.HEAD_SPREAD, 100_001)
        assert torch.equal(torch.nn.functional.gelu(z), z)  # exact erf GELU, as HF's "gelu"
        assert hidden_units[:, :labels].min() >= 6 - 1e-3
    units = torch.nn.functional.gelu(hidden_units)
    theirs = units @ head["out_proj.weight"].T + head["out_proj.bias"]
    # out_proj's terms (a unit times its weight) cancel in pairs or against an offset, so their
    # size, not the logits', sets the rounding: of the dense layer, GELU and out_proj over
    # `hidden` terms, beside our one product
    terms = largest(units) * largest(head["out_proj.weight"])
    bound = rounding_bound(torch.float32, hidden, 4, max(terms, largest(theirs)))
    assert (theirs - (x @ weight.T + bias)).abs().max().item() <= bound


def confident_head(hidden, labels, kind, n=512):
    """LayerNorm outputs of `n` examples from class-conditional clusters, and a linear head
    reading them with logits of spread 2.5 (an eval loss well below chance), with targets drawn
    from its own predictions: a fine-tuned model's [CLS] vectors and classifier, in miniature."""
    g = torch.Generator().manual_seed(hidden + labels)
    means = torch.randn(max(labels, 2), hidden, generator=g)
    classes = torch.randint(len(means), (n,), generator=g)
    gamma = 1 + 0.2 * torch.randn(hidden, generator=g)
    beta = 0.2 * torch.randn(hidden, generator=g)
    noisy = means[classes] + torch.randn(n, hidden, generator=g)
    x = torch.nn.functional.layer_norm(noisy, (hidden,), gamma, beta)
    weight = (means - means.mean(0))[:labels] if kind != "regression" else means[1:] - means[:1]
    weight = weight * 2.5 / (x @ weight.T).std()
    bias = torch.randn(labels, generator=g)
    logits = x @ weight.T + bias
    F = torch.nn.functional
    if kind == "single":
        y = torch.multinomial(logits.softmax(-1), 1, generator=g)[:, 0]
        return x, weight, bias, gamma, beta, lambda z: F.cross_entropy(z, y)
    if kind == "multilabel":
        y = torch.bernoulli(logits.sigmoid(), generator=g)
        return x, weight, bias, gamma, beta, lambda z: F.binary_cross_entropy_with_logits(z, y)
    y = logits[:, 0] + torch.randn(n, generator=g)
    return x, weight, bias, gamma, beta, lambda z: F.mse_loss(z[:, 0], y)


@pytest.mark.parametrize(
    "hidden,labels,kind",
    [(32, 2, "single"), (256, 3, "single"), (768, 2, "single"), (64, 1, "regression")]
    + [(64, 4, "multilabel")],
)
def test_the_rewritten_head_keeps_our_loss_in_train_mode(hidden, labels, kind):
    """HF's head drops out its hidden units too (train mode). With the same dropout on the
    [CLS] vector as ours (the same seed draws the same mask), its loss stays within 5% of our
    head's in train mode and within 20% of its eval loss; offset units (the former rewrite)
    gave 2 to 7 times the eval loss."""
    from transformers.models.electra.modeling_electra import ElectraClassificationHead

    x, weight, bias, gamma, beta, loss = confident_head(hidden, labels, kind)
    config = transformers.ElectraConfig(hidden_size=hidden, num_labels=labels)
    hf = ElectraClassificationHead(config)
    hf.load_state_dict(exact_classification_head(weight, bias, gamma, beta, "m"))
    p = config.hidden_dropout_prob  # HF's classifier_dropout when unset, and ours
    ours, theirs = [], []
    with torch.no_grad():
        eval_loss = loss(hf.eval()(x[:, None])).item()
        hf.train()
        for seed in range(8):
            torch.manual_seed(seed)
            ours.append(loss(torch.nn.functional.dropout(x, p) @ weight.T + bias).item())
            torch.manual_seed(seed)
            theirs.append(loss(hf(x[:, None])).item())
    ours, theirs = sum(ours) / len(ours), sum(theirs) / len(theirs)
    assert eval_loss < {"single": 0.4, "multilabel": 0.5, "regression": 1.5}[kind]
    assert theirs == pytest.approx(ours, rel=0.05)
    assert theirs == pytest.approx(eval_loss, rel=0.2)


@pytest.mark.parametrize("name", ["multilabel", "sst2"])
def test_exported_classifier_keeps_its_loss_in_train_mode(tmp_path_factory, tmp_path, capsys, name):
    """`transformers` continuing to fine-tune the export starts from the fine-tuned loss: in
    train mode (all of HF's dropout on, mean of 8 draws) the dev loss is within 20% of the eval
    loss. The multilabel model has learnt its labels; the SST-2 one is at chance."""
    model, data = finetuned(tmp_path_factory, name), data_dirs(tmp_path_factory)[name]
    hf, config = exported(capsys, model, tmp_path / "hf")
    names = [config["id2label"][str(i)] for i in range(config["num_labels"])]
    if name == "multilabel":
        records = [json.loads(line) for line in (data / "dev.jsonl").read_text().splitlines()]
        texts = [r["text"] for r in records]
        labels = torch.tensor([[float(k in r["label"]) for k in names] for r in records])
    else:
        texts = dev_texts(data, n=120)
        labels = torch.tensor([names.index(y) for y in dev_texts(data, 1, n=120)])
    batch = hf_inputs(tmp_path / "hf", texts)
    with torch.no_grad():
        eval_loss = hf(**batch, labels=labels).loss.item()
        hf.train()
        torch.manual_seed(0)
        train_loss = sum(hf(**batch, labels=labels).loss.item() for _ in range(8)) / 8
    if name == "multilabel":
        assert eval_loss < 0.5  # chance (about 0.68 for these labels' rates) is well above
    assert train_loss == pytest.approx(eval_loss, rel=0.2)


def test_a_rewrite_beyond_the_tolerance_is_refused(monkeypatch):
    monkeypatch.setattr(head_rewrite, "REWRITE_TOLERANCE", 0.0)
    gamma, beta = torch.ones(64), torch.zeros(64)
    weight, bias = torch.randn(2, 64), torch.zeros(2)
    with pytest.raises(ElectraError, match="refused"):
        exact_classification_head(weight, bias, gamma, beta, "m")


@pytest.mark.numeric
def test_multilabel_exports_with_sigmoid_scores(tmp_path_factory, tmp_path, capsys):
    model = finetuned(tmp_path_factory, "multilabel")
    data = data_dirs(tmp_path_factory)["multilabel"]
    hf, config = exported(capsys, model, tmp_path / "hf")
    assert config["problem_type"] == "multi_label_classification"
    assert sorted(config["label2id"]) == ["long", "positive"]
    texts = [json.loads(line)["text"] for line in (data / "dev.jsonl").read_text().splitlines()]
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    answers = pipe(texts[:30], top_k=None, truncation=True)
    records = predicted(capsys, model, data / "dev.jsonl", "--all-scores")[:30]
    with torch.no_grad():
        bound = export_bound(hf(**hf_inputs(tmp_path / "hf", texts[:30])).logits)
    for r, labels in zip(records, answers, strict=True):
        scores = {a["label"]: a["score"] for a in labels}  # sigmoids, as ours
        assert scores == pytest.approx(r["scores"], abs=bound)


@pytest.mark.numeric
def test_own_regression_exports_in_the_targets_units(tmp_path_factory, tmp_path, capsys):
    model = finetuned(tmp_path_factory, "regression")
    data = data_dirs(tmp_path_factory)["regression"]
    hf, config = exported(capsys, model, tmp_path / "hf")
    assert config["problem_type"] == "regression"
    texts = [json.loads(line)["text"] for line in (data / "dev.jsonl").read_text().splitlines()]
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    records = predicted(capsys, model, data / "dev.jsonl")[:30]
    with torch.no_grad():
        bound = export_bound(hf(**hf_inputs(tmp_path / "hf", texts[:30])).logits)
    for r, a in zip(records, pipe(texts[:30], truncation=True), strict=True):
        assert a["score"] == pytest.approx(r["value"], abs=bound)
