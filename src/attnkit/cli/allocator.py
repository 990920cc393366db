"""The C allocator of an ``attnkit`` process: freed memory kept for the next step (glibc ``mallopt``).

glibc's ``malloc`` serves each block above its mmap threshold (at first small, raised to the largest block
freed so far, up to a cap) from pages of its own, unmapped again when the block is freed, and hands the top of
the heap back to the system once more than its trim threshold is free there. A decoder step or a training
step allocates and frees tensors of changing sizes in the MiB range (a batch's logits, rows × vocabulary
floats; a layer's activations), so their pages keep leaving the process and coming back as page faults the
kernel must zero: a measurable share of a beam search and of a training step (``benchmarks/RESULTS.md``,
"Freed memory kept in the process"). With the mmap threshold at glibc's maximum and trimming off, a freed
block stays in the heap for the next step. The price is a resident size that stays at its peak.

This is the command's choice, made once in :func:`attnkit.cli.main`; importing attnkit as a library
changes nothing. ``ATTNKIT_MALLOC=default`` leaves glibc as it is; other C libraries (musl, macOS) are
left alone. No torch import here: ``translate --engine ctranslate2`` runs without it.
"""

from __future__ import annotations

import ctypes
import os

from ..glibc import glibc

__all__ = ["ENV", "MMAP_THRESHOLD_MAX", "NO_TRIM", "keep_freed_memory"]

#: ``ATTNKIT_MALLOC=default``: leave the C allocator as it is.
ENV = "ATTNKIT_MALLOC"

#: ``mallopt`` parameters (glibc's ``malloc.h``).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

#: glibc's largest mmap threshold on a 64-bit system (``4 * 1024 * 1024 * sizeof(long)``): blocks up to
#: 32 MiB come from the heap; larger ones keep pages of their own.
MMAP_THRESHOLD_MAX = 32 << 20

#: A trim threshold no heap reaches (the largest C ``int``): the heap's free top is never handed back.
NO_TRIM = 2**31 - 1


def keep_freed_memory() -> bool:
    """Set glibc's mmap threshold to :data:`MMAP_THRESHOLD_MAX` and its trim threshold to
    :data:`NO_TRIM` for this process; True when both were set, False where ``$ATTNKIT_MALLOC`` is
    ``default`` or the C library is not glibc (nothing is changed then)."""
    if os.environ.get(ENV, "").strip().lower() == "default":
        return False
    libc = glibc("mallopt")  # glibc only (musl ignores these)
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, NO_TRIM))
