"""The one progress display of every command (`pretrain`, `finetune`, `predict`): a tqdm bar
when stderr is a terminal, and occasional plain lines when it is not (a log file, a pipe), so that
a log holds a few readable lines instead of a carriage-return update per step.

Progress is turned off by `--no-progress` on every command: it sets the `progress` setting
(`train.progress` of a pretraining config, `progress` of a fine-tuning recipe or of
`InferenceRuntime`), or, for `experiment` and `demo`, whose settings name a run and so must not
change with the display, holds every display off (`progress_off`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

from tqdm import tqdm

_OFF = [False]  # `progress_off`

# A plain line each time another tenth of the work is done, or after this many seconds.
PLAIN_LINES = 10
PLAIN_INTERVAL_S = 60.0


def progress_bar(
    total: int,
    label: str,
    *,
    enabled: bool = True,
    unit: str = "step",
    initial: int = 0,
    stream: TextIO | None = None,
    interval_s: float = PLAIN_INTERVAL_S,
    leave: bool = False,
) -> Progress:
    """A progress display of `total` units (`initial` already done), named `label` in plain
    lines. Each has tqdm's `update(n)`, `set_postfix(dict, refresh=...)` and `close()`, and is a
    context manager. Off (`enabled` false): a disabled tqdm, which shows nothing. `leave`: the
    terminal's bar stays on screen when closed."""
    stream = stream or sys.stderr
    if not enabled or _OFF[0]:
        return tqdm(total=total, disable=True)
    if _is_terminal(stream):
        return tqdm(
            total=total,
            initial=initial,
            unit=unit,
            file=stream,
            dynamic_ncols=True,
            leave=leave,
            mininterval=0.5,
        )
    return PlainProgress(
        total, label, unit=unit, initial=initial, stream=stream, interval_s=interval_s
    )


@contextlib.contextmanager
def progress_off() -> Iterator[None]:
    """No progress shown within, whatever the settings say: `electra experiment --no-progress`,
    whose pretraining settings are part of the experiment's identity (a setting of display must
    not make a continued experiment another one)."""
    before, _OFF[0] = _OFF[0], True
    try:
        yield
    finally:
        _OFF[0] = before


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        return False


class PlainProgress:
    """Progress as whole lines, no carriage returns: `LABEL: 40/126 steps (32%), 12s elapsed,
    ~25s left, loss=0.52`, each time another 1/`PLAIN_LINES` of `total` is done or `interval_s`
    seconds have passed, whichever comes first (and at the end)."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        unit: str = "step",
        initial: int = 0,
        stream: TextIO | None = None,
        interval_s: float = PLAIN_INTERVAL_S,
    ):
        self.total, self.label, self.unit = total, label, unit
        self.n = self.start_n = initial
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.start = self.last_time = time.monotonic()
        self.last_tenth = self._tenth(initial)
        self.postfix: dict[str, Any] = {}
        self.closed = False
        self.written = initial  # the count the last line showed

    def _tenth(self, n: int) -> int:
        return n * PLAIN_LINES // self.total if self.total else 0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        tenth = self._tenth(self.n)
        if tenth > self.last_tenth or now - self.last_time >= self.interval_s:
            self.last_tenth, self.last_time = tenth, now
            self._write(now)

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True, **kw):
        self.postfix = {**(ordered_dict or {}), **kw}

    def _write(self, now: float) -> None:
        self.written = self.n
        units = self.unit if self.unit.endswith("s") else f"{self.unit}s"
        done = f"{self.n}/{self.total} {units}"
        if self.total:
            done += f" ({self.n / self.total:.0%})"
        elapsed = now - self.start
        parts = [done, f"{_duration(elapsed)} elapsed"]
        ran = self.n - self.start_n
        if ran > 0 and self.n < self.total:
            parts.append(f"~{_duration(elapsed / ran * (self.total - self.n))} left")
        parts += [f"{k}={v}" for k, v in self.postfix.items()]
        print(f"{self.label}: {', '.join(parts)}", file=self.stream, flush=True)

    def close(self) -> None:
        """Ends the display with a line where the count moved since the last one (a run stopped
        early, at `stop_after` or by Ctrl-C, says where it stopped)."""
        if not self.closed and self.n != self.written:
            self._write(time.monotonic())
        self.closed = True

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _duration(seconds: float) -> str:
    """12s, 3m05s, 2h07m."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


Progress = tqdm | PlainProgress  # what `progress_bar` gives
