"""`electra probe` (issue 50): a linear probe on frozen features of tiny model folders of two
families, on own classification and tagging files: results.json's structure and the table, the
encoder left untouched and the probe deterministic for its seeds, random weights' features unlike
the model's, a separable task scored far above the trivial baseline, a rerun kept, and each bad
input one error line with nothing written."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

import electra
from electra.folders.model_folder import save_pretrained
from electra.model.modernbert.modeling import ModernBertForPreTraining
from electra.probing.features import load_frozen, pooled_features, random_encoder
from electra.tasks import get_task

from ..conftest import (
    assert_one_line_error,
    run_cli,
    sentence,
    tiny_model_config,
    tiny_modern_config,
    varied_sst_dir,
    write_csv,
)

pytestmark = pytest.mark.numeric

ENTITIES = {"paris": "B-LOC", "france": "B-LOC", "john": "B-PER", "mary": "B-PER"}


def own_classification(root, n_train=80, n_dev=40, labels=None):
    """Own CSV files whose label is whether the text holds "good" (else "bad"): separable by a
    word, so that a linear probe on almost any features finds it."""
    rows = [
        [f"{sentence(i, 1 + i % 6)} {'good' if i % 2 else 'bad'}", i % 2]
        for i in range(n_train + n_dev)
    ]
    if labels is not None:
        rows = [[text, labels] for text, _ in rows]
    write_csv(root / "train.csv", ["text", "label"], rows[:n_train])
    write_csv(root / "dev.csv", ["text", "label"], rows[n_train:])
    return root


def own_tagging(root, n_train=60, n_dev=20):
    """Own JSONL tagging files: places and people among filler words."""
    names = list(ENTITIES)

    def line(i):
        words = sentence(i, 3 + i % 4).split()
        words.insert(i % len(words), names[i % len(names)])
        words.append(names[(i * 3 + 1) % len(names)])
        return {"tokens": words, "tags": [ENTITIES.get(w, "O") for w in words]}

    root.mkdir(parents=True, exist_ok=True)
    for name, span in (("train", range(n_train)), ("dev", range(n_train, n_train + n_dev))):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(line(i)) + "\n" for i in span))
    return root


def probe_cli(capsys, model, task, data, out, *extra):
    return run_cli(
        capsys, "probe", "--model", model, "--task", task, "--data", data, "--out", out, *extra
    )


def folder_digest(folder) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def test_results_json_and_the_table(tiny_pretrained, tmp_path, capsys):
    data = own_classification(tmp_path / "data")
    code, out, err = probe_cli(capsys, tiny_pretrained, "classification", data, tmp_path / "p")
    assert code == 0, err
    results = json.loads((tmp_path / "p" / "results.json").read_text())
    assert results["task"] == "classification" and results["main_metric"] == "accuracy"
    assert results["model"] == str(tiny_pretrained)
    assert results["recipe"] == {
        "seeds": 3,
        "train_examples": 2000,
        "max_seq_len": 128,
        "c": 1.0,
        "max_iter": 1000,
        "random_weights": True,
    }
    assert results["examples"] == {
        "unit": "examples",
        "train": 80,
        "probed": 80,
        "dev": 40,
        "dev_dropped_overlap": 0,
    }
    for side in ("features", "random_weights"):
        assert set(results[side]) == {"mean", "first"}
        for kind in ("mean", "first"):
            s = results[side][kind]
            assert len(s["per_seed"]) == 3 and len(s["metrics"]) == 3
            assert s["min"] <= s["median"] <= s["max"]
            assert s["per_seed"] == [m["accuracy"] for m in s["metrics"]]
            assert {"accuracy", "f1"} <= set(s["metrics"][0])  # all the task's metrics, 0-100
            assert 0 <= s["median"] <= 100
    assert results["baseline"]["metrics"]["accuracy"] == 50.0
    assert results["gain"] == {
        k: results["features"][k]["median"] - results["random_weights"][k]["median"]
        for k in ("mean", "first")
    }
    lines = out.splitlines()
    assert lines[0].startswith("classification dev accuracy, median [min, max] over 3 seeds")
    assert "mean-pooled" in lines[1] and "first-token" in lines[1]
    assert lines[2].startswith("pretrained") and lines[3].startswith("random weights")
    assert lines[4].split() == ["trivial", "baseline", "50.00", "50.00"]
    assert "pretrained features" in lines[5] and "random weights" in lines[5]
    med = results["features"]["mean"]
    assert f"{med['median']:.2f} [{med['min']:.2f}, {med['max']:.2f}]" in lines[2]


def test_a_separable_task_scores_far_above_the_trivial_baseline(tiny_pretrained, tmp_path):
    """The label is a word of the text: the probe on the model's features finds it."""
    data = own_classification(tmp_path / "data")
    results = electra.probe(tiny_pretrained, "classification", data, tmp_path / "p", seeds=1)
    bar = results["baseline"]["metrics"]["accuracy"]
    assert results["features"]["mean"]["median"] >= bar + 30
    assert results["features"]["first"]["median"] >= bar + 30


def test_features_are_frozen_and_the_probe_deterministic(tiny_pretrained, tmp_path):
    data = own_classification(tmp_path / "data")
    before = folder_digest(tiny_pretrained)
    first = electra.probe(tiny_pretrained, "classification", data, tmp_path / "a", seeds=2)
    again = electra.probe(tiny_pretrained, "classification", data, tmp_path / "b", seeds=2)
    assert folder_digest(tiny_pretrained) == before  # the model folder is untouched
    for side in ("features", "random_weights", "baseline", "gain"):
        assert first[side] == again[side], side
    # The encoder itself is in eval mode and takes no gradient.
    frozen = load_frozen(tiny_pretrained)
    assert not frozen.encoder.training
    assert not any(p.requires_grad for p in frozen.encoder.parameters())


def test_random_weights_differ_from_the_model_s_and_repeat_per_seed(
    tiny_pretrained, tmp_path, task_tokenizer
):
    """tiny_pretrained is ElectraForPreTraining(cfg) under torch.manual_seed(0): the random
    baseline of seed 0 is that very network (the family's own init), every other seed's differs."""
    frozen = load_frozen(tiny_pretrained)
    task = get_task("sst2")
    examples = task.read(_sst_file(tmp_path), "dev")
    encoded = task.encode(examples, task_tokenizer, 32, training=False)
    ours = pooled_features(frozen.encoder, encoded)
    random0 = pooled_features(random_encoder(frozen.cfg, 0), encoded)
    random1 = pooled_features(random_encoder(frozen.cfg, 1), encoded)
    random1_again = pooled_features(random_encoder(frozen.cfg, 1), encoded)
    for kind in ("mean", "first"):
        assert ours[kind].shape == (len(examples), frozen.cfg.hidden_size)
        assert (random0[kind] == ours[kind]).all()
        assert (random1[kind] == random1_again[kind]).all()
        assert not torch.allclose(torch.from_numpy(ours[kind]), torch.from_numpy(random1[kind]))
    # The mean pools over the attention mask: padding does not move it.
    wide = task.encode(examples, task_tokenizer, 64, training=False)
    assert torch.allclose(
        torch.from_numpy(pooled_features(frozen.encoder, wide)["mean"]),
        torch.from_numpy(ours["mean"]),
        atol=1e-5,
    )


def _sst_file(tmp_path):
    rows = [["sentence", "label"]] + [[sentence(i, 2 + i % 5), i % 2] for i in range(10)]
    path = tmp_path / "sst" / "dev.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join("\t".join(map(str, r)) for r in rows) + "\n")
    return path


def test_tagging_probes_each_word_at_its_first_sub_token(tiny_pretrained, tmp_path, capsys):
    data = own_tagging(tmp_path / "data")
    code, out, err = probe_cli(
        capsys, tiny_pretrained, "tagging", data, tmp_path / "p", "--seeds", "2"
    )
    assert code == 0, err
    results = json.loads((tmp_path / "p" / "results.json").read_text())
    assert results["kind"] == "tagging" and results["main_metric"] == "f1"
    assert set(results["features"]) == set(results["random_weights"]) == {"token"}
    assert results["recipe"]["train_examples"] == 1000  # sentences
    assert results["examples"]["unit"] == "sentences" and results["examples"]["probed"] == 60
    # Entities are words here: the probe finds them, the trivial baseline (all O) finds none.
    assert results["baseline"]["metrics"]["f1"] == 0.0
    assert results["features"]["token"]["median"] > 50
    assert "token" in out.splitlines()[1]


def test_a_rerun_is_kept_and_another_recipe_is_refused(tiny_pretrained, tmp_path, capsys):
    data = own_classification(tmp_path / "data", n_train=40, n_dev=20)
    args = ("--seeds", "1", "--no-random")
    code, first, _ = probe_cli(
        capsys, tiny_pretrained, "classification", data, tmp_path / "p", *args
    )
    assert code == 0
    saved = (tmp_path / "p" / "results.json").read_text()
    code, again, err = probe_cli(
        capsys, tiny_pretrained, "classification", data, tmp_path / "p", *args
    )
    assert code == 0 and again == first and "holds this probe already" in err
    assert (tmp_path / "p" / "results.json").read_text() == saved
    assert json.loads(saved)["random_weights"] is None and json.loads(saved)["gain"] is None
    code, _, err = probe_cli(
        capsys, tiny_pretrained, "classification", data, tmp_path / "p", "--seeds", "2"
    )
    assert code == 2 and "--overwrite" in err
    code, _, err = probe_cli(
        capsys,
        tiny_pretrained,
        "classification",
        data,
        tmp_path / "p",
        "--seeds",
        "2",
        "--no-random",
        "--overwrite",
    )
    assert code == 0, err
    assert json.loads((tmp_path / "p" / "results.json").read_text())["recipe"]["seeds"] == 2


def test_dev_rows_seen_in_training_are_dropped_and_counted(tiny_pretrained, tmp_path, capsys):
    data = own_classification(tmp_path / "data", n_train=40, n_dev=20)
    train_rows = (data / "train.csv").read_text().splitlines()
    with open(data / "dev.csv", "a") as f:
        f.write("\n".join(train_rows[1:4]) + "\n")  # three training rows in dev
    results = electra.probe(
        tiny_pretrained, "classification", data, tmp_path / "p", seeds=1, random_weights=False
    )
    assert results["examples"]["dev"] == 20
    assert results["examples"]["dev_dropped_overlap"] == 3


def test_a_model_folder_of_another_family_probes_too(task_tokenizer, tmp_path):
    cfg = tiny_modern_config(
        vocab_size=task_tokenizer.get_vocab_size(),
        max_position_embeddings=128,
        pad_token_id=task_tokenizer.token_to_id("[PAD]"),
    )
    torch.manual_seed(0)
    save_pretrained(ModernBertForPreTraining(cfg), tmp_path / "modern", task_tokenizer)
    data = own_classification(tmp_path / "data")
    results = electra.probe(tmp_path / "modern", "classification", data, tmp_path / "p", seeds=1)
    assert set(results["features"]) == set(results["random_weights"]) == {"mean", "first"}
    assert results["features"]["mean"]["median"] >= results["baseline"]["metrics"]["accuracy"] + 30


def test_one_label_is_one_error_line_and_nothing_written(tiny_pretrained, tmp_path, capsys):
    data = own_classification(tmp_path / "data", labels="yes")
    code, out, err = probe_cli(capsys, tiny_pretrained, "classification", data, tmp_path / "p")
    assert_one_line_error(
        code, err, "has one label (yes)", str(data / "train.csv"), "a probe needs at least two"
    )
    assert not (tmp_path / "p").exists() and out == ""
    # Tagging too: a training file tagged O throughout.
    tags = own_tagging(tmp_path / "tags")
    lines = [json.loads(line) for line in (tags / "train.jsonl").read_text().splitlines()]
    (tags / "train.jsonl").write_text(
        "".join(json.dumps({**r, "tags": ["O"] * len(r["tokens"])}) + "\n" for r in lines)
    )
    code, _, err = probe_cli(capsys, tiny_pretrained, "tagging", tags, tmp_path / "p")
    assert_one_line_error(code, err, "has one label (O)", "a probe needs at least two")
    assert not (tmp_path / "p").exists()


def test_tasks_a_probe_does_not_take_are_one_error_line(tiny_pretrained, tmp_path, capsys):
    rows = [[sentence(i), i / 10] for i in range(20)]
    write_csv(tmp_path / "r" / "train.csv", ["text", "label"], rows[:10])
    write_csv(tmp_path / "r" / "dev.csv", ["text", "label"], rows[10:])
    code, _, err = probe_cli(capsys, tiny_pretrained, "regression", tmp_path / "r", tmp_path / "p")
    assert_one_line_error(code, err, "regression", "a probe takes", "classification", "tagging")
    code, _, err = probe_cli(capsys, tiny_pretrained, "qa", tmp_path / "r", tmp_path / "p")
    assert_one_line_error(code, err, "a probe takes")
    assert not (tmp_path / "p").exists()


def test_no_dev_split_and_a_foreign_folder_are_one_error_line(tiny_pretrained, tmp_path, capsys):
    data = own_classification(tmp_path / "data")
    train = data / "train.csv"
    code, _, err = probe_cli(capsys, tiny_pretrained, "classification", train, tmp_path / "p")
    assert_one_line_error(code, err, "--dev FILE")
    assert not (tmp_path / "p").exists()
    # A lone training file with its --dev file is read as the two splits.
    code, _, err = run_cli(
        capsys,
        "probe",
        "--model",
        tiny_pretrained,
        "--task",
        "classification",
        "--data",
        train,
        "--dev",
        data / "dev.csv",
        "--out",
        tmp_path / "p",
        "--seeds",
        "1",
        "--no-random",
    )
    assert code == 0, err
    # A folder another command wrote is not replaced, --overwrite or not.
    other = tmp_path / "ft"
    other.mkdir()
    (other / "results.json").write_text(json.dumps({"task": "sst2", "metrics": {}}))
    code, _, err = probe_cli(
        capsys, tiny_pretrained, "classification", data, other, "--seeds", "1", "--overwrite"
    )
    assert_one_line_error(code, err, "not a probe's")
    assert json.loads((other / "results.json").read_text())["task"] == "sst2"


def test_a_generator_folder_and_a_glue_task(task_tokenizer, tmp_path, capsys):
    """A run's generator (a masked LM, narrower than its discriminator) probes as any encoder;
    SST-2's files read as fine-tuning reads them."""
    from electra.model.electra.modeling import ElectraForMaskedLM

    cfg = tiny_model_config(
        vocab_size=task_tokenizer.get_vocab_size(), max_position_embeddings=128, hidden_size=16
    )
    torch.manual_seed(3)
    save_pretrained(ElectraForMaskedLM(cfg), tmp_path / "generator", task_tokenizer)
    data = varied_sst_dir(tmp_path / "sst")
    code, out, err = probe_cli(
        capsys, tmp_path / "generator", "sst2", data, tmp_path / "p", "--seeds", "1"
    )
    assert code == 0, err
    results = json.loads((tmp_path / "p" / "results.json").read_text())
    assert results["task"] == "sst2" and results["main_metric"] == "accuracy"
    assert results["examples"]["train"] == 32 and results["examples"]["dev"] == 8
    assert out.splitlines()[0].startswith("sst2 dev accuracy")


def test_features_of_a_hugging_face_folder_are_transformers_states(task_tokenizer, tmp_path):
    """A `transformers` ElectraModel folder: the first-token feature is its last hidden state at
    position 0, and the mean its states averaged over the mask, to fp32 rounding."""
    transformers = pytest.importorskip("transformers")
    from dataclasses import asdict

    from electra.data.tokenizer import save_tokenizer

    cfg = tiny_model_config(vocab_size=task_tokenizer.get_vocab_size(), max_position_embeddings=128)
    torch.manual_seed(0)
    hf = transformers.ElectraModel(transformers.ElectraConfig(**asdict(cfg))).eval()
    hf.save_pretrained(tmp_path / "hf")
    save_tokenizer(task_tokenizer, tmp_path / "hf", lowercase=True)
    frozen = load_frozen(tmp_path / "hf")
    task = get_task("sst2")
    examples = task.read(_sst_file(tmp_path), "dev")
    encoded = task.encode(examples, task_tokenizer, 32, training=False)
    ours = pooled_features(frozen.encoder, encoded)
    t = encoded.tensors
    with torch.no_grad():
        states = hf(
            input_ids=t["input_ids"],
            token_type_ids=t["token_type_ids"],
            attention_mask=t["attention_mask"],
        ).last_hidden_state
    mask = t["attention_mask"].unsqueeze(-1).float()
    mean = (states * mask).sum(1) / mask.sum(1)
    assert torch.allclose(torch.from_numpy(ours["first"]), states[:, 0], atol=1e-5)
    assert torch.allclose(torch.from_numpy(ours["mean"]), mean, atol=1e-5)


def test_a_length_past_the_model_s_positions_is_refused_before_writing(
    tiny_pretrained, tmp_path, capsys
):
    data = own_classification(tmp_path / "data")
    code, _, err = probe_cli(
        capsys, tiny_pretrained, "classification", data, tmp_path / "p", "--max-seq-len", "1000"
    )
    assert_one_line_error(code, err, "--max-seq-len 128 or less")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
