"""How many CPU threads torch uses (`--threads`), and how its idle OpenMP threads wait.

A thread that finishes its share of a parallel region waits for the others; libgomp (torch's
OpenMP) spins 300,000 times before it sleeps. On a machine shared with other jobs, the thread it
waits for has often been descheduled, and the spinning takes the core it needs: 2 threads ran
the demo 7x slower crowded than quiet. A short spin degrades gracefully (benchmarks/crowded_cpu.py,
figures in benchmarks/RESULTS.md). Quiet, it cost nothing on one box and 12-19% on another, where
waking a sleeping thread is dearer; but any longer spin lost more than that as soon as one other
job ran (benchmarks/demo_step.py, issue 36). So the CLI looks before it chooses: where the cores
are idle when it starts (under half a core busy over 50 ms, from /proc/stat), libgomp keeps its
own long spin, which the quiet box pays nothing for; elsewhere, and wherever it cannot tell, the
short spin. It sets this before torch is imported, because OpenMP reads its environment once,
when it loads; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
"""

from __future__ import annotations

import math
import os
import sys
import time

from electra.errors import ElectraError

SPIN_COUNT = "1000"
QUIET_BELOW = 0.5  # cores busy with other work, below which the machine counts as quiet


def default_wait() -> None:
    """The short spin, unless the user chose a wait policy or the machine is quiet now. Once
    torch is loaded (in-process callers, tests) OpenMP has read its settings: nothing to look at."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    if "torch" in sys.modules or busy_cores() >= QUIET_BELOW:
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT


def busy_cores(window: float = 0.05) -> float:
    """How many cores' worth of time the machine spent busy over `window` seconds (Linux's
    /proc/stat); infinity where it cannot tell."""
    try:
        before = _cpu_times()
        time.sleep(window)
        after = _cpu_times()
    except (OSError, ValueError, IndexError):
        return math.inf
    total = sum(after) - sum(before)
    idle = (after[3] + after[4]) - (before[3] + before[4])  # idle and iowait
    return (os.cpu_count() or 1) * (total - idle) / total if total > 0 else math.inf


def _cpu_times() -> list[int]:
    with open("/proc/stat", encoding="ascii") as f:
        return [int(v) for v in f.readline().split()[1:9]]


def parse_threads(value: str | None) -> int | None:
    """`--threads N` -> N; "auto" or unset -> None (torch's default: one per core)."""
    if value is None or value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ElectraError(f"--threads must be a positive integer or auto, got {value!r}")
    return n


def apply_threads(value: str | None) -> None:
    n = parse_threads(value)
    if n is not None:
        os.environ["OMP_NUM_THREADS"] = str(n)
        os.environ["MKL_NUM_THREADS"] = str(n)
        import torch

        torch.set_num_threads(n)
