"""CPU pretraining on a quiet and on a crowded machine: threads and OpenMP's wait policy.

    python benchmarks/crowded_cpu.py --data electra-demo/data --steps 120
    python benchmarks/crowded_cpu.py --data DATA --steps 4 --log-every 2 --batch 4 --threads 1 \
        --waits cli --boxes quiet                                  # a toy run: the test suite's

Runs `electra pretrain --preset tiny` (the demo's run) in a fresh process per setting, timing the
steps between its first and last logged rows (start-up left out). "Crowded" starts one busy
process per core beside it, as other jobs on a shared box would. Settings: the number of torch
threads, and OMP_WAIT_POLICY (a thread that finishes its share of a parallel region spins, by
default, waiting for the others; when the others have been descheduled by another job, the
spinning burns the time slice they need).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def busy() -> None:
    while True:
        pass


def steps_per_s(
    data: str, steps: int, threads: str, wait: str, batch: int, log_every: int
) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if wait != "cli":
        name, _, value = wait.partition("=")
        env[name] = value
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "electra.cli", "pretrain", "--preset", "tiny"]
        cmd += ["--data", data, "--out", str(run), "--steps", str(steps), "--threads", threads]
        cmd += ["--train.log_every", str(log_every), "--train.progress", "false"]
        cmd += ["--batch-size", str(batch)] if batch else []
        cmd += ["--train.tensorboard", "false", "--train.save_every", str(steps)]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    first, last = rows[0], rows[-1]
    return (last["step"] - first["step"]) / (last["elapsed_s"] - first["elapsed_s"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="a prepared data folder (seq len 128)")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--log-every", type=int, default=10, help="the timed span is logged rows apart")
    p.add_argument("--batch", type=int, default=0, help="0: the tiny preset's")
    p.add_argument("--boxes", nargs="+", default=["quiet", "crowded"], choices=["quiet", "crowded"])
    p.add_argument("--threads", nargs="+", default=["auto", "1", str(os.cpu_count())])
    p.add_argument(
        "--waits",
        nargs="+",
        # 300000 is libgomp's own spin count when nothing is set; "cli" is electra's default.
        default=["GOMP_SPINCOUNT=300000", "OMP_WAIT_POLICY=PASSIVE", "cli"],
        help="'cli' (what `electra` sets) or NAME=VALUE set in the run's environment",
    )
    args = p.parse_args()
    for crowded in [box == "crowded" for box in args.boxes]:
        hogs = [multiprocessing.Process(target=busy, daemon=True) for _ in range(os.cpu_count())]
        for h in hogs if crowded else []:
            h.start()
        try:
            for threads in args.threads:
                for wait in args.waits:
                    rate = steps_per_s(
                        args.data, args.steps, threads, wait, args.batch, args.log_every
                    )
                    box = "crowded" if crowded else "quiet"
                    print(f"{box:8} threads={threads:5} {wait:24} {rate:6.2f} step/s")
                    sys.stdout.flush()
        finally:
            for h in hogs if crowded else []:
                h.terminate()


if __name__ == "__main__":
    main()
