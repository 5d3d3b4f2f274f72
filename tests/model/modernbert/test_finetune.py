"""Fine-tuning the modern family (issue 38 item 4): its heads (electra.model.modernbert.heads) are
transformers' ModernBertFor{Sequence,Token}Classification / ForQuestionAnswering, key for key and
output for output (fp32, padded batch, sdpa and eager); `electra finetune` trains each task kind
on a tiny modern model folder (classification, multilabel, regression, tagging, linear QA) and
refuses the official QA head in one line; `electra export` writes folders that transformers'
Auto classes load with no missing or unexpected weights, whose logits and `pipeline()` answers
are `electra predict`'s, and which `electra predict` runs as they are."""

from __future__ import annotations

import json

import pytest
import torch

from electra.finetuning.loop import layerwise_groups
from electra.folders.finetuned import load_finetuned
from electra.folders.model_folder import save_pretrained
from electra.model.modernbert.heads import (
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
)
from electra.model.modernbert.modeling import ModernBertForPreTraining
from electra.tasks.finetune_config import FinetuneConfig
from tests.model.modernbert.test_modeling import (
    LENGTH,
    TINY,
    bigger_weights,
    hf_config,
    padded_batch,
)

from ...conftest import (
    CONTEXT,
    assert_one_line_error,
    finetune_cli,
    qa,
    run_cli,
    sentence,
    squad_file,
    tiny_modern_config,
    write_csv,
)
from ...numerics import assert_same_computation, encoder_depth, rounding_bound

pytestmark = pytest.mark.numeric

transformers = pytest.importorskip("transformers")

# A tiny modern model with a head: 3 layers, the embeddings' and final LayerNorms (4), the head's
# dense layer, LayerNorm and output layer (4) and mean pooling's or a softmax's sum (1); the
# longest reduction the intermediate size (48), above the hidden size (32) and 20 keys (the
# fine-tuned models' rows are shorter still).
HEAD_DEPTH = encoder_depth(TINY.num_hidden_layers, extra=9)
TERMS = TINY.intermediate_size


def head_bound(scale: float) -> float:
    """The rounding allowed between two computations of a tiny modern head's outputs (logits,
    or probabilities and values within their logits' change) of size `scale`."""
    return rounding_bound(torch.float32, TERMS, HEAD_DEPTH, max(scale, 1.0))


OURS = {
    "ModernBertForSequenceClassification": lambda cfg, **kw: ModernBertForSequenceClassification(
        cfg, 3, **kw
    ),
    "ModernBertForTokenClassification": lambda cfg: ModernBertForTokenClassification(cfg, 3),
    "ModernBertForQuestionAnswering": ModernBertForQuestionAnswering,
}
AUTO = {
    "ModernBertForSequenceClassification": "AutoModelForSequenceClassification",
    "ModernBertForTokenClassification": "AutoModelForTokenClassification",
    "ModernBertForQuestionAnswering": "AutoModelForQuestionAnswering",
}


# --- the heads against transformers ------------------------------------------------------------


def hf_head(kind: str, attn: str, **settings):
    config = hf_config(TINY, attn)
    config.num_labels = 2 if kind == "ModernBertForQuestionAnswering" else 3
    for key, value in settings.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    model = getattr(transformers, kind)(config)
    if model.config._attn_implementation != attn:
        pytest.skip(f"transformers ran {model.config._attn_implementation!r}, not {attn!r}")
    bigger_weights(model)
    return model.eval()


@pytest.mark.parametrize("kind", list(OURS))
def test_head_state_dict_keys_are_hf_keys(kind):
    assert set(OURS[kind](TINY).state_dict()) == set(hf_head(kind, "sdpa").state_dict())


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize(
    "kind,pooling",
    [
        ("ModernBertForSequenceClassification", "cls"),
        ("ModernBertForSequenceClassification", "mean"),
        ("ModernBertForTokenClassification", None),
        ("ModernBertForQuestionAnswering", None),
    ],
)
def test_head_outputs_equal_hf_on_a_padded_batch(kind, pooling, attn):
    settings = {"classifier_pooling": pooling} if pooling else {}
    hf = hf_head(kind, attn, **settings)
    ours = OURS[kind](TINY, **({"pooling": pooling} if pooling else {})).eval()
    ours.load_state_dict(hf.state_dict(), strict=True)
    ids, mask = padded_batch()
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask)
        mine = ours(ids, torch.zeros_like(ids), mask)
    if kind == "ModernBertForQuestionAnswering":
        for name in ("start_logits", "end_logits"):
            assert mine[name].shape == (2, LENGTH)
            assert_same_computation(
                mine[name][real], getattr(theirs, name)[real], terms=TERMS, depth=HEAD_DEPTH
            )
    elif kind == "ModernBertForTokenClassification":
        assert mine.shape == (2, LENGTH, 3)
        assert_same_computation(mine[real], theirs.logits[real], terms=TERMS, depth=HEAD_DEPTH)
    else:
        assert mine.shape == (2, 3)
        assert_same_computation(mine, theirs.logits, terms=TERMS, depth=HEAD_DEPTH)


def test_mean_pooling_reads_only_real_tokens():
    torch.manual_seed(0)
    model = ModernBertForSequenceClassification(TINY, 2, pooling="mean").eval()
    ids, mask = padded_batch()
    with torch.no_grad():
        alone = model(ids[1:, :7], None, mask[1:, :7])
        padded = model(ids, None, mask)[1:]
    assert_same_computation(alone, padded, terms=TERMS, depth=HEAD_DEPTH)


def test_layerwise_groups_give_every_modern_weight_its_depth():
    cfg = FinetuneConfig(layerwise_lr_decay=0.5, weight_decay=0.01)
    model = ModernBertForTokenClassification(TINY, 3)
    groups = layerwise_groups(model, cfg)
    scale = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
    decay = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    named = dict(model.named_parameters())
    n = TINY.num_hidden_layers
    assert len(scale) == len(named)
    assert scale[id(named["model.embeddings.tok_embeddings.weight"])] == 0.5 ** (n + 1)
    assert scale[id(named["model.layers.0.attn.Wqkv.weight"])] == 0.5**n
    assert scale[id(named[f"model.layers.{n - 1}.mlp.Wo.weight"])] == 0.5
    assert scale[id(named["model.final_norm.weight"])] == 0.5
    assert scale[id(named["classifier.weight"])] == scale[id(named["head.dense.weight"])] == 1.0
    assert decay[id(named["head.norm.weight"])] == decay[id(named["classifier.bias"])] == 0.0
    assert decay[id(named["model.layers.1.attn_norm.weight"])] == 0.0
    assert decay[id(named["model.layers.1.mlp.Wi.weight"])] == 0.01


@pytest.mark.parametrize(
    "head",
    [
        lambda: ModernBertForSequenceClassification(TINY, 2),
        lambda: ModernBertForTokenClassification(TINY, 3),
        lambda: ModernBertForQuestionAnswering(TINY),
    ],
)
def test_fine_tuning_decays_no_modern_norm(head):
    """Every norm of every head (embeddings, layers, final, head) and every bias is kept out of
    the decay, by pretraining's rule; every other weight is decayed."""
    model = head()
    groups = layerwise_groups(model, FinetuneConfig(layerwise_lr_decay=0.8, weight_decay=0.01))
    decay = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    norms = {
        id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()
    }
    assert len(norms) == 2 * TINY.num_hidden_layers + 2  # attn (not layer 0), mlp, 3 others
    for name, p in model.named_parameters():
        kept = id(p) in norms or name.endswith("bias")
        assert ("norm" in name.split(".")[-2]) == (id(p) in norms), name
        assert decay[id(p)] == (0.0 if kept else 0.01), name


# --- fine-tuning, export, pipelines --------------------------------------------------------------

FLAGS = ["--batch-size", "8", "--no-progress", "--lr", "3e-3", "--max-seq-len", "32"]
FLAGS += ["--device", "cpu", "--precision", "fp32"]
NAMES = ["John", "Mary", "Paris", "France"]
TAGS = {"John": "B-PER", "Mary": "B-PER", "Paris": "B-LOC", "France": "B-LOC"}


@pytest.fixture(scope="module")
def modern_model(tmp_path_factory, task_tokenizer):
    """A tiny random modern discriminator folder, as a modern pretraining run leaves one: windows
    of 8 (4 each side), so local layers matter at fine-tuning's 32 tokens."""
    out = tmp_path_factory.mktemp("modern") / "discriminator"
    cfg = tiny_modern_config(
        vocab_size=task_tokenizer.get_vocab_size(),
        max_position_embeddings=128,
        pad_token_id=task_tokenizer.token_to_id("[PAD]"),
    )
    torch.manual_seed(0)
    save_pretrained(ModernBertForPreTraining(cfg), out, task_tokenizer)
    return out


def texts(n: int, offset: int = 0) -> list[str]:
    return [f"{sentence(i + offset, 3 + i % 5)} {'good' if i % 2 else 'bad'}" for i in range(n)]


def tagged(i: int) -> dict:
    words = sentence(i, 4).split() + [NAMES[i % 4]] + sentence(i + 1, 2).split()
    return {"tokens": words, "tags": [TAGS.get(w, "O") for w in words]}


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def own_data(tmp_path_factory):
    """Tiny files of each task kind: train (32 examples) and dev (12, other sentences)."""
    root = tmp_path_factory.mktemp("modern_data")
    for split, n, offset in (("train", 32, 0), ("dev", 12, 40)):
        rows = texts(n, offset)
        write_csv(
            root / "classification" / f"{split}.csv",
            ["text", "label"],
            [[t, "pos" if t.endswith("good") else "neg"] for t in rows],
        )
        multi = [
            [*(["pos"] if t.endswith("good") else []), *(["long"] if len(t.split()) > 5 else [])]
            for t in rows
        ]
        write_jsonl(
            root / "multilabel" / f"{split}.jsonl",
            [{"text": t, "label": m} for t, m in zip(rows, multi, strict=True)],
        )
        write_jsonl(
            root / "regression" / f"{split}.jsonl",
            [{"text": t, "label": len(t.split())} for t in rows],
        )
        write_jsonl(root / "tagging" / f"{split}.jsonl", [tagged(i + offset) for i in range(n)])
    questions = [
        qa("q1", "where was the car ?", "Paris"),
        qa("q2", "who sat on the mat ?", "Mary"),
        qa("q3", "who went to the store ?", "John"),
        qa("q4", "what is money ?", impossible=True),
    ]
    (root / "qa").mkdir()
    squad_file(root / "qa" / "train.json", questions)
    # dev: train's questions reversed, a word longer each (a training question is refused)
    squad_file(
        root / "qa" / "dev.json",
        [{**q, "question": f"so {q['question']}"} for q in questions[::-1]],
    )
    return root


RECIPES = {
    "classification": ["--epochs", "3"],
    "multilabel": ["--epochs", "3"],
    "regression": ["--epochs", "3"],
    "tagging": ["--epochs", "6"],
    "qa": ["--epochs", "20", "--qa-head", "linear", "--doc-stride", "8"],
}


@pytest.fixture(scope="module")
def finetuned(modern_model, own_data, tmp_path_factory):
    """{task: its finetune --out folder}, trained once per module on first use."""
    runs: dict[str, object] = {}

    def get(task: str, capsys):
        if task not in runs:
            out = tmp_path_factory.mktemp(f"ft_{task}") / "out"
            code, _, err = finetune_cli(
                capsys, modern_model, task, own_data / task, out, *FLAGS, *RECIPES[task]
            )
            assert code == 0, err
            runs[task] = out
        return runs[task]

    return get


def exported(capsys, model, out):
    code, stdout, err = run_cli(capsys, "export", "--model", model, "--out", out)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "modernbert"
    auto = getattr(transformers, AUTO[config["architectures"][0]])
    hf, info = auto.from_pretrained(out, output_loading_info=True, local_files_only=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert "token_type_ids" not in tokenizer("a text", "a pair")
    assert hf.config.layer_types == [TINY.layer_type(i) for i in range(3)]
    return hf.eval(), config


def predicted(capsys, model, *inputs):
    code, stdout, err = run_cli(capsys, "predict", "--model", model, *inputs)
    assert code == 0, err
    return [json.loads(line) for line in stdout.splitlines()]


def dev_texts(own_data, task):
    path = own_data / task / "dev.jsonl"
    return [json.loads(line)["text"] for line in path.read_text().splitlines()]


def same_records(a: list[dict], b: list[dict]) -> None:
    """Records equal but for the float rounding of the head's computation (`head_bound`, at
    the records' largest number: a logit sum, or a probability within its logits' change)."""
    assert len(a) == len(b)
    bound = head_bound(max(_floats(a), default=1.0))
    for x, y in zip(a, b, strict=True):
        assert json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True) or _close(
            x, y, bound
        ), (x, y)


def _floats(x):
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, list):
        return [f for v in x for f in _floats(v)]
    return [abs(x)] if isinstance(x, float) else []


def _close(x, y, bound: float) -> bool:
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k], bound) for k in x)
    if isinstance(x, list):
        return len(x) == len(y) and all(_close(u, v, bound) for u, v in zip(x, y, strict=True))
    if isinstance(x, float):
        return abs(x - y) <= bound
    return x == y


def logits_agree(hf, ours_dir, texts_) -> float:
    """The export's logits are the fine-tuned model's on a padded batch of `texts_`; returns
    the bound allowed there, which the probabilities and values taken from them keep."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf.name_or_path, local_files_only=True)
    batch = tokenizer(texts_, padding=True, return_tensors="pt")
    _, ours, _, _ = load_finetuned(ours_dir)
    with torch.no_grad():
        theirs = hf(**batch).logits
        mine = ours.eval()(batch["input_ids"], None, batch["attention_mask"])
    if mine.dim() == 3:
        real = batch["attention_mask"].bool()
        theirs, mine = theirs[real], mine[real]
    bound = head_bound(mine.abs().max().item())
    assert (theirs - mine).abs().max().item() <= bound
    return bound


def test_classifier_exports_and_the_pipeline_agrees(finetuned, own_data, tmp_path, capsys):
    model = finetuned("classification", capsys)
    hf, config = exported(capsys, model, tmp_path / "hf")
    assert config["architectures"] == ["ModernBertForSequenceClassification"]
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["label2id"]["pos"] == 1
    assert config["problem_type"] == "single_label_classification"
    assert config["classifier_pooling"] == "cls"
    records = predicted(capsys, model, own_data / "classification" / "dev.csv")
    texts_ = [r[0] for r in _csv_rows(own_data / "classification" / "dev.csv")]
    bound = logits_agree(hf, model, texts_)
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    for r, p in zip(records, pipe(texts_, truncation=True), strict=True):
        assert p["label"] == r["label"] and p["score"] == pytest.approx(r["score"], abs=bound)
    same_records(
        records, predicted(capsys, tmp_path / "hf", own_data / "classification" / "dev.csv")
    )
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "ModernBERT-architecture" in card and "pipeline_tag: text-classification" in card
    assert "`neg`, `pos`" in card


def _csv_rows(path):
    import csv

    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f))[1:]


def test_multilabel_exports_and_the_pipeline_agrees(finetuned, own_data, tmp_path, capsys):
    model = finetuned("multilabel", capsys)
    hf, config = exported(capsys, model, tmp_path / "hf")
    assert config["problem_type"] == "multi_label_classification"
    assert set(config["label2id"]) == {"pos", "long"}
    bound = logits_agree(hf, model, dev_texts(own_data, "multilabel"))
    dev = own_data / "multilabel" / "dev.jsonl"
    records = predicted(capsys, model, dev)
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    answers = pipe(dev_texts(own_data, "multilabel"), truncation=True, top_k=None)
    for r, p in zip(records, answers, strict=True):
        assert {a["label"]: pytest.approx(a["score"], abs=bound) for a in p} == r["scores"]
    same_records(records, predicted(capsys, tmp_path / "hf", dev))


def test_regression_exports_its_value_as_the_logit(finetuned, own_data, tmp_path, capsys):
    model = finetuned("regression", capsys)
    hf, config = exported(capsys, model, tmp_path / "hf")
    assert config["problem_type"] == "regression" and config["num_labels"] == 1
    dev = own_data / "regression" / "dev.jsonl"
    records = predicted(capsys, model, dev)
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    bound = head_bound(max(abs(r["value"]) for r in records))  # on the labels' scale
    for r, p in zip(records, pipe(dev_texts(own_data, "regression"), truncation=True), strict=True):
        assert p["score"] == pytest.approx(r["value"], abs=bound)
    same_records(records, predicted(capsys, tmp_path / "hf", dev))


def test_tagger_exports_and_grouped_entities_match(finetuned, own_data, tmp_path, capsys):
    model = finetuned("tagging", capsys)
    hf, config = exported(capsys, model, tmp_path / "hf")
    task, _, _, _ = load_finetuned(model)
    assert config["architectures"] == ["ModernBertForTokenClassification"]
    assert list(config["id2label"].values()) == list(task.labels) and "problem_type" not in config
    dev = own_data / "tagging" / "dev.jsonl"
    sentences = [" ".join(json.loads(line)["tokens"]) for line in dev.read_text().splitlines()]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    _, ours, _, _ = load_finetuned(model)
    with torch.no_grad():
        theirs = hf(**batch).logits
        mine = ours.eval()(batch["input_ids"], None, batch["attention_mask"])
    real = batch["attention_mask"].bool()
    assert_same_computation(mine[real], theirs[real], terms=TERMS, depth=HEAD_DEPTH)
    records = predicted(capsys, model, dev)
    pipe = transformers.pipeline(
        "token-classification", model=str(tmp_path / "hf"), aggregation_strategy="first", device=-1
    )
    found = 0
    for text, r in zip(sentences, records, strict=True):
        groups = [(g["entity_group"], g["start"], g["end"]) for g in pipe(text)]
        assert groups == [(e["entity"], e["start"], e["end"]) for e in r["entities"]], text
        found += len(groups)
    assert found, "no entity in the sentences compared"
    same_records(records, predicted(capsys, tmp_path / "hf", dev))


def test_linear_qa_head_exports_with_equal_logits(finetuned, own_data, tmp_path, capsys):
    model = finetuned("qa", capsys)
    hf, config = exported(capsys, model, tmp_path / "hf")
    assert config["architectures"] == ["ModernBertForQuestionAnswering"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    batch = tokenizer(["where was the car ?"], [CONTEXT[:60]], return_tensors="pt")
    _, ours, _, _ = load_finetuned(model)
    with torch.no_grad():
        theirs = hf(**batch)
        mine = ours.eval()(batch["input_ids"], None, batch["attention_mask"])
    for name in ("start_logits", "end_logits"):
        assert_same_computation(mine[name], getattr(theirs, name), terms=TERMS, depth=HEAD_DEPTH)
    dev = own_data / "qa" / "dev.json"
    records = predicted(capsys, model, dev)
    # The HF folder keeps no recipe: its windows are the default stride's, not this run's 8, so
    # the null scores (a minimum over windows) may differ; the answers do not.
    as_hf = predicted(capsys, tmp_path / "hf", dev)
    assert [(r["id"], r["answer"], r["start"]) for r in records] == [
        (r["id"], r["answer"], r["start"]) for r in as_hf
    ]
    if "question-answering" not in transformers.pipelines.SUPPORTED_TASKS:
        return  # transformers 5 has no question-answering pipeline
    pipe = transformers.pipeline("question-answering", model=str(tmp_path / "hf"), device=-1)
    record = next(r for r in records if r["id"] == "q1")
    answer = pipe(question="where was the car ?", context=CONTEXT, max_answer_len=30)
    assert (answer["answer"], answer["start"]) == (record["answer"], record["start"])


def test_the_official_qa_head_is_refused_on_the_modern_family(
    modern_model, own_data, tmp_path, capsys
):
    out = tmp_path / "out"
    code, _, err = finetune_cli(capsys, modern_model, "qa", own_data / "qa", out, *FLAGS)
    assert_one_line_error(code, err, "official", "--qa-head linear")
    assert not out.exists()


def test_the_dropout_flag_sets_every_modern_dropout(finetuned, capsys):
    model = finetuned("classification", capsys)
    seed = model / json.loads((model / "results.json").read_text())["best_seed_dir"]
    saved = json.loads((seed / "config.json").read_text())
    for name in ("embedding_dropout", "attention_dropout", "mlp_dropout", "classifier_dropout"):
        assert saved[name] == 0.1
