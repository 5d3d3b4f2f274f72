"""The Python API (`electra.train_tokenizer`, `prepare`, `pretrain`, `experiment`, `detect`,
`score_text`, `finetune`, `evaluate`, `export`), called from Python and not through `main()`: the
same settings as the commands, resolved the same way, the same outputs, and a light import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

import electra
from electra.cli.main import main
from electra.config import InferenceRuntime, RunConfig, RuntimeConfig, apply_overrides, preset
from electra.engine.runtime import Runtime
from electra.errors import ElectraError
from electra.overrides import with_values
from electra.tasks.finetune_config import FinetuneConfig

from .conftest import TINY_OVERRIDES, WORDS

ROOT = Path(__file__).resolve().parents[1]

# A model of a few thousand parameters: seconds per run (tests/conftest.py's `tiny_cfg`, as flags).
SMALL = {
    **TINY_OVERRIDES,
    "train.device": "cpu",
    "train.steps": "4",
    "train.log_every": "2",
    "train.save_every": "2",
    "objective.name": "two_stage",
}
FAST = {"batch_size": 8, "lr": 3e-3, "progress": False, "device": "cpu", "seeds": 1}


def test_import_electra_loads_no_torch():
    code = (
        "import sys, electra\n"
        "assert 'torch' not in sys.modules, 'import electra loaded torch'\n"
        "f = electra.pretrain, electra.finetune, electra.evaluate, electra.export, electra.RunConfig\n"
        "f = electra.train_tokenizer, electra.prepare, electra.detect, electra.score_text\n"
        "f = electra.experiment\n"
        "assert 'torch' not in sys.modules, 'naming the functions loaded torch'\n"
        "assert {'pretrain', 'finetune', 'predict', 'Predictor', 'export'} <= set(dir(electra))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with pytest.raises(AttributeError, match="no attribute 'pretrian'"):
        electra.pretrian  # noqa: B018


def test_python_pretrain_fills_settings_as_the_command_does(wikitext_data, tmp_path, capsys):
    cfg = apply_overrides(preset("tiny"), SMALL)  # seq len the preset's 128; the data is at 64
    run = electra.pretrain(cfg, data=wikitext_data, out=tmp_path / "run")
    err = capsys.readouterr().err
    assert f"using seq len 64 from the data folder {wikitext_data}" in err
    assert "objective two_stage: set objective.sharing=none" in err
    saved = RunConfig.load(run / "config.json")
    assert saved.data.seq_len == 64 and saved.objective.two_stage_steps == 2
    assert (saved.objective.sharing, saved.objective.generator_hidden_fraction) == ("none", 1.0)
    # The command, given the same flags, trains the same run: the same config, the same weights.
    flags = [f"--{k}={v}" for k, v in SMALL.items()]
    cli = tmp_path / "cli"
    argv = ["pretrain", "--preset", "tiny", "--data", wikitext_data, "--out", cli, *flags]
    assert main([str(a) for a in argv]) == 0
    assert RunConfig.load(cli / "config.json") == saved
    assert _same_model(run / "discriminator", cli / "discriminator")

    # The caller's own setting is kept: an explicit two_stage_steps is not filled.
    mine = apply_overrides(cfg, {"objective.two_stage_steps": 3, "train.steps": 2})
    mine = replace(mine, data=replace(mine.data, path=str(wikitext_data)))
    from electra.pretraining.resolve import resolve_run

    assert resolve_run(mine, note=None).cfg.objective.two_stage_steps == 3

    # Resumed from Python: the saved config, trained further.
    further = replace(saved, train=replace(saved.train, steps=6))
    electra.pretrain(further, out=run, resume=True)
    assert RunConfig.load(run / "config.json").train.steps == 6
    assert max(int(p.name.split("_")[1]) for p in (run / "checkpoints").iterdir()) == 6

    exported = electra.export(run, tmp_path / "hf")
    assert [p.name for p in exported] == ["discriminator", "generator"]
    assert (
        electra.plot(run) == run / "learning_curves.png" and (run / "learning_curves.png").is_file()
    )
    assert json.loads((exported[0] / "config.json").read_text())["model_type"] == "electra"


def test_old_spellings_of_unset_load_as_none(tmp_path):
    d = RunConfig().to_dict()
    d["objective"].update(max_predictions=0, generator_hidden_size=0, two_stage_steps=0)
    d["train"].update(stop_after=0, init_from="")
    d["data"]["path"] = ""
    (tmp_path / "config.json").write_text(json.dumps(d))
    old = RunConfig.load(tmp_path / "config.json")
    o = old.objective
    assert (o.max_predictions, o.generator_hidden_size, o.two_stage_steps) == (None, None, None)
    assert (old.train.stop_after, old.train.init_from, old.data.path) == (None, None, None)
    assert old == RunConfig()
    assert o.num_predictions(128) == 19  # unset: the official int(0.155 * 128)
    # adversarial_mlm_steps=0 is a value (no warm-up), not the old "unset"
    no_warm_up = apply_overrides(old, {"objective.adversarial_mlm_steps": "0"})
    assert no_warm_up.objective.adversarial_mlm_steps == 0
    # A finetune.json saved with 0s, a flag given as 0 and Python's None all mean the default.
    recipe = FinetuneConfig.from_values(
        {"epochs": 0, "lr": 0.0, "max_seq_len": "0"}, "finetune.json"
    )
    assert (recipe.epochs, recipe.lr, recipe.max_seq_len) == (None, None, None)
    assert recipe == FinetuneConfig() == FinetuneConfig.from_values({"epochs": "none"}, "flags")
    with pytest.raises(ElectraError, match=r"epochs must be at least 0 \(unset: the default\)"):
        FinetuneConfig(epochs=-1)


def test_inference_runtime_is_typed_and_set_over_the_fine_tuned_one():
    fine_tuned = FinetuneConfig(device="cuda", compile=True, precision="bf16", kernels="stock")
    default = InferenceRuntime().over(fine_tuned)
    assert (default.device, default.compile, default.progress) == ("auto", False, True)
    assert (default.precision, default.kernels) == ("bf16", "stock")  # as fine-tuned
    flags = with_values(InferenceRuntime(), {"precision": "fp32", "cuda_graph": "true"}, "flags")
    assert (flags.precision, flags.cuda_graph) == ("fp32", True)
    with pytest.raises(ElectraError, match="precision='fp16': use auto, fp32 or bf16"):
        InferenceRuntime(precision="fp16").over(fine_tuned)
    with pytest.raises(ElectraError, match="did you mean device"):
        with_values(InferenceRuntime(), {"devise": "cpu"}, "flags")


def test_runtime_from_its_config_in_one_call():
    runtime = Runtime.from_config(RuntimeConfig(device="cpu", precision="fp32", kernels="stock"))
    assert (runtime.device, runtime.config.precision, runtime.config.kernels) == (
        torch.device("cpu"),
        "fp32",
        "stock",
    )
    model = runtime.prepare(torch.nn.Linear(2, 2))
    assert next(model.parameters()).device == torch.device("cpu")
    placed = Runtime.from_config(RuntimeConfig(device="cpu"), place=lambda d: torch.device("meta"))
    assert placed.device == torch.device("meta")


def _keyword_dir(root: Path, n: int = 24) -> Path:
    """Classification files of your own where the label is whether "good" is in the text."""
    filler = [w for w in WORDS if w not in ("good", "bad")]
    rows = [
        (" ".join(filler[(i * 5 + j * 3) % len(filler)] for j in range(6)), i % 2) for i in range(n)
    ]
    dev = [(t.rsplit(" ", 1)[0], y) for t, y in rows[:8]]  # a word shorter: not training rows
    root.mkdir(parents=True)
    for split, part in (("train", rows), ("dev", dev)):
        text = "".join(f"{t} {'good' if y else 'bad'}\t{y}\n" for t, y in part)
        (root / f"{split}.tsv").write_text("text\tlabel\n" + text)
    return root


def test_python_finetune_evaluate_and_export(tiny_pretrained, tmp_path, capsys):
    data = _keyword_dir(tmp_path / "data")
    out = tmp_path / "ft"
    results = electra.finetune(tiny_pretrained, "classification", data, out, epochs=2, **FAST)
    assert results["task"] == "classification" and len(results["per_seed"]) == 1
    # unset: the task's default (128), filled in and saved
    assert results["config"]["epochs"] == 2 and results["config"]["max_seq_len"] == 128
    recipe = FinetuneConfig(epochs=2, **FAST)
    with pytest.raises(ElectraError, match="already exists"):
        electra.finetune(tiny_pretrained, "classification", data, out, recipe)
    scored = electra.evaluate(out, data, runtime=InferenceRuntime(device="cpu", progress=False))
    assert scored["metrics"] == pytest.approx(results["metrics"])
    predictions = Path(scored["out"]) / "predictions.jsonl"
    rescored = electra.score("classification", predictions)
    assert rescored == pytest.approx(scored["metrics"])
    assert main(["score", "--task", "classification", "--predictions", str(predictions)]) == 0
    assert json.loads(capsys.readouterr().out) == rescored
    with pytest.raises(ElectraError, match="predictions file not found"):
        electra.score("classification", tmp_path / "none.jsonl")
    [folder] = electra.export(out, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["ElectraForSequenceClassification"]


def _same_files(a: Path, b: Path) -> bool:
    """Whether two folders hold the same files, byte for byte."""
    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    if names != sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()):
        return False
    return all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def _same_file(a: Path, b: Path) -> bool:
    return a.read_bytes() == b.read_bytes()


def _same_model(a: Path, b: Path) -> bool:
    """Two model folders alike: the same files but the weights' (whose safetensors header lists
    its metadata in no fixed order), and the same tensors, bit for bit: one process, one thread
    count, one computation."""
    from safetensors.torch import load_file

    weights = "model.safetensors"
    names = sorted(p.name for p in a.iterdir())
    if names != sorted(p.name for p in b.iterdir()):
        return False
    if any((a / n).read_bytes() != (b / n).read_bytes() for n in names if n != weights):
        return False
    x, y = load_file(a / weights), load_file(b / weights)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_python_pretrain_takes_a_preset_and_a_settings_file_as_the_command_does(
    wikitext_data, tmp_path, capsys
):
    settings = tmp_path / "run.toml"  # the tiny model, from the file; steps 3 over its 2
    tiny = "\n".join(f"{k.split('.')[1]} = {v}" for k, v in TINY_OVERRIDES.items() if "model" in k)
    settings.write_text(f'[model]\n{tiny}\n[train]\nsteps = 2\nlr = 1e-3\ndevice = "cpu"\n')
    quiet = {"train.progress": False, "train.tensorboard": False, "train.batch_size": 8}
    run = electra.pretrain(
        preset="tiny",
        config=settings,
        data=wikitext_data,
        out=tmp_path / "py",
        overrides=quiet,
        train={"steps": 3},
        objective={"name": "mlm"},
    )
    argv = ["pretrain", "--preset", "tiny", "--config", settings, "--data", wikitext_data]
    argv += ["--out", tmp_path / "cli", "--steps", "3", "--objective.name", "mlm"]
    argv += [f"--{k}={v}" for k, v in quiet.items()]
    assert main([str(a) for a in argv]) == 0
    saved = RunConfig.load(run / "config.json")
    assert saved == RunConfig.load(tmp_path / "cli" / "config.json")
    assert (saved.train.steps, saved.train.lr, saved.model.hidden_size) == (3, 1e-3, 32)
    assert saved.data.seq_len == 64  # unset: the data folder's, filled as the command fills it
    assert _same_model(run / "mlm", tmp_path / "cli" / "mlm")

    # Resumed with a setting on top, as `--resume RUN --steps 4`.
    electra.pretrain(out=run, resume=True, train={"steps": 4})
    assert RunConfig.load(run / "config.json").train.steps == 4
    capsys.readouterr()

    # Bad settings: one line each, naming where they came from.
    with pytest.raises(ElectraError, match=r"unknown setting 'train.lrr' in electra.pretrain"):
        electra.pretrain(preset="tiny", overrides={"train.lrr": 1}, out=tmp_path / "x")
    with pytest.raises(ElectraError, match="did you mean train.steps"):
        electra.pretrain(preset="tiny", train={"stpes": 1}, out=tmp_path / "x")
    with pytest.raises(ElectraError, match=r"data\.seq_len='long' in electra.pretrain"):
        electra.pretrain(preset="tiny", data={"seq_len": "long"}, out=tmp_path / "x")
    with pytest.raises(ElectraError, match=r"^train=5: a section's settings are a mapping"):
        electra.pretrain(preset="tiny", train=5, out=tmp_path / "x")
    with pytest.raises(ElectraError, match="^pass a RunConfig or preset=/config=, not both"):
        electra.pretrain(preset("tiny"), preset="tiny", out=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def _corpus(root: Path) -> Path:
    root.mkdir(parents=True)
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) for i in range(200)]
    (root / "c.txt").write_text("\n".join(lines) + "\n")
    return root / "c.txt"


def test_python_tokenizer_and_prepare_write_what_the_commands_write(tmp_path, capsys):
    corpus = _corpus(tmp_path / "corpus")
    done = electra.train_tokenizer(corpus, tmp_path / "tok", vocab_size=500, min_frequency=1)
    argv = ["tokenizer", "train", corpus, "--vocab-size", "500", "--min-frequency", "1"]
    assert main([str(a) for a in [*argv, "--out", tmp_path / "tok-cli"]]) == 0
    printed = capsys.readouterr().out
    # The same folder (the merges themselves may differ between two trainings where counts tie:
    # the `tokenizers` trainer breaks ties in hash order).
    names = ("special_tokens_map.json", "tokenizer_config.json")
    assert all(_same_file(tmp_path / "tok" / n, tmp_path / "tok-cli" / n) for n in names)
    assert (
        len(Tokenizer.from_file(str(tmp_path / "tok-cli" / "tokenizer.json")).get_vocab())
        == (done["tokens"])
    )
    # The corpus gives fewer tokens than asked for: the command's note is the function's.
    assert done["out"] == tmp_path / "tok" and done["tokens"] < 500
    assert done["note"].startswith(f"the corpus gave {done['tokens']} tokens, fewer than")
    cli = tmp_path / "tok-cli"
    assert printed == f"note: {done['note']}; tokenizer with {done['tokens']} tokens -> {cli}\n"
    with pytest.raises(ElectraError, match="already exists"):
        electra.train_tokenizer(corpus, tmp_path / "tok")

    summary = electra.prepare(corpus, tmp_path / "tok", tmp_path / "data", seq_len=32, workers=1)
    argv = ["prepare", corpus, "--tokenizer", tmp_path / "tok", "--seq-len", "32"]
    assert main([str(a) for a in [*argv, "--workers", "1", "--out", tmp_path / "data-cli"]]) == 0
    assert f"{summary['examples']} examples, {summary['tokens']} tokens" in capsys.readouterr().out
    assert _same_files(tmp_path / "data", tmp_path / "data-cli")
    with pytest.raises(ElectraError, match="seq"):
        electra.prepare(corpus, tmp_path / "tok", tmp_path / "bad", seq_len=1)


def test_python_detect_and_score_text_return_what_the_commands_print(tiny_pretrained, capsys):
    texts = ["the cat sat on the mat", "a good film"]
    found = electra.detect(tiny_pretrained, texts)
    assert main(["detect", "--model", str(tiny_pretrained), "--json", *texts]) == 0
    assert json.loads(capsys.readouterr().out) == found
    assert [t["token"] for t in electra.detect(tiny_pretrained, "a good film")[0]] == [
        "a",
        "good",
        "film",
    ]  # one text is a list of one
    scored = electra.score_text(tiny_pretrained, texts)
    assert main(["score-text", "--model", str(tiny_pretrained), "--json", *texts]) == 0
    assert json.loads(capsys.readouterr().out) == scored
    assert [r["text"] for r in scored] == texts


def test_python_experiment_is_the_command_s_experiment(
    wikitext_data, tmp_path, monkeypatch, capsys
):
    task = _keyword_dir(tmp_path / "task")
    out = tmp_path / "xp"
    tiny = {**TINY_OVERRIDES, "train.device": "cpu"}
    results = electra.experiment(
        out,
        ["electra"],
        wikitext_data,
        steps=3,
        task="classification",
        task_data=task,
        seeds=1,
        pretrain_set=tiny,
        finetune_set={"epochs": 1, "max_seq_len": 32, "device": "cpu", "progress": False},
        progress=False,
    )
    assert set(results["arms"]) == {"electra"}
    # The command with the same settings is the same experiment: it finds everything done.
    from electra.recipes import experiment as recipe

    def refuse(*a, **k):
        raise AssertionError("redone")

    monkeypatch.setattr(recipe, "pretrain", refuse)
    monkeypatch.setattr("electra.finetuning.run.finetune", refuse)
    capsys.readouterr()
    argv = ["experiment", "--arm", "electra", "--data", wikitext_data, "--out", out]
    argv += ["--steps", "3", "--task", "classification", "--task-data", task, "--seeds", "1"]
    argv += ["--pretrain-set", *[f"{k}={v}" for k, v in tiny.items()], "--no-progress"]
    argv += ["--finetune-set", "epochs=1", "max_seq_len=32", "device=cpu", "progress=false"]
    assert main([str(a) for a in argv]) == 0
    assert capsys.readouterr().out == (out / "results.md").read_text()
    with pytest.raises(ElectraError, match="one of the two"):
        electra.experiment(out, ["electra"], wikitext_data)
    with pytest.raises(ElectraError, match="--task and --task-data go together"):
        electra.experiment(out, ["electra"], wikitext_data, steps=3, task="classification")


def test_python_finetune_takes_a_settings_file_as_the_command_does(tiny_pretrained, tmp_path):
    data = _keyword_dir(tmp_path / "data")
    settings = tmp_path / "recipe.json"
    settings.write_text(
        json.dumps({"epochs": 1, "lr": 1e-3, "classification": {"label_column": "label"}})
    )
    fast = {k: v for k, v in FAST.items() if k != "lr"}
    results = electra.finetune(
        tiny_pretrained, "classification", data, tmp_path / "py", config=settings, lr=3e-3, **fast
    )
    argv = ["finetune", "--model", tiny_pretrained, "--task", "classification", "--data", data]
    argv += ["--out", tmp_path / "cli", "--config", settings, "--lr", "3e-3", "--batch-size", "8"]
    argv += ["--no-progress", "--device", "cpu", "--seeds", "1"]
    assert main([str(a) for a in argv]) == 0
    from_cli = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert from_cli["config"] == results["config"]
    assert (results["config"]["epochs"], results["config"]["lr"]) == (1, 3e-3)  # file, then flag
    assert from_cli["metrics"] == pytest.approx(results["metrics"])


def test_python_preset_sizes_are_what_presets_lists(capsys):
    rows = electra.preset_sizes(vocab_size=1000)
    assert [r["preset"] for r in rows] == list(electra.config.presets())
    assert main(["presets", "--vocab-size", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    for row, line in zip(rows, lines, strict=True):
        assert line.split()[0] == row["preset"] and line.split()[-1] == "1000"
    with pytest.raises(ElectraError, match="^--vocab-size 0: give at least 1$"):
        electra.preset_sizes(0)
