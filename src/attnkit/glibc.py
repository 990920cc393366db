"""The process's C library when it is glibc: the one lookup for attnkit's calls into it (``mallopt`` for the
``attnkit`` command's allocator settings, :mod:`attnkit.cli.allocator`; ``malloc_trim`` for the server's memory
given back, :mod:`attnkit.explorer.memory`). musl, macOS and a library that cannot be opened: None, and the
callers leave the allocator as it is. Standard library only."""

from __future__ import annotations

import ctypes
import sys

__all__ = ["glibc"]


def glibc(*functions: str) -> ctypes.CDLL | None:
    """The C library this process already runs on, when it is glibc (on Linux, with ``gnu_get_libc_version``)
    and has every one of ``functions``; None otherwise. Looked up anew at each call (cheap: the library is
    already loaded)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not all(hasattr(libc, name) for name in ("gnu_get_libc_version", *functions)):
        return None
    return libc
