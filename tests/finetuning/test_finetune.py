"""Fine-tuning: GLUE/CoNLL readers and their errors, encoding, the recipe (layer-wise LR decay),
and few-step runs of every task family through the command line, with their output files."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict

import pytest
import torch
from safetensors.torch import load_file

from electra.config import RuntimeConfig
from electra.data.tokenizer import SpecialIds
from electra.engine import runtime
from electra.engine.graphs import ShapeGraphs
from electra.engine.optim import build_optimizer, set_learning_rate
from electra.engine.runtime import Runtime
from electra.errors import ElectraError
from electra.finetuning.inference import predict, trim
from electra.finetuning.loop import layerwise_groups
from electra.tasks import get_task
from electra.tasks.base import pack
from electra.tasks.finetune_config import FinetuneConfig, resolve_recipe
from electra.tasks.ner import read_conll
from electra.tasks.tagging import IGNORE

from ..conftest import (
    FAST_FLAGS,
    WORDS,
    assert_one_line_error,
    evaluate_cli,
    finetune_cli,
    qa,
    run_cli,
    sentence,
    shared_data,
    squad_file,
    tiny_model_config,
    train_losses,
    varied_sst_dir,
    write_tsv,
)
from ..numerics import assert_same_computation, encoder_depth, rounding_bound


def sst_dir(root, n=24):
    """SST-2-format files where the label is whether "good" is in the sentence."""
    rows = [[f"{sentence(i)} {'good' if i % 2 else 'bad'} ", i % 2] for i in range(n + 8)]
    write_tsv(root / "train.tsv", [["sentence", "label"], *rows[:n]])
    write_tsv(root / "dev.tsv", [["sentence", "label"], *rows[n:]])  # rows it does not train on
    write_tsv(
        root / "test.tsv", [["index", "sentence"], *[[i, r[0]] for i, r in enumerate(rows[:5])]]
    )
    return root


GLUE_COUNTS = {
    "cola": ("CoLA", 8551, 1043, 1063),
    "sst2": ("SST-2", 67349, 872, 1821),
    "mrpc": ("MRPC", 3668, 408, 1725),
    "stsb": ("STS-B", 5749, 1500, 1379),
    "rte": ("RTE", 2490, 277, 3000),
    "wnli": ("WNLI", 635, 71, 146),
}


@pytest.mark.parametrize("task", GLUE_COUNTS)
def test_glue_readers_give_the_official_row_counts(task):
    folder, *counts = GLUE_COUNTS[task]
    root = shared_data("glue", folder)
    t = get_task(task)
    sizes = [
        sum(len(t.read(p, s)) for p in t.resolve(root)[s].values())
        for s in ("train", "dev", "test")
    ]
    assert sizes == counts
    dev = t.read(t.resolve(root)["dev"]["dev"], "dev")
    assert all(e.label is not None for e in dev) and all(e.text_a for e in dev)
    assert (dev[0].text_b is not None) == (task not in ("cola", "sst2"))


def test_conll_reader_gives_the_official_sentence_counts():
    root = shared_data("conll2003")
    t = get_task("conll2003")
    train = t.read(t.resolve(root)["train"]["train"], "train")
    dev = t.read(t.resolve(root)["dev"]["dev"], "dev")
    assert (len(train), len(dev)) == (14041, 3250)
    assert train[0].words[:3] == ("EU", "rejects", "German")
    assert train[0].tags[:3] == ("B-ORG", "O", "B-MISC")


def test_qnli_dev_reads_and_its_missing_train_split_is_named():
    root = shared_data("glue", "QNLI")
    t = get_task("qnli")
    assert len(t.read(t.resolve(root)["dev"]["dev"], "dev")) == 5463
    with pytest.raises(ElectraError, match="no train split for qnli .* expected train.tsv"):
        t.resolve(root)["train"]


def test_mnli_and_qqp_read_their_formats(tmp_path):
    mnli_header = [
        "index",
        "promptID",
        "pairID",
        "genre",
        "s1b",
        "s2b",
        "s1p",
        "s2p",
        "sentence1",
        "sentence2",
        "label1",
        "gold_label",
    ]
    row = [0, 1, 2, "fiction", "", "", "", "", "a cat sat", "a cat ran", "neutral", "neutral"]
    for name in ("train", "dev_matched", "dev_mismatched"):
        write_tsv(tmp_path / "MNLI" / f"{name}.tsv", [mnli_header, row, [*row[:-1], "entailment"]])
    t = get_task("mnli")
    sets = {k: t.read(p, "dev") for k, p in t.resolve(tmp_path / "MNLI")["dev"].items()}
    assert list(sets) == ["matched", "mismatched"] and sets["matched"][1].label == "entailment"
    assert t.main_metric == "matched_accuracy"
    write_tsv(
        tmp_path / "QQP" / "train.tsv",
        [
            ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            [7, 1, 2, "who is it ?", "what is it ?", 0],
        ],
    )
    ex = get_task("qqp").read(tmp_path / "QQP" / "train.tsv", "train")[0]
    assert (ex.text_a, ex.text_b, ex.label) == ("who is it ?", "what is it ?", "0")


def test_mnli_reports_both_dev_sets_and_writes_both_submissions(tmp_path, capsys, tiny_pretrained):
    header = [
        "index",
        "promptID",
        "pairID",
        "genre",
        "a",
        "b",
        "c",
        "d",
        "sentence1",
        "sentence2",
        "label1",
        "gold_label",
    ]
    labels = ("contradiction", "entailment", "neutral")

    def rows(start):
        return [
            [i, 0, 0, "g", "", "", "", "", sentence(i), sentence(i + 2), "", labels[i % 3]]
            for i in range(start, start + 12)
        ]

    for k, name in enumerate(("train", "dev_matched", "dev_mismatched")):  # no copies of train
        write_tsv(tmp_path / "MNLI" / f"{name}.tsv", [header, *rows(15 * k)])
    for name in ("test_matched", "test_mismatched"):
        write_tsv(tmp_path / "MNLI" / f"{name}.tsv", [header[:10], *[r[:10] for r in rows(0)[:4]]])
    out = tmp_path / "ft"
    code, _, err = finetune_cli(
        capsys, tiny_pretrained, "mnli", tmp_path / "MNLI", out, "--epochs", "1", *FAST_FLAGS
    )
    assert code == 0, err
    metrics = json.loads((out / "results.json").read_text())["metrics"]
    assert set(metrics) == {"matched_accuracy", "mismatched_accuracy"}
    code, _, err = evaluate_cli(
        capsys, out, tmp_path / "MNLI", "--split", "test", "--out", tmp_path / "sub"
    )
    assert code == 0, err
    for name in ("MNLI-m.tsv", "MNLI-mm.tsv"):
        lines = (tmp_path / "sub" / name).read_text().splitlines()
        assert len(lines) == 5 and lines[1].split("\t")[1] in labels


def test_pairs_are_truncated_longest_first():
    special = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
    ids, types = pack(list(range(10, 20)), [30, 31, 32], special, max_len=10)
    # budget 7: the longer first sequence loses tokens from its end until it no longer is longer
    assert ids == [2, 10, 11, 12, 13, 3, 30, 31, 32, 3]
    assert types == [0] * 6 + [1] * 4
    ids, _ = pack(list(range(10, 20)), list(range(30, 40)), special, max_len=9)
    assert ids == [2, 10, 11, 12, 3, 30, 31, 32, 3]


def test_layerwise_lr_decay_and_the_official_off_by_one(task_tokenizer):
    model = get_task("sst2").build_model(tiny_model_config(num_hidden_layers=3))
    lr = 1e-3

    def lrs(off_by_one):
        cfg = FinetuneConfig(lr=lr, layerwise_lr_decay=0.5, layerwise_off_by_one=off_by_one)
        opt = build_optimizer(layerwise_groups(model, cfg), cfg, torch.device("cpu"))
        set_learning_rate(opt, lr)
        by_param = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
        return {n: by_param[id(p)] for n, p in model.named_parameters()}

    fixed = lrs(False)
    assert fixed["classifier.weight"] == lr
    assert fixed["electra.encoder.layer.2.output.dense.weight"] == pytest.approx(lr * 0.5)
    assert fixed["electra.encoder.layer.0.attention.self.query.weight"] == pytest.approx(
        lr * 0.5**3
    )
    assert fixed["electra.embeddings.word_embeddings.weight"] == pytest.approx(lr * 0.5**4)
    official = lrs(True)
    assert official["classifier.bias"] == lr
    assert official["electra.encoder.layer.2.output.dense.weight"] == pytest.approx(lr * 0.5**2)
    assert official["electra.embeddings_project.weight"] == pytest.approx(lr * 0.5**5)


def test_recipe_defaults_follow_table_7():
    small, large = tiny_model_config(), tiny_model_config(hidden_size=1024, num_attention_heads=16)
    r = resolve_recipe(FinetuneConfig(), small, epochs=10, max_seq_len=128)
    assert (r.lr, r.layerwise_lr_decay, r.epochs, r.weight_decay, r.warmup_proportion) == (
        3e-4,
        0.8,
        10,
        0.0,
        0.1,
    )
    assert r.max_seq_len == 64  # capped by the model's positions
    r = resolve_recipe(FinetuneConfig(lr=1e-5), large, epochs=3, max_seq_len=128)
    assert (r.lr, r.layerwise_lr_decay) == (1e-5, 0.9)
    assert (
        get_task("rte").epochs == get_task("stsb").epochs == 10 and get_task("squad2").epochs == 2
    )
    assert FinetuneConfig().bias_correction is False  # the official optimizer's


def test_recipe_from_strings_is_typed_and_bad_values_name_their_source():
    cfg = FinetuneConfig.from_values(
        {"epochs": "10", "bias_correction": "true", "lr": "1e-3"}, "--set"
    )
    assert (cfg.epochs, cfg.bias_correction, cfg.lr) == (10, True, 1e-3)
    with pytest.raises(ElectraError, match="epochs='ten' in --set is not a valid int"):
        FinetuneConfig.from_values({"epochs": "ten"}, "--set")
    with pytest.raises(ElectraError, match="did you mean epochs"):
        FinetuneConfig.from_values({"epoch": "3"}, "--set")


def test_ner_labels_the_first_sub_token_of_each_word(tmp_path, task_tokenizer):
    path = tmp_path / "train.txt"
    path.write_text(
        "-DOCSTART- -X- -X- O\n\nParis NNP B-NP B-LOC\ncatdog NN I-NP O\n\nMary NNP B-NP B-PER\n"
    )
    sentences = read_conll(path, get_task("ner").labels)
    assert [s.words for s in sentences] == [("Paris", "catdog"), ("Mary",)]
    task = get_task("ner")
    enc = task.encode(sentences, task_tokenizer, max_len=16, training=True)
    labels = enc.tensors["labels"][0]
    pieces = task_tokenizer.encode(
        ["Paris", "catdog"], is_pretokenized=True, add_special_tokens=False
    )
    assert len(pieces.ids) > 2  # "catdog" is split
    firsts = enc.meta["first_tokens"][0]
    assert firsts == [1, 2]
    assert labels[1] == task.labels.index("B-LOC") and labels[2] == task.labels.index("O")
    assert (labels[3:] == IGNORE).all()  # later sub-tokens and padding carry no label
    # words cut off by max_seq_len are predicted O, so a sentence is scored whole
    short = task.encode(sentences, task_tokenizer, max_len=3, training=False)
    preds = task.decode(sentences, short, {"tags": torch.zeros((2, 3), dtype=torch.long)})
    assert preds[0]["prediction"] == ["O", "O"]


def test_trim_drops_unused_padding_columns():
    batch = {
        "input_ids": torch.ones(2, 64, dtype=torch.long),
        "attention_mask": torch.zeros(2, 64, dtype=torch.long),
        "labels": torch.tensor([0, 1]),
    }
    batch["attention_mask"][1, :11] = 1
    out = trim(batch)
    assert out["input_ids"].shape == (2, 16) and out["labels"].shape == (2,)
    # static: a power of two from 32, at most the whole width (few shapes for captured steps)
    widths = {}
    for used in (1, 11, 32, 33, 64):
        batch["attention_mask"][1] = torch.arange(64) < used
        widths[used] = trim(batch, static=True)["input_ids"].shape[1]
    assert widths == {1: 32, 11: 32, 32: 32, 33: 64, 64: 64}
    narrow = {k: v[:, :48] if v.dim() > 1 else v for k, v in batch.items()}
    assert trim(narrow, static=True)["input_ids"].shape[1] == 48


def _row(data, i):
    return {k: v[i : i + 1] for k, v in data.tensors.items()}


@pytest.mark.numeric
def test_prediction_batches_by_length_and_keeps_the_examples_order(
    tmp_path, task_tokenizer, monkeypatch
):
    """Rows are batched longest first; each prediction must still be its own example's."""
    task = get_task("stsb")
    header = ["index", "g", "f", "y", "o", "s1", "s2", "sentence1", "sentence2", "score"]
    rows = [
        [i, *"gfyoss", sentence(i, 1 + i % 7), sentence(i + 3, 1 + i * 3 % 11), 1.0]
        for i in range(13)
    ]
    examples = task.read(write_tsv(tmp_path / "dev.tsv", [header, *rows]), "dev")
    data = task.encode(examples, task_tokenizer, 64, training=False)
    torch.manual_seed(0)
    # wide initial weights, so that the examples' outputs lie far apart compared with rounding
    cfg = tiny_model_config(vocab_size=task_tokenizer.get_vocab_size(), initializer_range=0.5)
    model = task.build_model(cfg)
    lengths = data.tensors["attention_mask"].sum(1)
    assert not torch.equal(lengths.argsort(descending=True, stable=True), torch.arange(13))
    task.eval_batch_size = 4
    seen = {}
    task.decode = lambda examples, data, outputs: seen.update(outputs) or []  # the raw outputs
    fp32 = Runtime(torch.device("cpu"), RuntimeConfig(precision="fp32"))
    predict(task, model, examples, data, fp32)
    with torch.no_grad():  # each example alone, in order
        alone = torch.cat([task.infer(model, trim(_row(data, i)))["logits"] for i in range(13)])
    # Other batches, the same chain: 2 layers, the embeddings' projection and LayerNorm and the
    # head's two products; the longest reduction the intermediate size (64, above 32 keys).
    within = {"terms": cfg.intermediate_size, "depth": encoder_depth(2, extra=5)}
    # A swap would show: each prediction lies nearest its own example's output, though outputs
    # may lie closer together than the bound does. (The session's WordPiece vocabulary, and so
    # these outputs, differ from run to run: `tokenizers` breaks ties in its training in no
    # fixed order.)
    assert torch.equal(torch.cdist(seen["logits"], alone).argmin(1), torch.arange(13))
    assert_same_computation(seen["logits"], alone, **within)

    # cuda_graph: static shapes (on the CPU nothing is captured), the same predictions
    runs = []
    monkeypatch.setattr(
        runtime, "ShapeGraphs", lambda *a, **k: runs.append(ShapeGraphs(*a, **k)) or runs[-1]
    )
    graphed = RuntimeConfig(precision="fp32", cuda_graph=True)
    predict(task, model, examples, data, Runtime(torch.device("cpu"), graphed))
    assert torch.equal(torch.cdist(seen["logits"], alone).argmin(1), torch.arange(13))
    assert_same_computation(seen["logits"], alone, **within)
    shapes = {dict((k, tuple(s)) for k, s, _ in shape)["input_ids"] for shape in runs[0].calls}
    assert shapes == {(4, 32)}, shapes  # 13 rows in batches of 4, the last filled up


# --- end to end through the command line ----------------------------------------------------------


def test_glue_finetune_learns_writes_results_and_evaluates(tmp_path, capsys, tiny_pretrained):
    data = sst_dir(tmp_path / "sst")
    out = tmp_path / "ft"
    code, stdout, err = finetune_cli(
        capsys, tiny_pretrained, "sst2", data, out, "--epochs", "15", "--seeds", "2", *FAST_FLAGS
    )
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    assert results["seeds"] == [0, 1] and results["main_metric"] == "accuracy"
    assert results["config"]["lr"] == 3e-3 and results["config"]["layerwise_lr_decay"] == 0.8
    for seed in results["per_seed"]:
        assert seed["train_loss"][-1] < 0.5 * seed["train_loss"][0]  # it learns the keyword
    assert results["metrics"]["accuracy"] >= 75.0
    assert sorted(results["spread"]["accuracy"]) == ["max", "min", "std"]
    best = out / results["best_seed_dir"]
    rows = [json.loads(line) for line in (best / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and set(rows[0]) == {"id", "prediction", "label"}
    # the metric is recomputed from the predictions file
    code, stdout, _ = run_cli(
        capsys, "score", "--task", "sst2", "--predictions", best / "predictions.jsonl"
    )
    seed_result = json.loads((best / "results.json").read_text())
    assert json.loads(stdout)["accuracy"] == pytest.approx(seed_result["metrics"]["accuracy"])
    # evaluate reloads the best seed and gives the same dev score; test writes GLUE's format
    code, stdout, _ = run_cli(capsys, "evaluate", "--model", out, "--task", "sst2", "--data", data)
    assert code == 0 and f"accuracy: {seed_result['metrics']['accuracy']:.2f}" in stdout
    code, stdout, _ = evaluate_cli(capsys, out, data, "--split", "test")
    lines = (best / "eval-test" / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 6
    assert all(line.split("\t")[1] in ("0", "1") for line in lines[1:])


def test_resume_keeps_finished_seeds_of_the_same_recipe_only(tmp_path, capsys, tiny_pretrained):
    """An interrupted multi-seed run leaves OUT's .tmp folder; --resume keeps the seeds it finished
    with the same recipe and model, retrains the rest, and ignores seeds of another recipe."""
    data = sst_dir(tmp_path / "sst")
    out = tmp_path / "ft"
    args = ("--epochs", "2", "--seeds", "2", *FAST_FLAGS)
    assert finetune_cli(capsys, tiny_pretrained, "sst2", data, out, *args)[0] == 0
    full = json.loads((out / "results.json").read_text())
    # As if killed during seed 1: seed 0 finished, seed 1 half-written (no results.json).
    interrupted = tmp_path / ".ft.tmp"
    shutil.copytree(out / "seed_0", interrupted / "seed_0")
    shutil.copytree(out / "seed_1", interrupted / "seed_1")
    (interrupted / "seed_1" / "results.json").unlink()
    marker = interrupted / "seed_0" / "marker"
    marker.write_text("kept")
    code, _, err = finetune_cli(
        capsys, tiny_pretrained, "sst2", data, out, *args, "--overwrite", "--resume"
    )
    assert code == 0, err
    assert "seed 0: kept" in err and "seed 1: kept" not in err
    assert (out / "seed_0" / "marker").is_file() and not interrupted.exists()
    resumed = json.loads((out / "results.json").read_text())
    assert resumed["per_seed"] == full["per_seed"]  # seed 1 retrained to the same numbers
    # A different recipe does not reuse the finished seed.
    shutil.copytree(out / "seed_0", interrupted / "seed_0")
    code, _, err = finetune_cli(
        capsys, tiny_pretrained, "sst2", data, out, *args, "--lr", "1e-3", "--overwrite", "--resume"
    )
    assert code == 0 and "kept" not in err
    assert not (out / "seed_0" / "marker").exists()


@pytest.mark.numeric
def test_compiled_fine_tuning_matches_eager(tmp_path, capsys, tiny_pretrained):
    """--compile: the same losses as eager (dropout off, as the two draw different bits)."""
    data = varied_sst_dir(tmp_path / "sst")
    eager_cfg, eager = train_losses(capsys, tiny_pretrained, data, tmp_path / "eager")
    cfg, compiled = train_losses(capsys, tiny_pretrained, data, tmp_path / "compiled", "--compile")
    assert cfg["compile"] and not eager_cfg["compile"]
    # as test_packing's packed and padded losses: 8 steps, each the backward chain of the tiny
    # classifier and Adam's update, the longest reduction 8 rows of at most 16 tokens
    depth = 8 * (encoder_depth(2, extra=7, backward=True) + 1)
    assert compiled == pytest.approx(eager, rel=rounding_bound(torch.float32, 8 * 16, depth))


def test_regression_and_pair_doubling(tmp_path, capsys, tiny_pretrained):
    header = [
        "index",
        "genre",
        "filename",
        "year",
        "old_index",
        "source1",
        "source2",
        "sentence1",
        "sentence2",
        "score",
    ]
    rows = [
        [i, "g", "f", "y", "o", "s", "s", sentence(i), sentence(i + 1), f"{(i % 6) * 0.9:.1f}"]
        for i in range(22)
    ]
    write_tsv(tmp_path / "sts" / "train.tsv", [header, *rows[:16]])
    write_tsv(tmp_path / "sts" / "dev.tsv", [header, *rows[16:]])  # pairs it does not train on
    out = tmp_path / "ft"
    code, _, err = finetune_cli(
        capsys,
        tiny_pretrained,
        "stsb",
        tmp_path / "sts",
        out,
        "--epochs",
        "1",
        "--double-unordered",
        *FAST_FLAGS,
    )
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    assert results["examples"]["train"] == 32 and set(results["metrics"]) == {"spearman", "pearson"}
    preds = (out / "seed_0" / "predictions.jsonl").read_text().splitlines()
    assert isinstance(json.loads(preds[0])["prediction"], float)
    code, _, err = finetune_cli(
        capsys,
        tiny_pretrained,
        "sst2",
        sst_dir(tmp_path / "s"),
        tmp_path / "x",
        "--double-unordered",
        *FAST_FLAGS,
    )
    assert_one_line_error(code, err, "double_unordered applies to MRPC and STS-B")


def test_ner_finetune_and_squad_finetune(tmp_path, capsys, tiny_pretrained):
    conll = tmp_path / "conll"
    conll.mkdir()
    for name, words in (("train.txt", WORDS[:20]), ("valid.txt", WORDS[20:40])):  # no copies
        text = "".join(
            f"Paris NNP B-NP B-LOC\n{w} NN I-NP O\nMary NNP B-NP B-PER\n\n" for w in words
        )
        (conll / name).write_text("-DOCSTART- -X- -X- O\n\n" + text)
    code, _, err = finetune_cli(
        capsys, tiny_pretrained, "ner", conll, tmp_path / "ner", "--epochs", "8", *FAST_FLAGS
    )
    assert code == 0, err
    results = json.loads((tmp_path / "ner" / "results.json").read_text())
    assert results["metrics"]["f1"] > 50.0  # two always-tagged names are learnable in 8 epochs
    row = json.loads(
        (tmp_path / "ner" / "seed_0" / "predictions.jsonl").read_text().splitlines()[0]
    )
    assert len(row["prediction"]) == len(row["label"]) == 3
    # CoNLL-2003's test file carries tags: it is scored as dev is, with no submission file.
    (conll / "test.txt").write_text("-DOCSTART- -X- -X- O\n\n" + text[: text.index("\n\n") + 2])
    code, _, err = evaluate_cli(capsys, tmp_path / "ner", conll, "--split", "test")
    assert code == 0, err
    scored = json.loads((tmp_path / "ner" / "seed_0" / "eval-test" / "results.json").read_text())
    assert {"f1", "precision", "recall"} <= set(scored["metrics"])
    assert scored["submission_files"] == [] and scored["examples"] == {"test": 1}
    tagged = (tmp_path / "ner" / "seed_0" / "eval-test" / "predictions.jsonl").read_text()
    assert json.loads(tagged)["label"] == ["B-LOC", "O", "B-PER"]

    squad = tmp_path / "squad"
    squad.mkdir()
    questions = [
        qa("q1", "where was the car ?", "Paris"),
        qa("q2", "who sat on the mat ?", "Mary"),
        qa("q3", "what is money ?", None, impossible=True),
    ]
    squad_file(squad / "train-v2.0.json", questions)
    asked_again = [{**q, "id": f"d{q['id']}", "question": f"so {q['question']}"} for q in questions]
    squad_file(squad / "dev-v2.0.json", asked_again)  # a copy of training would be refused
    out = tmp_path / "qa"
    code, _, err = finetune_cli(
        capsys,
        tiny_pretrained,
        "squad2",
        squad,
        out,
        "--epochs",
        "1",
        "--max-seq-len",
        "32",
        "--doc-stride",
        "8",
        *FAST_FLAGS,
    )
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    assert {"exact", "f1", "best_exact", "best_f1", "HasAns_exact", "NoAns_exact"} <= set(
        results["metrics"]
    )
    # its dev predictions in the official format, scored by `electra score` as the v2.0 script does
    unlabelled = [{**q, "answers": [], "is_impossible": False} for q in questions]
    squad_file(squad / "test-v2.0.json", unlabelled)  # training's questions: predicted, noted
    code, _, err = evaluate_cli(capsys, out, squad, "--split", "test", "--out", tmp_path / "test")
    assert code == 0, err
    submitted = json.loads((tmp_path / "test" / "predictions.json").read_text())
    assert sorted(submitted) == ["q1", "q2", "q3"]
    assert sorted(json.loads((tmp_path / "test" / "null_odds.json").read_text())) == [
        "q1",
        "q2",
        "q3",
    ]
    code, _, err = evaluate_cli(capsys, out, squad, "--out", tmp_path / "pred")
    assert code == 0, err
    rows = [
        json.loads(line)
        for line in (tmp_path / "pred" / "predictions.jsonl").read_text().splitlines()
    ]
    official = {r["id"]: r["prediction"] for r in rows}
    (tmp_path / "predictions.json").write_text(json.dumps(official))
    code, stdout, err = run_cli(
        capsys,
        "score",
        "--task",
        "squad2",
        "--data",
        squad / "dev-v2.0.json",
        "--predictions",
        tmp_path / "predictions.json",
    )
    assert code == 0, err
    scores = json.loads(stdout)
    assert scores["total"] == 3 and scores["NoAns_total"] == 1


def test_pretrained_weights_load_and_random_init_does_not(tmp_path, capsys, tiny_pretrained):
    data = sst_dir(tmp_path / "sst")
    source = load_file(tiny_pretrained / "model.safetensors")
    for flag, same in (("--no-random-init", True), ("--random-init", False)):
        out = tmp_path / flag
        code, _, err = finetune_cli(
            capsys,
            tiny_pretrained,
            "sst2",
            data,
            out,
            "--epochs",
            "1",
            "--lr",
            "1e-12",
            "--batch-size",
            "8",
            flag,
        )
        assert code == 0, err
        tuned = load_file(out / "seed_0" / "model.safetensors")
        key = "electra.encoder.layer.1.output.dense.weight"
        # at a negligible LR the encoder keeps the weights it started from
        assert torch.allclose(tuned[key], source[key], atol=1e-9) == same
        assert json.loads((out / "results.json").read_text())["random_init"] == (not same)


def test_an_hf_folder_fine_tunes(tmp_path, capsys, task_tokenizer):
    transformers = pytest.importorskip("transformers")
    from electra.data.tokenizer import save_tokenizer

    fields = asdict(tiny_model_config(vocab_size=task_tokenizer.get_vocab_size()))
    cfg = transformers.ElectraConfig(**fields)
    model = transformers.ElectraForPreTraining(cfg)
    model.save_pretrained(tmp_path / "hf")
    save_tokenizer(task_tokenizer, tmp_path / "hf", lowercase=True)
    code, _, err = finetune_cli(
        capsys,
        tmp_path / "hf",
        "sst2",
        sst_dir(tmp_path / "sst"),
        tmp_path / "ft",
        "--epochs",
        "1",
        *FAST_FLAGS,
    )
    assert code == 0, err
    ours = load_file(tmp_path / "ft" / "seed_0" / "model.safetensors")
    assert ours["electra.embeddings.word_embeddings.weight"].shape == (
        task_tokenizer.get_vocab_size(),
        16,
    )


# --- bad input ------------------------------------------------------------------------------------


def test_bad_task_files_get_one_line_errors_naming_file_and_line(tmp_path, capsys, tiny_pretrained):
    def finetune(task, data, out="out"):
        return finetune_cli(capsys, tiny_pretrained, task, data, tmp_path / out, *FAST_FLAGS)

    good = sst_dir(tmp_path / "sst")
    code, _, err = finetune("rte", good)  # an SST-2 folder given as RTE: the header is wrong
    assert_one_line_error(code, err, "train.tsv", "line 1", "'sentence1'", "rte train")
    bad = sst_dir(tmp_path / "bad-label")
    text = (bad / "train.tsv").read_text().splitlines()
    text[3] = text[3].rsplit("\t", 1)[0] + "\tpositive"
    (bad / "train.tsv").write_text("\n".join(text) + "\n")
    code, _, err = finetune("sst2", bad)
    assert_one_line_error(code, err, "train.tsv, line 4", "unknown label 'positive'")
    short = sst_dir(tmp_path / "short")
    (short / "dev.tsv").write_text("sentence\tlabel\na cat sat\n")
    code, _, err = finetune("sst2", short)
    assert_one_line_error(code, err, "dev.tsv, line 2", "expected at least 2")
    empty = sst_dir(tmp_path / "empty")
    (empty / "train.tsv").write_text("")
    code, _, err = finetune("sst2", empty)
    assert_one_line_error(code, err, "train.tsv is empty")
    missing = sst_dir(tmp_path / "missing")
    (missing / "dev.tsv").unlink()
    code, _, err = finetune("sst2", missing)
    assert_one_line_error(code, err, "no dev split for sst2", "dev.tsv")
    code, _, err = finetune("sst3", good)
    assert_one_line_error(code, err, "unknown task 'sst3'", "did you mean sst2")
    conll = tmp_path / "conll"
    conll.mkdir()
    (conll / "train.txt").write_text("Paris NNP B-NP B-LOC\nMary NNP B-NP B-PERSON\n")
    code, _, err = finetune("ner", conll)
    assert_one_line_error(code, err, "train.txt, line 2", "unknown tag 'B-PERSON'")
    assert not any(p.name.startswith("out") for p in tmp_path.iterdir())  # nothing half-written


def test_cuda_graph_off_a_gpu_is_refused_before_anything_is_written(
    tmp_path, capsys, tiny_pretrained
):
    out = tmp_path / "ft"
    data = sst_dir(tmp_path / "sst")
    code, _, err = finetune_cli(
        capsys, tiny_pretrained, "sst2", data, out, "--cuda-graph", "--device", "cpu", *FAST_FLAGS
    )
    assert_one_line_error(code, err, "cuda_graph captures the step on a CUDA GPU", "on cpu")
    assert not out.exists() and not (tmp_path / ".ft.tmp").exists()
