"""Memory and latency of `electra predict` on a long standard input: peak RSS, the time to the
first record, and throughput, for many lines (`--lines`, one run per count) and for one long line
(`--long-line-mb`), for the code of this checkout or of another (`--code`, for a before/after
comparison).

    python benchmarks/predict_memory.py --lines 50000 500000 --long-line-mb 50
    git worktree add /tmp/electra-before COMMIT && cd /tmp/electra-before && \
      PYTHONPATH=$PWD python /path/to/benchmarks/predict_memory.py --lines 500000 --code $PWD

(An older checkout builds its own model, hence PYTHONPATH: its code may not read a newer
`finetune.json`.)

An SST-2 classifier of `--preset` size (`predict_throughput.build_model`: one step from random weights with a
WordPiece vocabulary trained on SST-2's training text, its decision boundary centred) reads
`--lines` lines of SST-2 sentences, repeated, or one line of `--long-line-mb` megabytes of them
joined by spaces, from a file given as standard input to
`python -m electra.cli predict --model FT - --device cpu` in a child process, whose standard
output is read as it comes. Peak RSS is the child's high-water mark (`VmHWM` in /proc/PID/status,
polled; `getrusage(RUSAGE_CHILDREN).ru_maxrss` would count the RSS this process had when it forked
the child, torch and the model included, which Linux carries across exec).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from predict_throughput import build_model, sentences  # noqa: E402 (a sibling script)


def watch_peak(pid: int, peak: list[int]) -> None:
    """Keeps `peak[0]` at the process's VmHWM (kB) until it ends."""
    status = Path(f"/proc/{pid}/status")
    while True:
        try:
            text = status.read_text()
        except OSError:
            return
        hwm = next((ln for ln in text.splitlines() if ln.startswith("VmHWM:")), None)
        if hwm is None:  # a zombie: its memory is gone
            return
        peak[0] = max(peak[0], int(hwm.split()[1]))
        time.sleep(0.05)


def run_predict(model: Path, lines: Path, code: Path | None) -> dict:
    """Runs predict on `lines` as standard input; the time to its first record and to its end,
    the records counted, and the child's peak RSS."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if code:
        env["PYTHONPATH"] = str(code)
    command = [sys.executable, "-m", "electra.cli", "predict", "--model", str(model), "-"]
    command += ["--device", "cpu", "--no-progress"]
    with open(lines, "rb") as stdin:
        start = time.perf_counter()
        proc = subprocess.Popen(  # run from the code's folder: `-m` puts the cwd first on sys.path
            command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            cwd=code or Path(__file__).resolve().parents[1],
        )  # fmt: skip
        peak = [0]
        watcher = threading.Thread(target=watch_peak, args=(proc.pid, peak), daemon=True)
        watcher.start()
        first, records = None, 0
        for _ in proc.stdout:
            first = first or time.perf_counter() - start
            records += 1
        err = proc.stderr.read().decode()
        if proc.wait():
            raise SystemExit(f"predict failed ({proc.returncode}): {err[-2000:]}")
    total = time.perf_counter() - start
    watcher.join()
    peak_kb = peak[0]
    return {
        "records": records,
        "first_record_s": round(first, 2),
        "total_s": round(total, 2),
        "lines_per_s": round(records / total),
        "peak_rss_mb": round(peak_kb / 1024),
    }


def write_lines(path: Path, texts: list[str], lines: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(t + "\n" for t in itertools.islice(itertools.cycle(texts), lines))


def write_long_line(path: Path, texts: list[str], megabytes: float) -> None:
    """One line of `megabytes` MB: the sentences joined by spaces, over and over."""
    block = " ".join(texts) + " "
    size = int(megabytes * 1_000_000)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(size // len(block)):
            f.write(block)
        f.write(block[: size % len(block)] + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--glue", type=Path, default=Path("../shared/data/glue/SST-2"))
    p.add_argument("--lines", type=int, nargs="*", default=[500_000], help="one run per count")
    p.add_argument("--long-line-mb", type=float, nargs="*", default=[], help="one run per size")
    p.add_argument("--preset", default="tiny", help="the classifier's size")
    p.add_argument("--code", type=Path, help="the checkout whose electra runs (default: this)")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = p.parse_args()
    texts = sentences(args.glue, 5000)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(args.glue, Path(tmp), steps=1, size=args.preset)
        cases = [("lines", n) for n in args.lines] + [
            ("long_line_mb", m) for m in args.long_line_mb
        ]
        for kind, size in cases:
            path = Path(tmp) / "input.txt"
            if kind == "lines":
                write_lines(path, texts, size)
            else:
                write_long_line(path, texts, size)
            runs.append({kind: size, "input_mb": round(path.stat().st_size / 1e6, 1)})
            runs[-1].update(run_predict(model, path, args.code))
            print(json.dumps(runs[-1]), file=sys.stderr)
            path.unlink()
    results = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}",
        "preset": args.preset,
        "code": str(args.code or "this checkout"),
        "runs": runs,
    }
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
