"""`electra experiment`: arms at equal training FLOPs, fine-tuned checkpoints, tables, plots, resume."""

from __future__ import annotations

import json

import pytest

from electra.cli.main import main
from electra.data.store import PretrainingData
from electra.errors import ElectraError
from electra.objectives.flops import official_train_flops, train_flops
from electra.recipes import experiment
from electra.recipes.experiment import Arm, Plan, arm_config, parse_arm, resolve

from .conftest import TINY_OVERRIDES, shared_data


def test_arms_parse():
    assert parse_arm("electra15") == Arm("electra15", {"objective.name": "electra15"})
    arm = parse_arm("bert-80-10-10:objective.name=mlm,objective.mask_frac=0.8")
    assert arm.label == "bert-80-10-10"
    assert arm.overrides == {"objective.name": "mlm", "objective.mask_frac": "0.8"}
    with pytest.raises(ElectraError, match="a bare arm must be an objective"):
        parse_arm("bert")
    with pytest.raises(ElectraError, match="is not section.field=value"):
        parse_arm("x:lr=1")


def _plan(data, glue, **kw):
    fields = dict(
        preset="tiny",
        data=str(data),
        glue=str(glue),
        arms=[parse_arm("electra"), parse_arm("mlm"), parse_arm("two_stage")],
        tasks=["rte"],
        seeds=1,
        steps=20,
        pretrain_set=TINY_OVERRIDES,
    )
    return Plan(**{**fields, **kw})


def test_arms_get_the_same_training_flops(wikitext_data):
    glue = shared_data("glue")
    two_stage = "two_stage:objective.name=two_stage,objective.sharing=none,"
    two_stage += "objective.generator_hidden_fraction=1"
    plan = _plan(wikitext_data, glue, arms=[parse_arm("electra"), parse_arm("mlm")])
    plan.arms.append(parse_arm(two_stage))
    plan.points = 2
    data = PretrainingData(str(wikitext_data))
    resolved = resolve(plan, data)
    budget = resolved["budget"]
    assert budget == official_train_flops(arm_config(plan, plan.arms[0], 20, data))
    for arm in plan.arms:
        info = resolved["arms"][arm.label]
        flops = lambda s, a=arm: official_train_flops(arm_config(plan, a, s, data))  # noqa: E731
        assert flops(info["steps"]) <= budget < flops(info["steps"] + 1)  # the most that fit
        half = round(info["steps"] / 2)
        assert list(info["points"]) == [str(half), str(info["steps"])]
    steps = {label: info["steps"] for label, info in resolved["arms"].items()}
    assert steps["electra"] == 20 and steps["mlm"] > 20  # BERT costs less per step
    cfg = arm_config(plan, plan.arms[2], steps["two_stage"], data)
    assert cfg.objective.two_stage_steps == steps["two_stage"] // 2  # the paper's n + n
    bare = arm_config(plan, parse_arm("two_stage"), 20, data).objective  # as `pretrain` fills it
    assert (bare.sharing, bare.generator_hidden_fraction, bare.two_stage_steps) == ("none", 1, 10)
    shared = parse_arm("shared:objective.name=two_stage,objective.sharing=embeddings")
    bad = _plan(wikitext_data, glue, arms=[shared])  # a setting the arm gives is kept
    with pytest.raises(ElectraError, match="objective.sharing=embeddings is not available"):
        resolve(bad, data)  # refused before anything runs


def test_modern_arms_are_matched_in_the_model_convention(wikitext_data):
    """The official convention has no count for the modern family: an experiment with a modern
    arm budgets every arm in the model convention, and says so in experiment.json."""
    modern = "modern:model.arch=modernbert"
    both = {k: v for k, v in TINY_OVERRIDES.items() if k != "model.embedding_size"}
    plan = _plan(wikitext_data, shared_data("glue"), arms=[parse_arm("electra")], pretrain_set=both)
    plan.arms.append(parse_arm(modern))
    data = PretrainingData(str(wikitext_data))
    resolved = resolve(plan, data)
    assert resolved["convention"] == "model"
    budget = resolved["budget"]
    assert budget == train_flops(arm_config(plan, plan.arms[0], 20, data), "model")
    info = resolved["arms"]["modern"]
    flops = lambda s: train_flops(arm_config(plan, plan.arms[1], s, data), "model")  # noqa: E731
    assert flops(info["steps"]) <= budget < flops(info["steps"] + 1)
    assert "convention" not in resolve(_plan(wikitext_data, shared_data("glue")), data)


def test_experiment_end_to_end_and_resume(wikitext_data, tmp_path, monkeypatch, capsys):
    glue = shared_data("glue")
    out = tmp_path / "xp"
    args = ["experiment", "--data", str(wikitext_data), "--glue", str(glue), "--out", str(out)]
    args += ["--arm", "electra", "--arm", "mlm", "--steps", "12", "--points", "2"]
    args += ["--tasks", "rte", "--seeds", "1", "--pretrain-set"]
    args += [f"{k}={v}" for k, v in TINY_OVERRIDES.items()]
    args += ["--finetune-set", "max_train_examples=32", "epochs=1"]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "| electra | electra | 12 |" in table and "| mlm | mlm |" in table
    results = json.loads((out / "results.json").read_text())
    for label in ("electra", "mlm"):
        rows = results["arms"][label]
        assert len(rows) == 2 and rows[0]["train_flops"] < rows[1]["train_flops"]
        assert all(0 <= r["glue"] <= 100 and set(r["tasks"]) == {"rte"} for r in rows)
    assert (out / "glue_vs_flops.png").stat().st_size > 0 and (out / "losses.png").is_file()
    first = out / "arms" / "mlm" / f"step_{results['arms']['mlm'][0]['step']}"
    summary = json.loads((first / "finetune" / "rte" / "summary.json").read_text())
    assert summary["model"] == str(first / "mlm")  # BERT's network is the one fine-tuned
    ft = json.loads((first / "finetune" / "rte" / "results.json").read_text())
    assert summary["baseline"] == ft["baseline"]["metrics"]["accuracy"] > 0  # the majority class
    assert summary["seeds_not_beating_baseline"] == ft["seeds_not_beating_baseline"]

    # A rerun finds everything done: no pretraining, no fine-tuning.
    def refuse(*a, **k):
        raise AssertionError("redone")

    monkeypatch.setattr(experiment, "pretrain", refuse)
    monkeypatch.setattr("electra.finetuning.run.finetune", refuse)
    assert main(args) == 0
    capsys.readouterr()
    # Another plan into the same folder is refused in one line.
    assert main([*args[:-2], "max_train_examples=64", "epochs=1"]) == 2
    assert "holds another experiment" in capsys.readouterr().err


def test_an_arm_runs_in_one_process_at_a_time(tmp_path):
    from electra.engine.runlock import RunLock

    mine = RunLock(tmp_path / "electra")
    assert mine.try_acquire()
    with mine:  # held already: entering keeps it
        assert not RunLock(tmp_path / "electra").try_acquire()  # a second worker moves on
    again, stale = RunLock(tmp_path / "electra"), RunLock(tmp_path / "mlm")
    assert again.try_acquire()  # released on leaving
    (tmp_path / "mlm").mkdir()
    (tmp_path / "mlm" / ".lock").write_text("pid 999999999")  # left by a process that died
    assert stale.try_acquire()
    again.release()
    stale.release()
