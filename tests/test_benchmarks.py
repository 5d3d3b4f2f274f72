"""Every script in benchmarks/ runs end to end at toy size, so that a refactor cannot leave one
broken (an import gone, a signature changed) until someone next measures with it.

Each script runs in this process (`runpy`, as `python benchmarks/X.py ...` runs it: its imports,
argument parsing and main), on a few rows of the real GLUE files, a tiny model and a tiny prepared
corpus. What needs what this machine may lack is said where it is skipped: the Trainer needs
`accelerate`, the common pretraining peer `electra-pytorch`, `gpu_session.sh` a GPU."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import sentence, shared_data, tiny_model_config

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
GLUE_TASKS = ("SST-2", "CoLA", "MRPC", "STS-B", "RTE")
# A pretraining config a few times smaller than the tiny preset (its 2 layers kept).
SMALLER = ["model.hidden_size=32", "model.embedding_size=16", "model.intermediate_size=64"]


def run_script(monkeypatch, name: str, *args) -> None:
    """`python benchmarks/NAME ARGS...`, in this process; torch's thread count is put back."""
    monkeypatch.setattr(sys, "argv", [str(BENCH / name), *map(str, args)])
    monkeypatch.syspath_prepend(str(BENCH))  # the parity scripts import reference.py beside them
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    threads = torch.get_num_threads()
    try:
        runpy.run_path(str(BENCH / name), run_name="__main__")
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """glue/ (the first rows of five real GLUE tasks), model/ (a tiny random discriminator with a
    WordPiece vocabulary of their text) and data/ (that text prepared at seq len 128)."""
    from electra.data.prepare import prepare
    from electra.data.tokenizer import save_tokenizer, train_tokenizer
    from electra.folders.model_folder import save_pretrained
    from electra.model.electra.modeling import ElectraForPreTraining

    source = shared_data("glue")
    root = tmp_path_factory.mktemp("bench")
    for folder in GLUE_TASKS:
        (root / "glue" / folder).mkdir(parents=True)
        for split, rows in (("train", 40), ("dev", 16)):
            lines = (source / folder / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
            (root / "glue" / folder / f"{split}.tsv").write_text(
                "\n".join(lines[:rows]) + "\n", encoding="utf-8"
            )
    text = root / "text.txt"
    text.write_text(
        "\n".join(
            line.replace("\t", " ")
            for folder in GLUE_TASKS
            for line in (root / "glue" / folder / "train.tsv").read_text().splitlines()
        )
    )
    tokenizer = train_tokenizer([text], vocab_size=400, min_frequency=1)
    save_tokenizer(tokenizer, root / "tok", lowercase=True)
    prepare([str(text)], root / "tok", seq_len=128, out_dir=root / "data", workers=1)
    cfg = tiny_model_config(vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=128)
    torch.manual_seed(0)
    save_pretrained(ElectraForPreTraining(cfg), root / "model", tokenizer)
    return root


def test_every_script_has_a_smoke_test():
    here = Path(__file__).read_text()
    for script in sorted(BENCH.glob("*.py")) + sorted(BENCH.glob("*.sh")):
        assert f'"{script.name}"' in here, f"benchmarks/{script.name} has no smoke test here"


def test_context_probe(toy, monkeypatch, capsys):
    run_script(
        monkeypatch, "context_probe.py", "--data", toy / "data", "--preset", "tiny",
        "--steps", 4, "--batch", 4, "--log-every", 2,
    )  # fmt: skip
    assert capsys.readouterr().out.count("AUC") == 2


def test_packing_share(toy, monkeypatch, capsys):
    run_script(
        monkeypatch, "packing_share.py", "--tokenizer", toy / "model", "--glue", toy / "glue",
        "--batch", 8, "--batches", 2,
    )  # fmt: skip
    rows = [line for line in capsys.readouterr().out.splitlines() if line.endswith("x |")]
    assert len(rows) == 5


@pytest.mark.parametrize("impls", [["ours"], ["ours", "trainer"]], ids=["ours", "trainer"])
def test_finetune_throughput(toy, monkeypatch, tmp_path, impls):
    if "trainer" in impls and importlib.util.find_spec("accelerate") is None:
        pytest.skip("transformers' Trainer needs accelerate (pip install accelerate)")
    out = tmp_path / "ft.jsonl"
    run_script(
        monkeypatch, "finetune_throughput.py", "--model", toy / "model", "--glue", toy / "glue",
        "--task", "mrpc", "--impls", *impls, "--steps", 2, "--warmup", 1, "--batch", 4,
        "--dev-examples", 8, "--rounds", 1, "--out", out,
    )  # fmt: skip
    summary = json.loads(out.read_text())
    for impl in impls:
        assert summary[f"{impl}_train_per_s"] > 0 and summary[f"{impl}_predict_per_s"] > 0
    assert ("train_ratio" in summary) == (len(impls) == 2)


def test_predict_throughput(toy, monkeypatch, tmp_path):
    out = tmp_path / "predict.json"
    run_script(
        monkeypatch, "predict_throughput.py", "--glue", toy / "glue" / "SST-2", "--preset", "tiny",
        "--examples", 16, "--steps", 1, "--hf-batch-sizes", 8, "--rounds", 1, "--out", out,
    )  # fmt: skip
    results = json.loads(out.read_text())
    assert results["examples"] == 16 and results["pipeline_best_batch"] == 8
    # The export is the same model: transformers' pipeline labels the sentences alike.
    assert results["label_agreement"] == 1.0


def test_predict_memory(toy, monkeypatch, tmp_path):
    """predict_memory.py: `electra predict` on standard input in a child process, watched."""
    out = tmp_path / "memory.json"
    run_script(
        monkeypatch, "predict_memory.py", "--glue", toy / "glue" / "SST-2", "--lines", 40,
        "--long-line-mb", 0.05, "--preset", "tiny", "--out", out,
    )  # fmt: skip
    many, long = json.loads(out.read_text())["runs"]
    assert many["records"] == 40 and many["peak_rss_mb"] > 0 and long["records"] == 1


def test_demo_step(toy, monkeypatch, capsys):
    """demo_step.py: one setting, one round, in a worker process, and its op table."""
    run_script(
        monkeypatch, "demo_step.py", "--data", toy / "data", "--settings", "native",
        "--threads", 1, "--rounds", 1, "--steps", 1, "--warmup", 1, "--op-times", 2,
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "the costliest ops" in out and "ms/step" in out
    assert "round 1 threads=1 native" in out and out.rstrip().endswith(")")


def test_pretrain_throughput(monkeypatch, tmp_path, capsys):
    impls = ["ours", "careful"]
    if importlib.util.find_spec("electra_pytorch") is None:
        print("the common peer is left out: it needs electra-pytorch (not installed)")
    else:
        impls.append("common")
    out = tmp_path / "pretrain.json"
    flags = ["--preset", "tiny", "--batch", 2, "--seq-len", 32, "--device", "cpu"]
    run_script(
        monkeypatch, "pretrain_throughput.py", *flags, "--impls", *impls, "--warmup", 1,
        "--steps", 1, "--rounds", 1, "--peak-size", 128, "--skip-memory", "--json", out,
    )  # fmt: skip
    results = json.loads(out.read_text())
    assert set(results["impls"]) == set(impls) and results["speedup_vs_careful"] > 0
    # The peak-memory measurement each implementation gets in a process of its own.
    capsys.readouterr()
    run_script(monkeypatch, "pretrain_throughput.py", *flags, "--warmup", 1, "--memory-of", "ours")
    assert float(capsys.readouterr().out.split()[-1]) >= 0  # MiB; a tiny model may fit in the heap


def test_pretrain_throughput_modern(monkeypatch, tmp_path, capsys):
    """--arch modernbert times ours against the "modern_peers.py" peers (HF ModernBERT, careful RTD
    and plain MLM) in one run, naming each with its family, and measures their memory alone."""
    out = tmp_path / "modern.json"
    flags = ["--arch", "modernbert", "--preset", "modern-tiny", "--batch", 2, "--seq-len", 32]
    flags += ["--device", "cpu"]
    run_script(
        monkeypatch, "pretrain_throughput.py", *flags, "--impls", "ours", "careful", "hf-mlm",
        "--warmup", 1, "--steps", 1, "--rounds", 1, "--peak-size", 128, "--skip-memory",
        "--json", out,
    )  # fmt: skip
    results = json.loads(out.read_text())
    assert results["arch"] == "modernbert" and results["preset"] == "modern-tiny"
    impls = results["impls"]
    assert list(impls) == ["ours", "careful", "hf-mlm"]
    assert all(r["arch"] == "modernbert" and r["tokens_per_s"] > 0 for r in impls.values())
    assert [r["objective"] for r in impls.values()] == ["electra", "electra", "mlm"]
    assert results["speedup_vs_careful"] > 0 and results["speedup_vs_hf-mlm"] > 0
    capsys.readouterr()
    run_script(
        monkeypatch, "pretrain_throughput.py", *flags, "--warmup", 1, "--memory-of", "careful"
    )
    assert float(capsys.readouterr().out.split()[-1]) >= 0


def test_pretrain_throughput_hf(monkeypatch, tmp_path, capsys):
    """--arch hf times the hf family beside our ELECTRA family at its shapes and the careful loop
    on the type's own classes, all three with as many parameters (less native's RTD dense)."""
    out = tmp_path / "hf.json"
    flags = ["--arch", "hf", "--preset", "hf-tiny", "--batch", 2, "--seq-len", 32]
    flags += ["--device", "cpu"]
    run_script(
        monkeypatch, "pretrain_throughput.py", *flags, "--warmup", 1, "--steps", 1,
        "--rounds", 1, "--peak-size", 128, "--skip-memory", "--json", out,
    )  # fmt: skip
    results = json.loads(out.read_text())
    assert results["arch"] == "hf" and list(results["impls"]) == ["ours", "native", "careful"]
    assert results["speedup_vs_careful"] > 0 and results["speedup_vs_native"] > 0
    sys.path.insert(0, str(BENCH))
    try:
        from pretrain_throughput import SPECIAL, hf_type_pair, native_config
    finally:
        sys.path.remove(str(BENCH))
    from electra.config import preset
    from electra.objectives import build_objective

    cfg = preset("hf-tiny")
    gen, disc, _ = hf_type_pair(cfg, torch.device("cpu"))
    native = native_config(cfg)

    def count(model):
        return sum(p.numel() for p in model.parameters())

    ours = count(build_objective(cfg.model, cfg.objective, SPECIAL, 32))
    assert count(torch.nn.ModuleList([gen, disc])) == ours
    h = cfg.model.hidden_size
    assert count(build_objective(native.model, native.objective, SPECIAL, 32)) == ours + h * h + h
    capsys.readouterr()
    run_script(monkeypatch, "pretrain_throughput.py", *flags, "--warmup", 1, "--memory-of", "ours")
    assert float(capsys.readouterr().out.split()[-1]) >= 0


def test_pretrain_throughput_deberta(monkeypatch, tmp_path, capsys):
    """--arch deberta-v3 times ours (enhanced mask decoder off), the "deberta_peers.py" peers (the
    careful RTD loop and hf-mlm on `transformers`' DebertaV2 classes), and ours-emd; careful trains as many parameters as ours (GDES:
    the discriminator's own table is the residual) and measures its memory alone."""
    out = tmp_path / "deberta.json"
    flags = ["--arch", "deberta-v3", "--preset", "deberta-v3-tiny", "--batch", 2, "--seq-len", 32]
    flags += ["--device", "cpu"]
    run_script(
        monkeypatch, "pretrain_throughput.py", *flags, "--warmup", 1, "--steps", 1,
        "--rounds", 1, "--peak-size", 128, "--skip-memory", "--json", out,
    )  # fmt: skip
    results = json.loads(out.read_text())
    impls = results["impls"]
    assert results["arch"] == "deberta-v3" and results["preset"] == "deberta-v3-tiny"
    assert list(impls) == ["ours", "careful", "hf-mlm", "ours-emd"]
    assert [r["objective"] for r in impls.values()] == ["electra", "electra", "mlm", "electra"]
    assert all(r["tokens_per_s"] > 0 for r in impls.values())
    # The decoder's two extra passes of the last layer are counted for ours-emd alone.
    assert impls["ours-emd"]["model_flops_per_step"] > impls["ours"]["model_flops_per_step"]
    sys.path.insert(0, str(BENCH))
    try:
        from deberta_peers import hf_deberta_pair, without_emd
        from pretrain_throughput import SPECIAL
    finally:
        sys.path.remove(str(BENCH))
    from electra.config import preset
    from electra.objectives import build_objective

    cfg = without_emd(preset("deberta-v3-tiny"))
    gen, disc = hf_deberta_pair(cfg, torch.device("cpu"))
    assert gen.cls.predictions.decoder.weight is gen.deberta.embeddings.word_embeddings.weight
    assert not disc.deberta.embeddings.word_embeddings.weight.any()  # GDES' residual starts at 0
    theirs = torch.nn.ModuleList([gen, disc])
    ours = build_objective(cfg.model, cfg.objective, SPECIAL, 32)
    assert sum(p.numel() for p in theirs.parameters()) == sum(p.numel() for p in ours.parameters())
    capsys.readouterr()
    run_script(
        monkeypatch, "pretrain_throughput.py", *flags, "--warmup", 1, "--memory-of", "careful"
    )
    assert float(capsys.readouterr().out.split()[-1]) >= 0


def test_seq_len_cost(monkeypatch, tmp_path, capsys):
    """seq_len_cost.py: one pretrain_throughput.py process per length at the same tokens a step,
    its time and memory in a row each."""
    out = tmp_path / "seqlen.json"
    run_script(
        monkeypatch, "seq_len_cost.py", "--preset", "modern-tiny", "--tokens", 64, "--lengths",
        16, 32, "--warmup", 1, "--steps", 1, "--rounds", 1, "--json", out, "--",
        "--device", "cpu", "--peak-size", 128,
    )  # fmt: skip
    rows = json.loads(out.read_text())
    assert [(r["seq_len"], r["batch"]) for r in rows] == [(16, 4), (32, 2)]
    assert all(r["tokens_per_s"] > 0 and r["peak_memory_mib"] >= 0 for r in rows)
    assert "peak MiB" in capsys.readouterr().out


def test_pretrain_throughput_modern_peers_match_ours():
    """The careful peer trains as many parameters as ours (the same shared embeddings and tied
    generator decoder) and hf-mlm as many as our discriminator plus its MLM head."""
    sys.path.insert(0, str(BENCH))
    try:
        from modern_peers import hf_modern_pair
    finally:
        sys.path.remove(str(BENCH))
    from electra.config import preset
    from electra.data.tokenizer import SpecialIds
    from electra.objectives import build_objective

    cfg = preset("modern-tiny")
    special = SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103)
    ours = build_objective(cfg.model, cfg.objective, special, 32)
    gen, disc = hf_modern_pair(cfg, torch.device("cpu"))
    theirs = torch.nn.ModuleList([gen, disc])
    assert sum(p.numel() for p in theirs.parameters()) == sum(p.numel() for p in ours.parameters())


def test_crowded_cpu(toy, monkeypatch, capsys):
    # Quiet only: the crowded half starts a busy process per core, unkind to a shared test box.
    run_script(
        monkeypatch, "crowded_cpu.py", "--data", toy / "data", "--steps", 4, "--log-every", 2,
        "--batch", 4, "--threads", 1, "--waits", "cli", "--boxes", "quiet",
    )  # fmt: skip
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("quiet") and float(line.split()[-2]) > 0


def test_finetune_parity_with_reference(toy, monkeypatch, tmp_path):
    """finetune_parity.py and reference.py: both arms, one seed of RTE, and the report."""
    common = ["--model", toy / "model", "--glue", toy / "glue", "--out", tmp_path, "--tasks", "rte"]
    common += ["--seeds", 0, "--set", "epochs=1", "max_seq_len=32"]
    for impl in ("ours", "reference"):
        run_script(monkeypatch, "finetune_parity.py", *common, "--impl", impl)
    result = json.loads((tmp_path / "ours" / "rte" / "seed_0" / "result.json").read_text())
    assert 0 <= result["metric"] <= 100 and len(result["train_loss"]) == 1
    run_script(monkeypatch, "finetune_parity.py", "--out", tmp_path, "--report")
    assert "| rte | " in (tmp_path / "finetune_parity.md").read_text()
    assert Path(sys.modules["reference"].__file__) == BENCH / "reference.py"


def test_learning_parity(toy, monkeypatch, tmp_path):
    common = ["--data", toy / "data", "--out", tmp_path, "--steps", 2, "--seeds", 0, "--set"]
    common += ["train.log_every=1", "train.batch_size=2", *SMALLER]
    for impl in ("ours", "reference"):
        run_script(monkeypatch, "learning_parity.py", *common, "--impl", impl)
    for impl in ("ours", "reference"):
        rows = (tmp_path / impl / "seed_0" / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(r)["step"] for r in rows] == [1, 2]
    assert "| 2 | disc_auc |" in (tmp_path / "parity.md").read_text()
    assert (tmp_path / "parity.png").stat().st_size > 0


def test_transfer_then_paper_anchor(toy, monkeypatch, tmp_path):
    """transfer.py pretrains 2 steps and fine-tunes both arms on RTE; paper_anchor.py plots it."""
    out = tmp_path / "transfer"
    run_script(
        monkeypatch, "transfer.py", "--data", toy / "data", "--preset", "tiny", "--steps", 2,
        "--pretrain-set", "train.batch_size=2", "train.log_every=1", *SMALLER,
        "--glue", toy / "glue", "--out", out, "--tasks", "rte", "--seeds", 1,
        "--finetune-set", "epochs=1", "max_seq_len=32",
    )  # fmt: skip
    assert set(json.loads((out / "transfer.json").read_text())) == {"rte/pretrained", "rte/random"}
    assert "| rte | accuracy | 1 | 1 |" in (out / "transfer.md").read_text()
    run_script(
        monkeypatch, "paper_anchor.py", "--run", f"toy={out}", "--out", tmp_path / "anchor.png"
    )
    assert (tmp_path / "anchor.png").stat().st_size > 0


def test_table5_plot(toy, tmp_path, monkeypatch):
    """Two `electra experiment` folders written by its own functions (the plan resolved, the
    fine-tuning summaries as finetune_point writes them), plotted together."""
    from dataclasses import asdict

    from electra.atomic import write_json_atomic
    from electra.data.store import PretrainingData
    from electra.recipes.experiment import Plan, parse_arm, resolve, write_results

    folders = []
    for name, arms in (("a", ["electra", "mlm"]), ("b", ["electra"])):
        plan = Plan(
            "tiny", str(toy / "data"), str(toy / "glue"), [parse_arm(a) for a in arms],
            ["rte", "stsb"], seeds=1, steps=4, points=2,
        )  # fmt: skip
        out = tmp_path / name
        resolved = resolve(plan, PretrainingData(plan.data))
        out.mkdir()
        write_json_atomic(out / "experiment.json", {"plan": asdict(plan), **resolved})
        for arm, info in resolved["arms"].items():
            for i, point in enumerate(info["points"]):
                for task in plan.tasks:
                    summary = out / "arms" / arm / f"step_{point}" / "finetune" / task
                    summary.mkdir(parents=True)
                    row = {"metric": "x", "median": 50.0 + i, "min": 49.0 + i, "max": 51.0 + i}
                    write_json_atomic(summary / "summary.json", row)
        write_results(plan, resolved, out)
        folders.append(out)
    run_script(monkeypatch, "table5_plot.py", *folders, "--out", tmp_path / "t5.png")
    assert (tmp_path / "t5.png").stat().st_size > 0


def test_gpu_session_parses_and_names_scripts_that_exist():
    """gpu_session.sh needs a GPU (nvidia-smi, CUDA) to run; here its syntax, and every script it
    names, which the tests above run on the CPU."""
    script = BENCH / "gpu_session.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    named = set(re.findall(r"benchmarks/\w+\.py", script.read_text()))
    assert named and all((BENCH.parent / name).is_file() for name in named), named


def test_same_outputs(tmp_path):
    """What a user sees of a checkout, end to end at toy size: the helps, a run's metrics, the
    exported files and a fine-tune's results."""
    shared = shared_data("glue", "SST-2").parent.parent
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentence(i) for i in range(400)))
    env = {**os.environ, "STEPS": "2", "PRESETS": "tiny", "OBJECTIVES": "electra"}
    env["SHARED_DATA"] = str(shared)
    script = BENCH / "same_outputs.sh"
    subprocess.run(["bash", str(script), str(tmp_path / "out"), str(corpus)], env=env, check=True)
    out = tmp_path / "out"
    assert "pretrain an ELECTRA discriminator" in (out / "help" / "electra.txt").read_text()
    steps = [json.loads(line)["step"] for line in (out / "metrics-tiny-electra.jsonl").open()]
    assert steps and steps[-1] == 2
    assert len((out / "export-tiny.sha256").read_text().splitlines()) == 4
    assert "accuracy" in (out / "ft-tiny.json").read_text()


def test_instruments(tmp_path, monkeypatch, capsys):
    """instruments.py on an experiment folder as `electra experiment` leaves it: a collapsed arm
    that fine-tunes below random weights, and a healthy one."""

    def record(step, rank, cosine):
        return {"step": step, "split": "heldout", "tokens": 100, "disc_auc": 0.8,
                "disc_auc_fixed": 0.6, "disc_prior_gain": 0.05, "mlm_loss": 9.0 - step / 100,
                "hidden_rms": 0.5, "mean_cosine": cosine, "effective_rank": rank,
                "hidden_size": 128}  # fmt: skip

    def results(folder, scores):
        folder.mkdir(parents=True)
        seeds = [{"metrics": {"accuracy": s}} for s in scores]
        (folder / "results.json").write_text(
            json.dumps({"main_metric": "accuracy", "per_seed": seeds})
        )

    xp = tmp_path / "xp"
    arms = {"rtd-hot": (20, 0.9, [60.0, 61.0, 62.0]), "rtd": (50, 0.3, [71.0, 72.0, 73.0])}
    for name, (rank, cosine, scores) in arms.items():
        run = xp / "arms" / name / "pretrain"
        run.mkdir(parents=True)
        rows = [record(0, 56, 0.17), record(100, rank, cosine)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        results(xp / "arms" / name / "step_100" / "finetune" / "sst2", scores)
    (xp / "experiment.json").write_text(
        json.dumps({"arms": {n: {"steps": 100, "arch": "electra"} for n in arms}})
    )
    results(tmp_path / "random", [66.0, 67.0, 68.0])
    run_script(monkeypatch, "instruments.py", xp, "--random", f"electra={tmp_path / 'random'}")
    out = capsys.readouterr().out
    assert "| rtd-hot | 0.800 | 0.600 | 9.00 → 8.00 | 0.17 → 0.90 | 56 → 20 | collapsed" in out
    assert "| -6.0▼ |" in out and "| +5.0▲ |" in out
    assert (
        "collapsed said of 1. Worse than random weights beyond the seed spread: 1, of which " in out
    )
