"""Fine-tuning the hf family (issue 48, item 2): a random-weight folder of each `transformers` type
(BERT, RoBERTa, XLM-RoBERTa, CamemBERT, DistilBERT) fine-tunes with our recipe on every
task kind (classification, multilabel, regression, tagging, linear QA; own files and a benchmark),
predicts and evaluates; the fine-tuned folder exports to the type's own `AutoModelFor...` class with
no missing or unexpected weights, whose logits and `pipeline()` answers are `electra predict`'s;
a task folder of each type saved by `transformers` runs as it is in `predict` and `evaluate` with
transformers' logits; and the recipe's layer-wise LR, weight decay and --dropout reach every weight
and dropout of each type's heads."""

from __future__ import annotations

import json

import pytest
import torch

from electra.data.tokenizer import save_tokenizer
from electra.finetuning.loading import load_finetuned_or_hf
from electra.finetuning.loop import layerwise_groups
from electra.finetuning.run import with_dropout
from electra.folders.finetuned import load_finetuned
from electra.model.hf.config import config_from_json
from electra.model.hf.heads import (
    TransformersForQuestionAnswering,
    TransformersForSequenceClassification,
    TransformersForTokenClassification,
)
from electra.model.hf.types import TYPES as HF_TYPES
from electra.tasks.finetune_config import FinetuneConfig
from electra.tasks.qa import Question

from ...conftest import (
    CONTEXT,
    WORDS,
    assert_one_line_error,
    finetune_cli,
    qa,
    run_cli,
    sentence,
    shared_data,
    squad_file,
    write_csv,
)
from ...numerics import encoder_depth, largest, rounding_bound
from .shapes import TYPES

pytestmark = pytest.mark.numeric

transformers = pytest.importorskip(
    "transformers", reason="transformers (the hf extra) not installed"
)

LAYERS, INTERMEDIATE, POSITIONS = 2, 64, 64


def tiny_config(model_type: str, vocab: int, **settings):
    """A tiny `transformers` config of `model_type` as the hub ships its kind: RoBERTa's positions
    after the padding id and one segment type."""
    sizes = {"hidden_size": 32, "num_hidden_layers": LAYERS, "num_attention_heads": 2}
    sizes |= {"intermediate_size": INTERMEDIATE, "max_position_embeddings": POSITIONS}
    if model_type == "distilbert":
        sizes = {"dim": 32, "n_layers": LAYERS, "n_heads": 2, "hidden_dim": INTERMEDIATE}
        sizes["max_position_embeddings"] = POSITIONS
    if model_type in ("roberta", "xlm-roberta", "camembert"):
        sizes |= {"type_vocab_size": 1, "max_position_embeddings": POSITIONS + 1}  # pad 0, + 1
    return transformers.AutoConfig.for_model(
        model_type, vocab_size=vocab, pad_token_id=0, **sizes, **settings
    )


def saved(model, folder, tokenizer):
    model.save_pretrained(folder)
    save_tokenizer(tokenizer, folder, lowercase=True)
    return folder


# --- rounding ---------------------------------------------------------------------------------


# Our model and transformers' run the same modules; they differ only in how rows are batched and
# padded, so by the rounding of a tiny encoder with a head: 2 layers, the embeddings' LayerNorm, a
# head's pooler and two products, a softmax or sigmoid; the longest reduction the intermediate size
# 64, at least any row's keys (32 tokens) and the width 32.
def head_bound(model_type: str, scale: float) -> float:
    depth = encoder_depth(LAYERS, extra=6)
    return rounding_bound(torch.float32, INTERMEDIATE, depth, max(scale, 1.0))


def assert_logits_agree(model_type, mine, theirs) -> float:
    """Returns the bound kept, which probabilities and values taken from the logits keep too."""
    assert mine.shape == theirs.shape
    bound = head_bound(model_type, largest(theirs))
    assert (mine - theirs).abs().max().item() <= bound, (mine - theirs).abs().max().item()
    return bound


def same_records(a: list[dict], b: list[dict], bound: float) -> None:
    """Records equal but for the rounding of their floats (`bound`)."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert _close(x, y, bound), (x, y)


def _close(x, y, bound: float) -> bool:
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k], bound) for k in x)
    if isinstance(x, list):
        return len(x) == len(y) and all(_close(u, v, bound) for u, v in zip(x, y, strict=True))
    if isinstance(x, float):
        return abs(x - y) <= bound
    return x == y


# --- data -------------------------------------------------------------------------------------

NAMES = ["John", "Mary", "Paris", "France"]
TAG_OF = {"John": "B-PER", "Mary": "B-PER", "Paris": "B-LOC", "France": "B-LOC"}
TAGS = ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
SHORT_CONTEXT = "John went to the store . Mary sat on the mat in Paris ."


def texts(n: int, offset: int = 0) -> list[str]:
    return [f"{sentence(i + offset, 3 + i % 5)} {'good' if i % 2 else 'bad'}" for i in range(n)]


def tagged(i: int) -> dict:
    words = sentence(i, 4).split() + [NAMES[i % 4]] + sentence(i + 1, 2).split()
    return {"tokens": words, "tags": [TAG_OF.get(w, "O") for w in words]}


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def own_data(tmp_path_factory):
    """Tiny files of each task kind: train (32 examples) and dev (12, other sentences)."""
    root = tmp_path_factory.mktemp("hf_data")
    for split, n, offset in (("train", 32, 0), ("dev", 12, 40)):
        rows = texts(n, offset)
        labels = [["pos" if t.endswith("good") else "neg"] for t in rows]
        write_csv(root / "classification" / f"{split}.csv", ["text", "label"], [
            [t, y[0]] for t, y in zip(rows, labels, strict=True)
        ])  # fmt: skip
        multi = [[*(["pos"] if y == ["pos"] else []), *(["long"] if len(t.split()) > 5 else [])]
                 for t, y in zip(rows, labels, strict=True)]  # fmt: skip
        write_jsonl(root / "multilabel" / f"{split}.jsonl", [
            {"text": t, "label": m} for t, m in zip(rows, multi, strict=True)
        ])  # fmt: skip
        write_jsonl(root / "regression" / f"{split}.jsonl", [
            {"text": t, "label": len(t.split())} for t in rows
        ])  # fmt: skip
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
    dev = [{**q, "question": f"so {q['question']}"} for q in questions[::-1]]
    squad_file(root / "qa" / "dev.json", dev)
    # to predict: contexts that fit one window, so that every reader sees the same tokens
    short = [{**q, "answers": []} for q in dev]
    squad_file(root / "qa" / "short.json", short, context=SHORT_CONTEXT)
    return root


def dev_file(own_data, kind):
    return next((own_data / kind).glob("dev.*"))


def dev_texts(own_data, kind) -> list[str]:
    if kind == "classification":
        lines = dev_file(own_data, kind).read_text().splitlines()[1:]
        return [line.rsplit(",", 1)[0] for line in lines]
    return [r["text"] for r in read_jsonl(dev_file(own_data, kind))]


# --- fine-tuning, export, pipelines -------------------------------------------------------------

FLAGS = ["--batch-size", "8", "--no-progress", "--lr", "3e-3", "--max-seq-len", "32"]
FLAGS += ["--device", "cpu", "--precision", "fp32", "--epochs", "1"]
RECIPES = {"qa": ["--qa-head", "linear", "--doc-stride", "8"]}
KINDS = ("classification", "multilabel", "regression", "tagging", "qa")
# Every kind on BERT and XLM-RoBERTa (segments, positions after the padding id), others on the
# rest, so that every type fine-tunes and exports at least once and each sequence head (BERT's
# pooler, RoBERTa's dense head, DistilBERT's pre-classifier) runs. DeBERTa-v3 is the deberta-v3
# family's (tests/model/deberta/test_deberta_finetune.py).
CASES = [(t, k) for t in ("bert", "xlm-roberta") for k in KINDS]
CASES += [("roberta", "regression"), ("camembert", "multilabel")]
CASES += [("distilbert", "classification"), ("distilbert", "qa")]
AUTO = {
    "classification": "SequenceClassification",
    "multilabel": "SequenceClassification",
    "regression": "SequenceClassification",
    "tagging": "TokenClassification",
    "qa": "QuestionAnswering",
}


@pytest.fixture(scope="module")
def base_folders(tmp_path_factory, task_tokenizer):
    """{model_type: a random `...ForMaskedLM` folder saved by `transformers`}, made on first use."""
    root = tmp_path_factory.mktemp("hf_base")
    made: dict[str, object] = {}

    def get(model_type):
        if model_type not in made:
            torch.manual_seed(0)
            config = tiny_config(model_type, task_tokenizer.get_vocab_size())
            model = transformers.AutoModelForMaskedLM.from_config(config)
            made[model_type] = saved(model, root / model_type, task_tokenizer)
        return made[model_type]

    return get


def predicted(capsys, model, *inputs):
    code, stdout, err = run_cli(capsys, "predict", "--model", model, *inputs)
    assert code == 0, err
    return [json.loads(line) for line in stdout.splitlines()]


def exported(capsys, model_type, kind, model, out):
    """`electra export` of a fine-tuned folder: the type's own class, loaded by its Auto class
    with every weight in place."""
    code, _, err = run_cli(capsys, "export", "--model", model, "--out", out)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == model_type
    head = AUTO[kind]
    assert config["architectures"] == [f"{HF_TYPES[model_type].prefix}For{head}"]
    auto = getattr(transformers, f"AutoModelFor{head}")
    hf, info = auto.from_pretrained(out, output_loading_info=True, local_files_only=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert type(hf).__name__ == config["architectures"][0]
    return hf.eval(), config


def export_logits(hf, model_dir, *text):
    """The export's outputs and the fine-tuned model's on one padded batch of the export
    tokenizer's encoding of `text` (texts, or questions and contexts)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf.name_or_path, local_files_only=True)
    batch = tokenizer(*text, padding=True, return_tensors="pt")
    _, ours, _, _ = load_finetuned(model_dir)
    with torch.no_grad():
        theirs = hf(**batch)
        mine = ours.eval()(batch["input_ids"], batch.get("token_type_ids"), batch["attention_mask"])
    return mine, theirs, batch["attention_mask"].bool()


def finetuned(capsys, folder, kind, data, out):
    code, _, err = finetune_cli(capsys, folder, kind, data, out, *FLAGS, *RECIPES.get(kind, []))
    assert code == 0, err
    return out


@pytest.mark.parametrize("model_type,kind", CASES)
def test_finetune_predict_evaluate_export_and_pipeline(
    model_type, kind, base_folders, own_data, tmp_path, capsys
):
    model = finetuned(capsys, base_folders(model_type), kind, own_data / kind, tmp_path / "ft")
    results = json.loads((model / "results.json").read_text())
    assert results["task"] == kind and results["config"]["layerwise_lr_decay"] == 0.8
    assert all(0 < loss < 100 for loss in results["per_seed"][0]["train_loss"])
    # evaluate scores the dev file as fine-tuning did
    code, _, err = run_cli(
        capsys, "evaluate", "--model", model, "--data", own_data / kind, "--device", "cpu",
        "--out", tmp_path / "ev",
    )  # fmt: skip
    assert code == 0, err
    scored = json.loads((tmp_path / "ev" / "results.json").read_text())["metrics"]
    assert scored == pytest.approx(results["metrics"], abs=1e-6)
    hf, config = exported(capsys, model_type, kind, model, tmp_path / "hf")
    CHECKS[kind](model_type, model, hf, config, own_data, tmp_path / "hf", capsys)


def check_classifier(model_type, model, hf, config, own_data, export, capsys, kind):
    texts_ = dev_texts(own_data, kind)
    mine, theirs, _ = export_logits(hf, model, texts_)
    task, _, _, _ = load_finetuned(model)
    # a regression's export gives the value itself as its logit
    scale = float(task.value_scale) if kind == "regression" else 1.0
    bound = assert_logits_agree(model_type, mine * scale, theirs.logits)
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
        assert set(config["label2id"]) == {"pos", "long"}
        answers = pipe(texts_, truncation=True, top_k=None)
        for r, p in zip(records, answers, strict=True):
            assert {a["label"]: pytest.approx(a["score"], abs=bound) for a in p} == r["scores"]
    else:
        assert config["problem_type"] == "regression" and config["num_labels"] == 1
        bound = head_bound(model_type, max(abs(r["value"]) for r in records))  # the labels' scale
        for r, p in zip(records, pipe(texts_, truncation=True), strict=True):
            assert p["score"] == pytest.approx(r["value"], abs=bound)
    same_records(records, predicted(capsys, export, dev), bound)


def check_tagger(model_type, model, hf, config, own_data, export, capsys):
    task, _, _, _ = load_finetuned(model)
    assert list(config["id2label"].values()) == list(task.labels) and "problem_type" not in config
    dev = dev_file(own_data, "tagging")
    words = [r["tokens"] for r in read_jsonl(dev)]
    sentences = [" ".join(w) for w in words]
    mine, theirs, real = export_logits(hf, model, sentences)
    assert_logits_agree(model_type, mine[real], theirs.logits[real])
    records = predicted(capsys, model, dev)
    # Each word's tag is its first token's: the pipeline's token at the word's first character.
    pipe = transformers.pipeline(
        "token-classification", model=str(export), aggregation_strategy="none", ignore_labels=[],
        device=-1,
    )  # fmt: skip
    for text, ws, r in zip(sentences, words, records, strict=True):
        starts = [sum(len(w) + 1 for w in ws[:i]) for i in range(len(ws))]
        by_start = {}
        for token in pipe(text):
            by_start.setdefault(token["start"], token["entity"])
        assert r["words"] == ws and [by_start[s] for s in starts] == r["tags"], text
    same_records(records, predicted(capsys, export, dev), 0.0)


def check_qa(model_type, model, hf, config, own_data, export, capsys):
    questions = ["where was the car ?", "who sat on the mat ?"]
    mine, theirs, real = export_logits(hf, model, questions, [SHORT_CONTEXT] * 2)
    for name in ("start_logits", "end_logits"):
        assert_logits_agree(model_type, mine[name][real], getattr(theirs, name)[real])
    short = own_data / "qa" / "short.json"
    records = predicted(capsys, model, short)
    assert {r["id"] for r in records} == {"q1", "q2", "q3", "q4"}
    assert all(r["no_answer"] or r["answer"] in SHORT_CONTEXT for r in records)
    # one window each in both: the same answers and scores
    bound = head_bound(model_type, max(abs(r["null_score"]) for r in records))
    same_records(records, predicted(capsys, export, short), bound)
    if "question-answering" in transformers.pipelines.SUPPORTED_TASKS:  # gone in transformers 5
        pipe = transformers.pipeline("question-answering", model=str(export), device=-1)
        for r in records:
            if not r["no_answer"]:
                q = next(q for q in json.loads(short.read_text())["data"][0]["paragraphs"][0]["qas"]
                         if q["id"] == r["id"])  # fmt: skip
                answer = pipe(question=q["question"], context=SHORT_CONTEXT)
                assert (answer["answer"], answer["start"]) == (r["answer"], r["start"])


CHECKS = {
    "classification": lambda *a: check_classifier(*a, "classification"),
    "multilabel": lambda *a: check_classifier(*a, "multilabel"),
    "regression": lambda *a: check_classifier(*a, "regression"),
    "tagging": check_tagger,
    "qa": check_qa,
}


def test_every_type_and_kind_is_covered():
    assert {t for t, _ in CASES} == set(TYPES) == set(HF_TYPES)
    assert {k for _, k in CASES} == set(KINDS)


@pytest.mark.parametrize("model_type", TYPES)
def test_the_recipe_gives_every_weight_of_every_head_its_depth(model_type, task_tokenizer):
    """Layer-wise LR decay over the type's own names (embeddings, layers, the head and its pooler)
    and no decay on any norm or bias."""
    raw = tiny_config(model_type, task_tokenizer.get_vocab_size()).to_dict()
    cfg = config_from_json(raw, "config.json")
    recipe = FinetuneConfig(layerwise_lr_decay=0.5, weight_decay=0.01)
    for head in (
        TransformersForSequenceClassification(cfg, 3),
        TransformersForTokenClassification(cfg, 3),
        TransformersForQuestionAnswering(cfg),
    ):
        groups = layerwise_groups(head, recipe)
        scale = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
        decay = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
        named = dict(head.named_parameters())
        assert len(scale) == len(named)
        base = HF_TYPES[model_type].base
        for name, p in named.items():
            want = 1.0  # the head
            if name.startswith(f"{base}.") and ".pooler." not in f".{name}":
                layer = [int(s) for s in name.split(".") if s.isdigit()]
                want = 0.5 ** (LAYERS + 1 - (layer[0] + 1 if layer else 0))
            assert scale[id(p)] == want, name
            norm = "LayerNorm" in name or "layer_norm" in name
            assert decay[id(p)] == (0.0 if norm or name.endswith("bias") else 0.01), name


@pytest.mark.parametrize("model_type", TYPES)
def test_the_dropout_flag_sets_every_head_dropout(model_type, task_tokenizer):
    """--dropout (the family's dropout fields) reaches the heads' own dropouts too: DistilBERT's
    classifier and QA dropouts (0.2 and 0.1 in `transformers`) follow it."""
    raw = tiny_config(model_type, task_tokenizer.get_vocab_size()).to_dict()
    cfg = with_dropout(config_from_json(raw, "config.json"), 0.3)
    for head in (
        TransformersForSequenceClassification(cfg, 3),
        TransformersForTokenClassification(cfg, 3),
        TransformersForQuestionAnswering(cfg),
    ):
        rates = {name: m.p for name, m in head.named_modules() if isinstance(m, torch.nn.Dropout)}
        assert rates and set(rates.values()) == {0.3}, rates
        assert head.config == cfg  # what the folder saves: the encoder's config, unchanged


def test_the_official_qa_head_is_refused_on_the_hf_family(base_folders, own_data, tmp_path, capsys):
    out = tmp_path / "out"
    code, _, err = finetune_cli(capsys, base_folders("roberta"), "qa", own_data / "qa", out, *FLAGS)
    assert_one_line_error(code, err, "official", "--qa-head linear")
    assert not out.exists()


def test_a_benchmark_fine_tunes_on_a_pair_task(base_folders, tmp_path, capsys):
    """STS-B's sentence pairs on RoBERTa (no segments: the pair is told by its separators): the
    benchmark's own reader, metric and label scale, exported as a regression whose logit is the
    value, which `pipeline()` gives for a pair."""
    glue = shared_data("glue", "STS-B")
    data = tmp_path / "stsb"
    data.mkdir()
    for split, n in (("train", 33), ("dev", 13)):
        lines = (glue / f"{split}.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
        (data / f"{split}.tsv").write_text("".join(lines[:n]))
    out = tmp_path / "out"
    code, _, err = finetune_cli(
        capsys, base_folders("roberta"), "stsb", data, out, *FLAGS, "--drop-overlap"
    )
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == "stsb" and set(results["metrics"]) == {"pearson", "spearman"}
    code, _, err = run_cli(
        capsys, "evaluate", "--model", out, "--data", data, "--drop-overlap", "--device", "cpu",
        "--out", tmp_path / "ev",
    )  # fmt: skip
    assert code == 0, err
    scored = json.loads((tmp_path / "ev" / "results.json").read_text())["metrics"]
    assert scored == pytest.approx(results["metrics"], abs=1e-6)
    hf, config = exported(capsys, "roberta", "regression", out, tmp_path / "hf")
    assert config["problem_type"] == "regression"
    header, *rows = [line.split("\t") for line in (data / "dev.tsv").read_text().splitlines()]
    a, b = header.index("sentence1"), header.index("sentence2")
    pairs = [(r[a], r[b]) for r in rows[:4]]
    task, ours, _, _ = load_finetuned(out)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    assert "token_type_ids" not in tok("a text", "a pair")
    batch = tok([p[0] for p in pairs], [p[1] for p in pairs], padding=True, return_tensors="pt")
    with torch.no_grad():
        mine = ours.eval()(batch["input_ids"], None, batch["attention_mask"])
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    answers = pipe([{"text": x, "text_pair": y} for x, y in pairs])
    theirs = torch.tensor([[p["score"] for p in answers]]).T
    assert_logits_agree("roberta", mine * float(task.value_scale), theirs)


# --- task folders saved by transformers run as they are -----------------------------------------

HEADS = {
    "classification": ("SequenceClassification", {"id2label": {0: "neg", 1: "pos"}}),
    "multilabel": (
        "SequenceClassification",
        {"id2label": {0: "a", 1: "b", 2: "c"}, "problem_type": "multi_label_classification"},
    ),
    "regression": ("SequenceClassification", {"num_labels": 1}),
    "tagging": ("TokenClassification", {"id2label": dict(enumerate(TAGS))}),
    "qa": ("QuestionAnswering", {}),
}
FOLDERS = [(t, k) for t in TYPES for k in HEADS]  # no training: well under a second each


def hf_task_folder(root, tokenizer, model_type, kind):
    """A random task model of `model_type` saved by `transformers` with its labels, every weight
    moved off its initial value so that a misplaced one (a pooler, a head's dense layer) shows."""
    head, settings = HEADS[kind]
    torch.manual_seed(1)
    config = tiny_config(model_type, tokenizer.get_vocab_size(), **settings)
    model = getattr(transformers, f"AutoModelFor{head}").from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return saved(model, root / f"{model_type}-{kind}", tokenizer), model.eval()


def sentences(n, seed=0, length=(3, 14)):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(*length, (n,), generator=g).tolist()
    return [" ".join(WORDS[i] for i in torch.randint(len(WORDS), (k,), generator=g)) for k in sizes]


def hf_outputs(hf, batch):
    kwargs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    if getattr(hf.config, "type_vocab_size", 0) >= 2:
        kwargs["token_type_ids"] = batch["token_type_ids"]
    with torch.no_grad():
        return hf(**kwargs)


@pytest.mark.parametrize("model_type,kind", FOLDERS)
def test_a_transformers_task_folder_runs_as_it_is(
    model_type, kind, tmp_path, capsys, task_tokenizer
):
    folder, hf = hf_task_folder(tmp_path, task_tokenizer, model_type, kind)
    task, model, tokenizer, cfg = load_finetuned_or_hf(folder)
    assert task.name == kind and type(model).__name__ == type(hf).__name__
    assert cfg.max_seq_len == POSITIONS
    assert set(model.state_dict()) == set(hf.state_dict())
    model.eval()
    if kind == "qa":
        check_task_folder_qa(model_type, folder, hf, task, model, tokenizer, cfg, capsys)
    elif kind == "tagging":
        check_task_folder_tagger(model_type, folder, hf, task, model, tokenizer, tmp_path, capsys)
    else:
        check_task_folder_classifier(
            model_type, folder, hf, task, model, tokenizer, kind, tmp_path, capsys
        )


def check_task_folder_classifier(model_type, folder, hf, task, model, tokenizer, kind, tmp, capsys):
    texts_ = sentences(12)
    path = write_csv(tmp / "in.csv", ["text"], [[t] for t in texts_])
    batch = task.encode(task.read_inputs(path), tokenizer, 32, training=False).tensors
    assert batch["attention_mask"].sum(1).unique().numel() > 3  # padding that must change nothing
    theirs = hf_outputs(hf, batch).logits
    with torch.no_grad():
        mine = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    bound = assert_logits_agree(model_type, mine, theirs)
    records = predicted(capsys, folder, path, "--all-scores")
    if kind == "classification":
        names = ("neg", "pos")
        assert [r["label"] for r in records] == [names[i] for i in theirs.argmax(-1).tolist()]
        got = torch.tensor([[r["scores"][n] for n in names] for r in records])
        want = theirs.softmax(-1)
    elif kind == "multilabel":
        names = ("a", "b", "c")
        want = theirs.sigmoid()
        assert [r["labels"] for r in records] == [
            [names[j] for j in range(3) if p[j] > 0.5] for p in want
        ]
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


def check_task_folder_tagger(model_type, folder, hf, task, model, tokenizer, tmp, capsys):
    assert task.labels == TAGS
    words = [s.split() for s in sentences(10, seed=2)]
    dev = write_jsonl(tmp / "dev.jsonl", [{"tokens": w, "tags": ["O"] * len(w)} for w in words])
    encoded = task.encode(task.read_inputs(dev), tokenizer, 32, training=False)
    batch = encoded.tensors
    theirs = hf_outputs(hf, batch).logits
    with torch.no_grad():
        mine = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    assert_logits_agree(model_type, mine[real], theirs[real])
    records = predicted(capsys, folder, dev)
    for i, r in enumerate(records):
        firsts = encoded.meta["first_tokens"][i]
        assert r["words"] == words[i]
        assert r["tags"] == [TAGS[t] for t in theirs[i, firsts].argmax(-1).tolist()]
    code, stdout, err = run_cli(
        capsys, "evaluate", "--model", folder, "--dev", dev, "--out", tmp / "ev", "--device", "cpu"
    )
    assert code == 0, err
    assert [r["prediction"] for r in read_jsonl(tmp / "ev" / "predictions.jsonl")] == [
        r["tags"] for r in records
    ]


def check_task_folder_qa(model_type, folder, hf, task, model, tokenizer, cfg, capsys):
    assert task.qa_head == "linear"
    question = Question("0", "who went to the store", CONTEXT, (), False)
    batch = task.encode([question], tokenizer, cfg.max_seq_len, training=False).tensors
    theirs = hf_outputs(hf, batch)
    with torch.no_grad():
        mine = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    for name in ("start_logits", "end_logits"):
        assert_logits_agree(model_type, mine[name], getattr(theirs, name))
    records = predicted(capsys, folder, write_qa(folder.parent / "q.json"))
    assert [r["id"] for r in records] == ["q1"]
    assert records[0]["no_answer"] or records[0]["answer"] in CONTEXT


def write_qa(path):
    return squad_file(path, [{**qa("q1", "who went to the store ?"), "answers": []}])
