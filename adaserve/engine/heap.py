"""Keep freed memory in the process, so every iteration's activations reuse warm pages.

glibc's malloc hands a large block back to the kernel when it is freed (an mmap'd block
is unmapped; a heap's free top beyond the trim threshold is released), and the next
iteration's allocation of the same size faults every page in again, zero-filled by the
kernel. Its thresholds move with what the process freed before, so whether a server
churns is decided by its history: measured on the 2-core dev CPU (2026-11-26, ten
concurrent 80-token requests against `adaserve serve`, /proc/<pid>/stat), a server took
0.36-1.26 million minor faults and 3.7-4.3 s of system time in 21 s, a server of the other
policy 13-256 thousand. The faults land inside the target's verify forward, on both OpenMP
threads, so that server's every step was 10-20% slower, and which policy drew the slow
process decided a served comparison (docs/engine.md "Freed memory kept").

Fixed thresholds stop it: blocks up to 32 MiB (glibc's largest mmap threshold) come from
the heap, and up to 256 MiB of free heap is kept rather than trimmed. The same load then
took 85-8,928 faults and 0.2-0.3 s of system time under either policy (four starts). The cost is
resident memory: a heap that once held a long prompt's activations keeps them, at most
the trim threshold more than the live data.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = 256 << 20

_kept: bool | None = None


def keep_freed_memory() -> bool:
    """Set the fixed thresholds once per process; True where glibc took them (Linux with
    glibc), False elsewhere (macOS, musl), where the allocator's own policy stays."""
    global _kept
    if _kept is None:
        _kept = _mallopt()
    return _kept


def _mallopt() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # musl exports a mallopt that does nothing and returns 0
    return (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
