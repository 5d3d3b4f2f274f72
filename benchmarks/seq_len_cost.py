"""What a sequence length costs the modern family: time per token and peak memory of a pretraining
step, at the same tokens per step, from 128 to 8,192 tokens a row.

    python benchmarks/seq_len_cost.py --preset modern-small --tokens 8192 --lengths 128 512 1024 2048 4096 8192

Each length runs `benchmarks/pretrain_throughput.py --arch modernbert --impls ours` in its own
process (batch = tokens // length, at least 1), which times the step (forward, backward,
optimizer) and measures the memory the step adds in a fresh subprocess (peak allocated on GPU,
peak resident set above the process's own on CPU). Flags after `--` go to that script as they are
(e.g. `-- --device cuda --precision bf16 --compile`). Prints a table; `--json` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

THROUGHPUT = Path(__file__).with_name("pretrain_throughput.py")


def measure(args, seq_len: int, extra: list[str]) -> dict:
    batch = max(1, args.tokens // seq_len)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [
            sys.executable,
            str(THROUGHPUT),
            "--arch",
            "modernbert",
            "--impls",
            "ours",
            "--preset",
            args.preset,
            "--batch",
            str(batch),
            "--seq-len",
            str(seq_len),
            "--warmup",
            str(args.warmup),
            "--steps",
            str(args.steps),
            "--rounds",
            str(args.rounds),
            "--json",
            str(out),
            *extra,
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        result = json.loads(out.read_text())
    ours = result["impls"]["ours"]
    return {
        "seq_len": seq_len,
        "batch": batch,
        "tokens_per_s": ours["tokens_per_s"],
        "step_s": ours["step_s"],
        "peak_memory_mib": ours["peak_memory_mib"],
        "device": result["device"],
        "precision": result["precision"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="modern-small")
    p.add_argument("--tokens", type=int, default=8192, help="tokens per step at every length")
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024, 2048, 4096, 8192])
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=2, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", help="also write the rows here")
    args, extra = p.parse_known_args()
    extra = [a for a in extra if a != "--"]
    rows = []
    print(f"{args.preset}, {args.tokens} tokens a step")
    print(f"{'seq len':>8} {'batch':>6} {'tokens/s':>9} {'s/step':>7} {'peak MiB':>9}")
    for seq_len in args.lengths:
        r = measure(args, seq_len, extra)
        rows.append(r)
        print(
            f"{r['seq_len']:8d} {r['batch']:6d} {r['tokens_per_s']:9.0f} {r['step_s']:7.2f} "
            f"{r['peak_memory_mib']:9.0f}",
            flush=True,
        )
    if rows:
        print(f"on {rows[0]['device']}, {rows[0]['precision']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
