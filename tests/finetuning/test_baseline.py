"""The trivial baseline beside every fine-tuning score: what a constant predictor fitted on train
scores with the task's own metrics, the flags in results.json, and the text the user sees."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from electra.finetuning.baselines import baseline_scores, baseline_warning, judge, summary_lines
from electra.finetuning.results import read_split
from electra.tasks import get_task
from electra.tasks.glue import Example
from electra.tasks.ner import Sentence
from electra.tasks.squad import Question

from ..conftest import FAST_FLAGS, evaluate_cli, finetune_cli, sentence, shared_data, write_tsv


def examples(*labels):
    return [Example(str(i), "a cat", "a dog", label) for i, label in enumerate(labels)]


def test_majority_class_of_train_scores_the_dev_share_of_that_class():
    task = get_task("rte")
    train = examples("entailment", "not_entailment", "entailment", "entailment")
    dev = examples("entailment", "not_entailment", "not_entailment", "entailment", "entailment")
    base = baseline_scores(task, task.baseline(train), {"dev": dev})
    assert base == {
        "rule": "the training majority class 'entailment' (75.0% of train) for every example",
        "prediction": "entailment",
        "metrics": {"accuracy": 60.0},  # 3 of the 5 dev labels
    }


def test_the_majority_comes_from_train_not_dev_and_a_tie_takes_the_first_label():
    task = get_task("sst2")
    tie = task.baseline(examples("1", "0", "1", "0"))
    assert tie["prediction"] == "0"  # the first of the task's labels ("0", "1")
    base = baseline_scores(
        task, task.baseline(examples("1", "1", "0")), {"dev": examples("0", "0", "0", "1")}
    )
    assert base["prediction"] == "1" and base["metrics"] == {"accuracy": 25.0}


def test_mcc_and_f1_of_a_constant_predictor():
    cola = get_task("cola")
    base = baseline_scores(
        cola, cola.baseline(examples("1", "1", "0")), {"dev": examples("0", "1", "1", "1")}
    )
    assert base["metrics"] == {"mcc": 0.0}  # no correlation, whatever the class rates
    mrpc = get_task("mrpc")
    base = baseline_scores(
        mrpc, mrpc.baseline(examples("1", "1", "0")), {"dev": examples("1", "1", "0", "0")}
    )
    # all '1': precision 2/4, recall 2/2, F1 2/3
    assert base["metrics"] == {"accuracy": 50.0, "f1": pytest.approx(200 / 3)}


def test_regression_predicts_the_training_mean_and_gets_no_correlation():
    task = get_task("stsb")
    base = baseline_scores(
        task, task.baseline(examples(1.0, 2.0, 4.5)), {"dev": examples(0.0, 5.0, 2.5)}
    )
    assert base == {
        "rule": "the training mean 2.50 for every pair",
        "prediction": 2.5,
        "metrics": {"spearman": 0.0, "pearson": 0.0},
    }


def test_mnli_baseline_is_named_per_dev_set():
    task = get_task("mnli")
    train = examples("neutral", "entailment", "neutral")
    sets = {
        "matched": examples("neutral", "entailment"),
        "mismatched": examples("neutral", "neutral", "neutral", "contradiction"),
    }
    base = baseline_scores(task, task.baseline(train), sets)
    assert base["metrics"] == {"matched_accuracy": 50.0, "mismatched_accuracy": 75.0}
    assert task.main_metric in base["metrics"]


def test_ner_baseline_tags_no_entity_and_scores_zero():
    task = get_task("ner")
    dev = [Sentence("0", ("Mary", "sat"), ("B-PER", "O")), Sentence("1", ("it", "is"), ("O", "O"))]
    base = baseline_scores(task, task.baseline([]), {"dev": dev})
    assert base["rule"] == "'O' (no entity) for every word"
    assert base["metrics"] == {"f1": 0.0, "precision": 0.0, "recall": 0.0}


def test_squad2_baseline_answers_nothing_and_squad1_has_none():
    task = get_task("squad2")
    dev = [
        Question("q1", "who?", "Mary sat", (("Mary", 0),), False),
        Question("q2", "what?", "Mary sat", (("sat", 5),), False),
        Question("q3", "where?", "Mary sat", (), True),
    ]
    base = baseline_scores(task, task.baseline([]), {"dev": dev})
    assert base["rule"] == "no answer for every question"
    m = base["metrics"]
    assert m["f1"] == m["exact"] == m["best_f1"] == pytest.approx(100 / 3)  # the one unanswerable
    assert (m["HasAns_f1"], m["NoAns_f1"]) == (0.0, 100.0)
    assert not any(k.endswith(("total", "thresh")) for k in m)  # counts are no bar to beat
    assert get_task("squad1").baseline([]) is None
    assert baseline_scores(get_task("squad1"), None, {"dev": dev}) is None


def test_unlabelled_sets_get_no_baseline():
    task = get_task("sst2")
    assert (
        baseline_scores(task, task.baseline(examples("1")), {"test": examples(None, None)}) is None
    )


def test_judge_is_strict_and_spots_a_single_prediction():
    base = {"rule": "r", "prediction": "1", "metrics": {"accuracy": 60.0}}
    same = [{"prediction": "1"}, {"prediction": "1"}]
    mixed = [{"prediction": "1"}, {"prediction": "0"}]
    assert judge("accuracy", base, {"accuracy": 60.0}, same) == {
        "beats_baseline": False,
        "single_prediction": True,
    }
    assert judge("accuracy", base, {"accuracy": 60.1}, mixed)["beats_baseline"] is True
    assert judge("accuracy", None, {"accuracy": 60.0}, mixed)["beats_baseline"] is None
    tags = [{"prediction": ["O", "O"]}, {"prediction": ["O"]}]
    assert judge("f1", None, {}, tags)["single_prediction"] is True
    assert judge("f1", None, {}, [*tags, {"prediction": ["B-PER"]}])["single_prediction"] is False


RTE_BASE = {
    "rule": "the training majority class 'entailment' (50.2% of train) for every example",
    "prediction": "entailment",
    "metrics": {"accuracy": 52.707581227436826},
}


def test_the_summary_and_the_warning_as_the_user_sees_them():
    one = {
        "task": "rte",
        "main_metric": "accuracy",
        "metrics": {"accuracy": 52.707581227436826},
        "baseline": RTE_BASE,
        "seeds_not_beating_baseline": [0],
        "seeds": [0],
    }
    assert summary_lines(one, "dev") == [
        "rte dev accuracy: 52.71 (baseline 52.71, not beaten by seed 0)",
        "baseline: the training majority class 'entailment' (50.2% of train) for every example",
    ]
    three = {
        **one,
        "metrics": {"accuracy": 60.0},
        "spread": {"accuracy": {"min": 52.707581227436826, "max": 63.5, "std": 4.0}},
        "seeds_not_beating_baseline": [0, 2],
        "seeds": [0, 1, 2],
    }
    assert summary_lines(three, "dev")[0] == (
        "rte dev accuracy: 60.00 (min 52.71, max 63.50 over 3 seeds; "
        "baseline 52.71, not beaten by seeds 0, 2)"
    )
    beaten = {**one, "metrics": {"accuracy": 70.0}, "seeds_not_beating_baseline": []}
    assert summary_lines(beaten, "dev")[0] == "rte dev accuracy: 70.00 (baseline 52.71)"
    evaluated = {"task": "rte", "main_metric": "accuracy", "metrics": {"accuracy": 52.7}}
    assert summary_lines({**evaluated, "baseline": RTE_BASE, "beats_baseline": False}, "dev")[
        0
    ] == ("rte dev accuracy: 52.70 (baseline 52.71, not beaten)")
    assert summary_lines({**evaluated, "baseline": None}, "dev") == ["rte dev accuracy: 52.70"]

    result = {"metrics": {"accuracy": 52.707581227436826}, "beats_baseline": False}
    rows = [{"prediction": "entailment"}] * 277
    cfg = SimpleNamespace(lr=1e-4, epochs=10)
    assert baseline_warning(0, "accuracy", RTE_BASE, result, rows, cfg) == (
        "warning: seed 0 does not beat the baseline: dev accuracy 52.71, baseline 52.71 by "
        "predicting the training majority class 'entailment' (50.2% of train) for every example; "
        "every dev prediction is 'entailment'\n"
        "  likely fixes: a longer-pretrained model, another --lr (this run 0.0001) or more "
        "--epochs (this run 10)"
    )
    assert (
        baseline_warning(0, "accuracy", RTE_BASE, {**result, "beats_baseline": True}, rows, cfg)
        is None
    )


def test_rte_dev_baseline_is_the_majority_rate_of_its_277_examples():
    root = shared_data("glue", "RTE")
    task = get_task("rte")
    files = task.resolve(root)
    train = task.read(files["train"]["train"], "train")
    base = baseline_scores(task, task.baseline(train), read_split(task, files, "dev"))
    assert base["prediction"] == "entailment"  # 1249 of the 2490 training labels
    assert base["metrics"]["accuracy"] == pytest.approx(100 * 146 / 277)  # 52.71


def test_a_run_that_predicts_one_class_is_flagged_and_warned(tmp_path, capsys, tiny_pretrained):
    """Train labels all '1' (the collapse RTE shows, made certain): every dev prediction is '1',
    which scores exactly the baseline on a dev set of both classes."""
    rows = [[sentence(i), 1] for i in range(16)]
    write_tsv(tmp_path / "sst" / "train.tsv", [["sentence", "label"], *rows])
    dev = [[sentence(i + 20), i % 2] for i in range(8)]  # rows it did not train on
    write_tsv(tmp_path / "sst" / "dev.tsv", [["sentence", "label"], *dev])
    out = tmp_path / "ft"
    code, stdout, err = finetune_cli(
        capsys, tiny_pretrained, "sst2", tmp_path / "sst", out, "--epochs", "2", *FAST_FLAGS
    )
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    assert results["baseline"] == {
        "rule": "the training majority class '1' (100.0% of train) for every example",
        "prediction": "1",
        "metrics": {"accuracy": 50.0},
    }
    assert results["seeds_not_beating_baseline"] == [0]
    seed = results["per_seed"][0]
    assert (seed["beats_baseline"], seed["single_prediction"]) == (False, True)
    assert "sst2 dev accuracy: 50.00 (baseline 50.00, not beaten by seed 0)" in stdout
    assert "baseline: the training majority class '1' (100.0% of train) for every example" in stdout
    warning = [line for line in err.splitlines() if line.startswith("warning: seed 0")]
    assert warning == [
        "warning: seed 0 does not beat the baseline: dev accuracy 50.00, baseline 50.00 by "
        "predicting the training majority class '1' (100.0% of train) for every example; every "
        "dev prediction is '1'"
    ]
    assert "likely fixes: a longer-pretrained model, another --lr (this run 0.003)" in err
    # evaluate scores the baseline kept with the model, without the training set
    (tmp_path / "sst" / "train.tsv").unlink()
    code, stdout, err = evaluate_cli(capsys, out, tmp_path / "sst")
    assert code == 0, err
    assert "sst2 dev accuracy: 50.00 (baseline 50.00, not beaten)" in stdout
    scored = json.loads((out / "seed_0" / "eval-dev" / "results.json").read_text())
    assert scored["baseline"]["metrics"] == {"accuracy": 50.0}
    assert (scored["beats_baseline"], scored["single_prediction"]) == (False, True)
