"""`electra experiment`: arms at equal training FLOPs, fine-tuned checkpoints, tables, plots, resume."""

from __future__ import annotations

import json

import pytest

from electra.cli.main import main
from electra.data.store import PretrainingData
from electra.engine.tracking import read_metrics
from electra.errors import ElectraError
from electra.objectives.flops import official_train_flops, train_flops
from electra.recipes import experiment, experiment_plots
from electra.recipes.experiment import Arm, Plan, arm_config, parse_arm, resolve
from tests.engine.test_resolve_run import count_data_opens

from ..conftest import (
    TINY_OVERRIDES,
    assert_one_line_error,
    glue_rows,
    run_cli,
    shared_data,
    write_csv,
)


def test_arms_parse():
    assert parse_arm("electra15") == Arm("electra15", {"objective.name": "electra15"})
    arm = parse_arm("bert-80-10-10:objective.name=mlm,objective.mask_frac=0.8")
    assert arm.label == "bert-80-10-10"
    assert arm.overrides == {"objective.name": "mlm", "objective.mask_frac": "0.8"}
    with pytest.raises(ElectraError, match="a bare arm must be an objective"):
        parse_arm("bert")
    with pytest.raises(ElectraError, match="is not section.field=value"):
        parse_arm("x:lr=1")
    arm = parse_arm("modern-mlm:preset=modern-tiny,objective.name=mlm")  # its own preset
    assert arm.overrides == {"preset": "modern-tiny", "objective.name": "mlm"}


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


# The sizes both families have: ModernBERT has no embedding_size (ELECTRA arms take it in the arm).
SHARED = {k: v for k, v in TINY_OVERRIDES.items() if k != "model.embedding_size"}
ELECTRA_RTD = "electra-rtd:preset=tiny,model.embedding_size=16"
MODERN_MLM = "modern-mlm:preset=modern-tiny,objective.name=mlm"


def test_arms_cross_architecture_and_objective(wikitext_data):
    """Arms of either family and either objective (each from its own preset) are budgeted in one
    convention, each taking the steps its cost per step allows; a setting that does not fit an
    arm is one line naming the arm and the setting."""
    arms = [
        ELECTRA_RTD,
        MODERN_MLM,
        "modern-rtd:preset=modern-tiny",
        "electra-mlm:objective.name=mlm",
    ]
    plan = _plan(wikitext_data, shared_data("glue"), arms=list(map(parse_arm, arms)))
    plan.pretrain_set = SHARED
    data = PretrainingData(str(wikitext_data))
    resolved = resolve(plan, data)
    assert resolved["convention"] == "model"
    budget, info = resolved["budget"], resolved["arms"]
    for arm in plan.arms:
        cfg = arm_config(plan, arm, 1, data)
        per_step = train_flops(cfg, "model")
        steps = info[arm.label]["steps"]
        # steps ∝ 1 / cost per step: the most whole steps within the budget
        assert steps * per_step <= budget * (1 + 1e-12) < (steps + 1) * per_step
        assert (info[arm.label]["arch"], info[arm.label]["objective"]) == (
            cfg.model.arch,
            cfg.objective.name,
        )
    assert [info[a]["arch"] for a in ("electra-rtd", "modern-mlm", "modern-rtd")] == [
        "electra",
        "modernbert",
        "modernbert",
    ]
    assert info["modern-mlm"]["steps"] > info["modern-rtd"]["steps"]  # one network, no generator
    modern = arm_config(plan, plan.arms[2], 1, data)
    assert (modern.model.hidden_size, modern.objective.generator_hidden_fraction) == (32, 1.0)
    assert arm_config(plan, plan.arms[0], 1, data).model.embedding_size == 16

    plan.pretrain_set = TINY_OVERRIDES  # model.embedding_size for the modern arms too
    with pytest.raises(ElectraError) as e:
        resolve(plan, data)
    assert "--pretrain-set model.embedding_size=16" in str(e.value)
    assert "arm modern-mlm (model.arch=modernbert)" in str(e.value)
    plan.pretrain_set = SHARED
    plan.arms = [parse_arm("narrow:preset=modern-tiny,objective.generator_hidden_fraction=0.5")]
    with pytest.raises(ElectraError, match="^arm narrow: objective.sharing=embeddings with"):
        resolve(plan, data)
    plan.arms = [parse_arm("typo:preset=modern-tiyn")]
    with pytest.raises(ElectraError, match="^arm typo: unknown preset 'modern-tiyn'"):
        resolve(plan, data)


def test_an_experiment_across_architecture_and_objective(
    wikitext_data, tmp_path, capsys, monkeypatch
):
    """ELECTRA-family RTD against modern-family MLM, on a task on the user's own files: each
    arm's checkpoint exports and fine-tunes (the discriminator, BERT's one network), and the
    table names each arm with its architecture. Every FLOP figure printed, logged and plotted
    per arm is in the budget's (model) convention; runs shorter than log_every still plot."""
    rows = [
        [r["sentence"], ("negative", "positive")[int(r["label"])]]
        for r in glue_rows("SST-2", "train", 24)
    ]
    task = tmp_path / "sst"
    write_csv(task / "train.csv", ["text", "label"], rows)
    dev = [
        [r["sentence"], ("negative", "positive")[int(r["label"])]]
        for r in glue_rows("SST-2", "dev", 8)
    ]
    write_csv(task / "dev.csv", ["text", "label"], dev)  # a training row there is refused
    out = tmp_path / "xp"
    args = ["experiment", "--data", wikitext_data, "--out", out, "--arm", ELECTRA_RTD]
    args += ["--arm", MODERN_MLM, "--steps", "6", "--seeds", "2"]
    args += ["--task", "classification", "--task-data", task]
    short = {**SHARED, "train.log_every": "100"}  # longer than either run
    args += ["--pretrain-set", *[f"{k}={v}" for k, v in short.items()]]
    args += ["--finetune-set", "epochs=1", "max_seq_len=32", "device=cpu"]
    figures = _figures(monkeypatch)
    opens = count_data_opens(monkeypatch)
    code, table, err = run_cli(capsys, *args)
    assert code == 0, err
    # The data folder is opened once, and its tokenizer fingerprinted once, for the whole
    # experiment: pricing every arm, and training each.
    assert opens == {"opened": 1, "fingerprinted": 1}
    plan = json.loads((out / "experiment.json").read_text())
    steps = {label: arm["steps"] for label, arm in plan["arms"].items()}
    assert steps["electra-rtd"] == 6  # the budget; the other arm's steps are what it buys
    assert all(arm["train_flops"] <= plan["budget"] for arm in plan["arms"].values())
    assert "| electra-rtd | electra | electra | 6 |" in table
    assert f"| modern-mlm | modernbert | mlm | {steps['modern-mlm']} |" in table
    results = json.loads((out / "results.json").read_text())
    for label, network in (("electra-rtd", "discriminator"), ("modern-mlm", "mlm")):
        (row,) = results["arms"][label]
        scores = row["tasks"]["classification"]
        assert len(scores["per_seed"]) == 2 and 0 <= row["glue"] <= 100
        assert scores["model"].endswith(f"step_{steps[label]}/{network}")
        marked = _table(table.splitlines())[label]["classification"].endswith(" †")
        assert marked == (scores["median"] <= scores["baseline"])
    _one_convention(plan, err, out, figures)
    # an arm naming a setting its family lacks: one line, nothing written
    bad = [*args[:6], "modern-rtd:preset=modern-tiny,model.embedding_size=16", *args[7:]]
    code, _, err = run_cli(capsys, *[a if a != out else tmp_path / "xp2" for a in bad])
    assert_one_line_error(code, err, "model.embedding_size in arm modern-rtd")
    assert not (tmp_path / "xp2").exists()


def _one_convention(plan: dict, err: str, out, figures: dict) -> None:
    """Each arm's printed, logged and plotted FLOPs are the table's, in the model convention."""
    flops = {label: f"{arm['train_flops']:.3g}" for label, arm in plan["arms"].items()}
    counted = [ln for ln in err.splitlines() if ln.startswith("training FLOPs: ")]
    assert len(counted) == 2 and not any("official counter" in ln for ln in counted)
    electra, modern = counted  # the arms run in order
    assert electra == (
        f"training FLOPs: {flops['electra-rtd']} for 6 steps (the model convention, in which "
        "the experiment counts every arm)"
    )
    assert modern.startswith(f"training FLOPs: {flops['modern-mlm']} for ")
    assert "the official one has no count for this architecture" in modern
    lines = _lines(figures["losses.png"].axes[0])
    for label, arm in plan["arms"].items():
        assert (
            f"experiment: {label} pretrained to step {arm['steps']}/{arm['steps']}, "
            f"{flops[label]} training FLOPs (model convention; " in err
        )
        (row,) = read_metrics(out / "arms" / label / "pretrain")  # log_every > steps: the last
        assert (row["step"], row["train_flops"]) == (arm["steps"], arm["train_flops"])
        key = "disc_loss" if label == "electra-rtd" else "mlm_loss"
        assert lines[f"{label} ({key})"] == ([arm["train_flops"]], "o")  # one point, drawn


def _figures(monkeypatch) -> dict:
    """The figures the experiment saves, by file name, kept for inspection."""
    saved, save = {}, experiment_plots._save

    def keep(fig, path):
        saved[path.name] = fig
        save(fig, path)

    monkeypatch.setattr(experiment_plots, "_save", keep)
    return saved


def _table(lines: list[str]) -> dict[str, dict[str, str]]:
    """results.md's table: {arm: {column: cell}}."""
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines if ln.startswith("| ")]
    header, *body = rows
    return {r[0]: dict(zip(header, r, strict=True)) for r in body}


def _lines(ax) -> dict:
    """An axis's lines by label: (x values, marker)."""
    return {ln.get_label(): (list(ln.get_xdata()), ln.get_marker()) for ln in ax.get_lines()}


def test_the_report_marks_baselines_and_counts_in_one_convention(
    wikitext_data, tmp_path, monkeypatch
):
    """results.md marks a median at or below its baseline and names the baseline under the
    table; losses.png draws every arm on the budget's convention (an ELECTRA arm's log in the
    official one notwithstanding), says which on the axis, and marks the points of short lines."""
    plan = _plan(wikitext_data, shared_data("glue"), arms=[parse_arm(ELECTRA_RTD)], steps=6)
    plan.arms.append(parse_arm(MODERN_MLM))
    plan.pretrain_set = SHARED
    data = PretrainingData(str(wikitext_data))
    resolved = resolve(plan, data)
    assert resolved["convention"] == "model"
    out, info = tmp_path / "xp", resolved["arms"]
    rule = "the training majority class 'not_entailment' (50.4%) for every example"
    for label, median in (("electra-rtd", 52.7), ("modern-mlm", 60.0)):
        steps = info[label]["steps"]
        summary = out / "arms" / label / f"step_{steps}" / "finetune" / "rte" / "summary.json"
        summary.parent.mkdir(parents=True)
        row = {"metric": "accuracy", "median": median, "min": median, "max": median}
        summary.write_text(json.dumps(row | {"baseline": 52.7, "baseline_rule": rule}))
    cfgs = {a.label: arm_config(plan, a, info[a.label]["steps"], data) for a in plan.arms}
    rtd = cfgs["electra-rtd"]
    logged = {  # a run shorter than log_every logs its last step only, here in its own convention
        "electra-rtd": [{"step": 6, "disc_loss": 0.5, "mlm_loss": 9.0}],
        "modern-mlm": [
            {"step": s, "mlm_loss": 9.0 - s / 10} for s in (1, info["modern-mlm"]["steps"])
        ],
    }
    logged["electra-rtd"][0]["train_flops"] = official_train_flops(rtd)
    for label, rows in logged.items():
        run = out / "arms" / label / "pretrain"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    figures = _figures(monkeypatch)
    experiment.write_results(plan, resolved, out)

    table = (out / "results.md").read_text().splitlines()
    cells = {arm: row["rte"] for arm, row in _table(table).items()}
    assert cells == {"electra-rtd": "52.7 (52.7–52.7) †", "modern-mlm": "60.0 (60.0–60.0)"}
    assert table[-1] == f"† At or below the trivial baseline (rte 52.7, by predicting {rule}): " + (
        "no better than one answer for every example (results.json lists the seeds that did not "
        "beat it), so the arm's pretraining gave that task nothing its fine-tuning could use."
    )

    enc, gen = figures["losses.png"].axes
    assert enc.get_xlabel() == gen.get_xlabel() == "pretraining FLOPs (model convention)"
    assert figures["glue_vs_flops.png"].axes[0].get_xlabel() == enc.get_xlabel()
    lines = _lines(enc)
    # the ELECTRA arm's one point, at the table's FLOPs (the model convention), and drawn
    assert lines["electra-rtd (disc_loss)"] == ([info["electra-rtd"]["train_flops"]], "o")
    assert (
        info["electra-rtd"]["train_flops"] == train_flops(rtd, "model") != official_train_flops(rtd)
    )
    modern = [
        train_flops(cfgs["modern-mlm"], "model", steps=s) for s in (1, info["modern-mlm"]["steps"])
    ]
    assert lines["modern-mlm (mlm_loss)"] == (modern, "o")
    assert modern[-1] == info["modern-mlm"]["train_flops"]
    assert _lines(gen) == {"electra-rtd": ([info["electra-rtd"]["train_flops"]], "o")}


def test_a_long_loss_line_is_drawn_bare(tmp_path, monkeypatch):
    """Markers would hide the curve of a line longer than `MARKED_POINTS`."""
    figures = _figures(monkeypatch)
    many = [(float(s), 1.0) for s in range(1, experiment_plots.MARKED_POINTS + 2)]
    experiment_plots.plot_losses(
        {"long": {"key": "mlm_loss", "encoder": many, "generator": []}}, tmp_path, "official"
    )
    (line,) = figures["losses.png"].axes[0].get_lines()
    assert len(line.get_xdata()) == len(many) and line.get_marker() in (None, "None", "")


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
    # Another budget into the same folder is refused in one line.
    other = [*args]
    other[other.index("--steps") + 1] = "13"
    assert main(other) == 2
    assert "holds another experiment" in capsys.readouterr().err
    # Scored another way, the arms are probed without pretraining again (nor fine-tuning).
    assert main([*args, "--score", "probe"]) == 0
    table = capsys.readouterr().out
    assert "Probed frozen" in table and "Fine-tuned" not in table
    rows = [line for line in table.splitlines() if line.startswith("| electra | electra | rte |")]
    assert [r.split("|")[4].strip() for r in rows] == ["mean", "first"]
    probed = json.loads((first / "probe" / "rte" / "summary.json").read_text())
    assert probed["model"] == str(first / "mlm") and probed["metric"] == "accuracy"
    assert set(probed["features"]) == set(probed["random"]) == {"mean", "first"}
    results = json.loads((out / "results.json").read_text())
    assert set(results["arms"]["mlm"][-1]["probes"]) == {"rte"}


def test_a_score_is_kept_only_for_the_settings_it_was_made_with(tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"median": 70.0, "settings": {"seeds": 3}}))
    assert experiment.cached(summary, {"seeds": 3})["median"] == 70.0
    assert experiment.cached(summary, {"seeds": 5}) is None  # scored again
    summary.write_text(json.dumps({"median": 70.0}))  # from before settings were saved
    assert experiment.cached(summary, {"seeds": 5})["median"] == 70.0
    assert experiment.cached(tmp_path / "none.json", {}) is None


def test_a_probed_task_must_be_one_a_probe_takes(tmp_path):
    plan = Plan("tiny", "data", str(tmp_path), [parse_arm("electra")], ["stsb"], score="probe")
    with pytest.raises(ElectraError, match="stsb is regression: a probe takes"):
        experiment.check_task(plan, "stsb")


def test_an_arm_runs_in_one_process_at_a_time(tmp_path):
    from electra.locks import RunLock

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


def test_the_tables_mark_differences_beyond_the_seed_spread_only():
    """▲/▼ where every seed of one side is past every seed of the other (3 a side); an overlap,
    however far apart the medians, is left unmarked."""
    from types import SimpleNamespace

    from electra.recipes.experiment_table import finetune_lines, probe_lines

    def side(*xs):
        return {"median": sorted(xs)[1], "min": min(xs), "max": max(xs), "per_seed": list(xs)}

    arms = [SimpleNamespace(label=x) for x in ("rtd", "mlm", "other")]
    plan = SimpleNamespace(arms=arms, tasks=["sst2"], seeds=3, score="both")
    info = {"objective": "electra", "steps": 10, "train_flops": 1e12}
    resolved = {"arms": {a.label: info for a in arms}}
    random = side(60.0, 61.0, 62.0)
    scores = {
        "rtd": (side(70.0, 71.0, 72.0), side(62.5, 63.0, 64.0)),  # probe: ranges apart
        "mlm": (side(66.0, 67.0, 68.0), side(61.5, 63.0, 64.0)),  # probe: overlapping
        "other": (side(69.0, 71.5, 73.0), side(55.0, 56.0, 57.0)),  # probe: below
    }
    table = {
        label: [
            {
                "step": 10,
                "glue": tuned["median"],
                "tasks": {"sst2": tuned | {"baseline": 50.0}},
                "probes": {"sst2": {"features": {"mean": probed}, "random": {"mean": random}}},
            }
        ]
        for label, (tuned, probed) in scores.items()
    }
    tuned = _table(finetune_lines(plan, resolved, table))
    assert tuned["rtd"]["sst2"] == "71.0 (70.0–72.0)"  # the reference
    assert tuned["mlm"]["sst2"] == "67.0 (66.0–68.0)▼"
    assert tuned["other"]["sst2"] == "71.5 (69.0–73.0)"  # overlaps the first arm's
    probed = probe_lines(plan, resolved, table)
    diffs = {row["arm"]: row["difference"] for row in _table(probed).values()}
    assert diffs == {"rtd": "+2.0▲", "mlm": "+2.0", "other": "-5.0▼"}
    assert any(line.startswith("▲ ▼ Above or below random weights") for line in probed)
