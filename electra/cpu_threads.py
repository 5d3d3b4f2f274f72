"""How many CPU threads torch uses (`--threads`), and how its idle OpenMP threads wait.

A thread that finishes its share of a parallel region waits for the others; libgomp (torch's
OpenMP) spins 300,000 times before it sleeps. On a machine shared with other jobs, the thread it
waits for has often been descheduled, and the spinning takes the core it needs: 2 threads ran
the demo 7x slower crowded than quiet. A short spin keeps the quiet speed and degrades gracefully
(benchmarks/crowded_cpu.py, figures in benchmarks/RESULTS.md). The CLI sets it before torch is
imported, because OpenMP reads its environment once, when it loads; a user's own
OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
"""

from __future__ import annotations

import os

from electra.errors import ElectraError

SPIN_COUNT = "1000"


def default_wait() -> None:
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT


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
