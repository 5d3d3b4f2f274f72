"""--threads and the OpenMP wait default that keeps a crowded CPU from spinning."""

import math
import os
import sys

import pytest
import torch

from electra.cli.main import main
from electra.engine import cpu_threads


def test_threads_flag_sets_torch_threads(tiny_pretrained, capsys):
    before = torch.get_num_threads()
    try:
        assert main(["detect", "--model", str(tiny_pretrained), "a b", "--threads", "1"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_bad_threads_value_is_one_clear_line(value, tiny_pretrained, capsys):
    assert main(["detect", "--model", str(tiny_pretrained), "a b", "--threads", value]) == 2
    err = capsys.readouterr().err
    assert err == f"electra: error: --threads must be a positive integer or auto, got {value!r}\n"


def test_wait_default_bounds_the_spin_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    cpu_threads.default_wait()  # torch is loaded here: OpenMP's settings are read, keep it short
    assert cpu_threads.os.environ["GOMP_SPINCOUNT"] == cpu_threads.SPIN_COUNT
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's choice is kept
    cpu_threads.default_wait()
    assert "GOMP_SPINCOUNT" not in cpu_threads.os.environ


@pytest.mark.parametrize("busy,spin", [(0.1, None), (0.7, "1000"), (math.inf, "1000")])
def test_a_quiet_machine_keeps_libgomps_long_spin(busy, spin, monkeypatch):
    """Before torch loads: idle cores keep libgomp's own spin (faster quiet); a busy machine, or
    one that cannot tell, gets the short one."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.setattr(cpu_threads, "busy_cores", lambda: busy)
    cpu_threads.default_wait()
    assert cpu_threads.os.environ.get("GOMP_SPINCOUNT") == spin


def test_busy_cores_reads_the_machine():
    busy = cpu_threads.busy_cores(0.02)
    assert 0 <= busy <= (os.cpu_count() or 1) + 1e-9 or busy == math.inf
