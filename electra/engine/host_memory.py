"""Host memory for training on CPU: keep the pages malloc frees instead of handing them back.

A training step allocates and frees the same activation buffers every step. By default glibc's
malloc serves large blocks (above 128 KiB, a threshold that adapts up to 32 MiB) with fresh mmaps
and returns the top of its heap to the kernel once it holds more than the trim threshold free, so
every step faults its activations' pages in again and the kernel zeroes each one: for the `small`
preset at batch 32 that is about 170,000 minor faults and 0.45 s of kernel time a step, near a
fifth of the step (benchmarks/RESULTS.md). With mmap off and trimming out of reach, freed blocks go
back to malloc's free lists and the next step reuses them: under 1,000 faults a step.

The cost is that the process keeps its heap at the high-water mark until it exits, which a
training run reaches in its first step anyway. On GPU the activations live on the device, so only
CPU runs call this; where the C library has no `mallopt` (macOS, Windows) it does nothing.
"""

from __future__ import annotations

import ctypes

_M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
_M_MMAP_MAX = -4
_INT_MAX = 2**31 - 1


def keep_freed_memory() -> bool:
    """Tells malloc to serve every block from its heap and never trim it. Applies to the whole
    process from this call on; returns whether the C library took both settings."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, _INT_MAX) == 1
