"""The Python API (`electra.pretrain`, `finetune`, `evaluate`, `export`), called from Python and not
through `main()`: the same settings as the commands, resolved the same way, and a light import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import electra
from electra.cli.flags import resolve_run_config
from electra.cli.main import build_parser
from electra.config import InferenceRuntime, RunConfig, RuntimeConfig, apply_overrides, preset
from electra.engine.runtime import Runtime
from electra.errors import ElectraError
from electra.finetuning.config import FinetuneConfig
from electra.overrides import with_values

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
    # The command resolves the same flags to the same run (the trainer fits the vocabulary, and
    # resolves the document mask: off for the electra family).
    flags = [f"--{k}={v}" for k, v in SMALL.items()]
    argv = ["pretrain", "--preset", "tiny", "--data", str(wikitext_data), *flags]
    args, extra = build_parser().parse_known_args(argv)
    from_cli = resolve_run_config(args, extra)
    assert from_cli.data.document_mask is None and saved.data.document_mask is False
    fitted = replace(from_cli.data, document_mask=False)
    assert replace(from_cli, model=saved.model, data=fitted) == saved
    assert (run / "discriminator" / "config.json").is_file()

    # The caller's own setting is kept: an explicit two_stage_steps is not filled.
    mine = apply_overrides(cfg, {"objective.two_stage_steps": 3, "train.steps": 2})
    mine = replace(mine, data=replace(mine.data, path=str(wikitext_data)))
    from electra.settings import resolve_run_settings

    assert resolve_run_settings(mine, note=None).objective.two_stage_steps == 3

    # Resumed from Python: the saved config, trained further.
    further = replace(saved, train=replace(saved.train, steps=6))
    electra.pretrain(further, out=run, resume=True)
    assert RunConfig.load(run / "config.json").train.steps == 6
    assert max(int(p.name.split("_")[1]) for p in (run / "checkpoints").iterdir()) == 6

    exported = electra.export(run, tmp_path / "hf")
    assert [p.name for p in exported] == ["discriminator", "generator"]
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
    assert (runtime.device, runtime.precision, runtime.kernels) == (
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


def test_python_finetune_evaluate_and_export(tiny_pretrained, tmp_path):
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
    assert (Path(scored["out"]) / "predictions.jsonl").is_file()
    [folder] = electra.export(out, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["ElectraForSequenceClassification"]
