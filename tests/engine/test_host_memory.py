import platform
import resource

import pytest
import torch

from electra.engine.host_memory import keep_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc malloc's")
def test_freed_blocks_are_reused_without_faulting_their_pages_in_again():
    assert keep_freed_memory()

    def step():
        # 64 MiB: above glibc's largest mmap threshold, so by default every allocation is a fresh
        # mmap whose 16,384 pages all fault in when written.
        torch.empty(16 * 2**20).fill_(1.0)

    for _ in range(10):  # the heap grows to its high-water mark
        step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        step()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
    assert faults < 200
