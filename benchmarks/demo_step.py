"""The demo's pretraining step (`tiny` preset, the demo's corpus) under CPU settings, in turn.

    python benchmarks/demo_step.py --settings native avx2 "avx2 kernels=stock" --threads 1 2

Each setting runs in a fresh process, one after the other, for `--rounds` rounds (A B A B ...),
since the libraries read their instruction-set settings once, when they load. A setting is words:
- `native`: the CPU as it is;
- `avx2`: an AVX2-only x86 CPU emulated on an AVX-512 one, for each of torch's three kernel
  libraries: `ATEN_CPU_CAPABILITY=avx2` (torch's own kernels; `torch.backends.cpu.
  get_cpu_capability()` then says AVX2), `ONEDNN_MAX_CPU_ISA=AVX2` (oneDNN; `ONEDNN_VERBOSE=1`
  shows the ISA it runs) and `MKL_ENABLE_INSTRUCTIONS=AVX2` (MKL, which runs torch's fp32
  products);
- `kernels=auto` or `kernels=stock` (the `train.kernels` setting; auto by default);
- `NAME=VALUE`: set in the process's environment (`ELECTRA_CPU_LINEAR=onednn`, `GOMP_SPINCOUNT=...`).

The step is the trainer's own (`electra.pretraining.train.build` and `step_function`), on the demo's
data, which is built once into a temporary folder unless `--data` names one. Printed per setting and
thread count: steps/s by the clock (median and range over the rounds) and the process's CPU time
per step. On a machine shared with other jobs the clock is noisy, while CPU time at one thread
leaves out the time the process waits descheduled: it is the steadier measure of the work.
`--crowd N` runs N busy loops beside each timed process, as other jobs on a shared machine would
(benchmarks/crowded_cpu.py does the same for the whole `electra pretrain` command).
`--op-times N` prints, once per setting at one thread, the N aten ops that take the most CPU time
(by shape), the backward's included.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AVX2 = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


def busy() -> None:
    while True:
        pass


def setting_env(setting: str) -> tuple[dict[str, str], str]:
    """The environment and the kernels choice a setting's words name."""
    env, kernels = {}, "auto"
    for word in setting.split():
        if word == "avx2":
            env.update(AVX2)
        elif word.startswith("kernels="):
            kernels = word.partition("=")[2]
        elif "=" in word:
            name, _, value = word.partition("=")
            env[name] = value
        elif word != "native":
            raise SystemExit(
                f"unknown setting word {word!r}: native, avx2, kernels=X or NAME=VALUE"
            )
    return env, kernels


def run_setting(args, data: str, setting: str, threads: int, op_times: int = 0) -> dict:
    extra, kernels = setting_env(setting)
    drop = set(AVX2) | {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, __file__, "--worker", "--data", data, "--kernels", kernels]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--op-times", str(op_times)]
    crowd = 0 if op_times else args.crowd  # op times are CPU times: no need to crowd them
    hogs = [multiprocessing.Process(target=busy, daemon=True) for _ in range(crowd)]
    for hog in hogs:
        hog.start()
    try:
        done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    finally:
        for hog in hogs:
            hog.terminate()
    if op_times:
        print(done.stderr, end="", flush=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def worker(args) -> None:
    from electra.engine.cpu_threads import default_wait

    default_wait()  # as the CLI does, before torch loads
    import torch

    from electra.config import apply_overrides, preset
    from electra.data.store import PretrainingData
    from electra.engine.distributed import World
    from electra.engine.optim import learning_rate, set_learning_rate
    from electra.engine.runtime import Runtime
    from electra.engine.step import Window
    from electra.pretraining.resolve import resolve_run
    from electra.pretraining.train import build, micro_batch_seed, step_function

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    cfg = apply_overrides(preset("tiny"), {"data.path": args.data, "train.kernels": args.kernels})
    data = PretrainingData(cfg.data.path, seq_len=cfg.data.seq_len)
    nowhere = Path(tempfile.gettempdir()) / "electra-demo-step-unused"  # build writes nothing
    cfg = resolve_run(cfg, nowhere, data=data).cfg
    runtime = Runtime.of(cfg.train, torch.device("cpu"))
    run = build(cfg, nowhere, data, None, False, World(), runtime)
    run_step, window, train = step_function(run), Window(run.objective.metrics), cfg.train
    run.objective.train()

    def step() -> None:
        set_learning_rate(
            run.optimizer, learning_rate(run.step, train.lr, train.steps, train.warmup)
        )
        run.objective.begin_step(run.step)
        seeds = [micro_batch_seed(train.seed, run.step, 0)]
        run_step([next(run.stream)], window=window, seeds=seeds)
        run.step += 1

    for _ in range(args.warmup):
        step()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        step()
    window.summary()  # the loop's sync at a logging step
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if args.op_times:
        op_table(step, args.op_times, args.steps)
    capability = torch.backends.cpu.get_cpu_capability()
    print(
        json.dumps(
            {
                "steps_per_s": args.steps / wall,
                "cpu_ms": 1000 * cpu / args.steps,
                "capability": capability,
                "threads": torch.get_num_threads(),
            }
        )
    )


def op_table(step, rows: int, steps: int) -> None:
    """CPU time per aten op and input shapes over `steps` steps, the costliest `rows` printed."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    spent: dict[tuple, list] = {}

    class Timed(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            shapes = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
            start = time.thread_time()
            out = func(*args, **(kwargs or {}))
            entry = spent.setdefault((str(func), shapes), [0.0, 0])
            entry[0] += time.thread_time() - start
            entry[1] += 1
            return out

    total = time.thread_time()
    with Timed():
        for _ in range(steps):
            step()
    total = time.thread_time() - total
    in_ops = sum(t for t, _ in spent.values())
    print(
        f"  CPU ms/step {1000 * total / steps:.1f}, in aten ops {1000 * in_ops / steps:.1f}",
        file=sys.stderr,
    )
    families = {"products": 0.0, "attention": 0.0, "gelu": 0.0, "other": 0.0}
    for (name, _), (t, _) in spent.items():
        op = name.split(".")[1]
        family = next((f for f in families if f in op), None)
        family = family or ("products" if op in ("mm", "addmm", "bmm", "baddbmm") else "other")
        families[family] += t
    print(
        "  by family: " + ", ".join(f"{k} {1000 * v / steps:.1f} ms" for k, v in families.items()),
        file=sys.stderr,
    )
    for (name, shapes), (t, n) in sorted(spent.items(), key=lambda kv: -kv[1][0])[:rows]:
        print(f"  {1000 * t / steps:7.2f} ms {n // steps:3d}x {name} {shapes}", file=sys.stderr)


def build_demo_data(folder: Path) -> str:
    from electra.recipes.demo import _build_data

    folder.mkdir(parents=True)
    _build_data(folder)
    return str(folder / "data")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--settings", nargs="+", default=["native", "avx2", "avx2 kernels=stock"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, os.cpu_count() or 1])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20, help="timed steps per process")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--data", help="the demo's prepared data (default: built now, then removed)")
    p.add_argument("--crowd", type=int, default=0, help="busy loops beside each timed process")
    p.add_argument("--op-times", type=int, default=0, metavar="N")
    p.add_argument("--kernels", default="auto", help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or build_demo_data(Path(tmp) / "demo")
        for setting in args.settings if args.op_times else []:
            print(f"{setting}: the costliest ops, one thread")
            run_setting(args, data, setting, 1, args.op_times)
        results: dict[tuple[str, int], list[dict]] = {}
        for r in range(args.rounds):
            for threads in args.threads:
                for setting in args.settings:
                    res = run_setting(args, data, setting, threads)
                    results.setdefault((setting, threads), []).append(res)
                    print(
                        f"round {r + 1} threads={threads} {setting:32} {res['capability']:7} "
                        f"{res['steps_per_s']:5.2f} step/s  {res['cpu_ms']:6.1f} CPU ms/step",
                        flush=True,
                    )
    print("\nmedian (range) over rounds")
    for (setting, threads), runs in results.items():
        rate, cpu = [r["steps_per_s"] for r in runs], [r["cpu_ms"] for r in runs]
        print(
            f"threads={threads} {setting:32} {statistics.median(rate):5.2f} step/s "
            f"({min(rate):.2f}-{max(rate):.2f})  {statistics.median(cpu):6.1f} CPU ms/step "
            f"({min(cpu):.1f}-{max(cpu):.1f})"
        )


if __name__ == "__main__":
    main()
