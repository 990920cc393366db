"""Memory a request borrowed, handed back to the system (glibc's ``malloc_trim``).

``attnkit serve`` runs with the allocator settings of every ``attnkit`` command
(:mod:`attnkit.cli.allocator`: freed blocks up to its ``MMAP_THRESHOLD_MAX`` stay in the process for the next step, and the
heap is never trimmed), which spare the fast lane's decoder steps their page faults. A request that
borrows a lot at once (an image upload: its base64 text, its bytes, its decoded pixels) would then keep the
server's resident size at that peak for good, and a burst of them would add up. So the routes that borrow
much call :func:`give_back` when they are done: glibc's ``malloc_trim(0)`` returns every free page of every
arena to the system (a few milliseconds over a heap of a few hundred MB), while the settings stay as they
are for everything else. Other C libraries: nothing happens.
"""

from __future__ import annotations

import ctypes
import threading

from ..glibc import glibc

__all__ = ["give_back"]

_TRIM = None
_LOCK = threading.Lock()


def _malloc_trim():
    global _TRIM
    if _TRIM is None:
        libc = glibc("malloc_trim")
        _TRIM = False if libc is None else libc.malloc_trim
        if _TRIM:
            _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
    return _TRIM


def give_back() -> bool:
    """Return the process's free heap pages to the system (glibc); True when it could. One call at a time."""
    trim = _malloc_trim()
    if not trim:
        return False
    with _LOCK:
        trim(0)
    return True
