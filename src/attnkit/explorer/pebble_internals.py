"""The one place attnkit touches ``pebble``'s private internals.

:class:`pebble.ProcessPool` does not say which processes it runs. The server's job queue
(:meth:`attnkit.explorer.jobs.JobQueue.worker_pids`) reads them from the pool's private
``_pool_manager.worker_manager.workers`` (a dict of ``multiprocessing`` processes), for the tests and the
memory benchmark that count the workers' memory. :func:`worker_pids` is that read, failing with a
:class:`PebbleInternalsError` naming the internal and the installed version when it is missing.

**Version check.** At import the installed ``Pebble`` is compared with :data:`SUPPORTED` (the range this
module was written for; the project pins 5.2.3). Outside it a :class:`UserWarning` is issued, not an
error: only the worker count reads these internals, and it fails with a clear message at its first use
if they moved; the pool itself (running, timing out and cancelling jobs) uses pebble's public API only,
so refusing to start the server would block it for nothing.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..errors import AttnkitError
from ..version import installed_version, outside_range

__all__ = ["SUPPORTED", "PebbleInternalsError", "check_version", "worker_pids"]

#: ``(minimum, below)``: the ``Pebble`` releases this module was written for (``>=5.1,<6``).
SUPPORTED = ("5.1", "6")


class PebbleInternalsError(AttnkitError, RuntimeError):
    """An internal of ``pebble`` that attnkit relies on is missing (another version than :data:`SUPPORTED`)."""


def check_version() -> str | None:
    """Warn (one line: the library, the installed version, the supported range) when the installed
    ``Pebble`` lies outside :data:`SUPPORTED`; returns the message, or None when inside it."""
    message = outside_range("pebble", installed_version("Pebble"), *SUPPORTED)
    if message is not None:
        warnings.warn(f"{message}; the server's worker count may fail", UserWarning, stacklevel=2)
    return message


def worker_pids(pool: Any) -> list[int]:
    """The process ids of a :class:`pebble.ProcessPool`'s live workers (empty before it has started any)."""
    manager = getattr(pool, "_pool_manager", None)
    workers = getattr(getattr(manager, "worker_manager", None), "workers", None)
    if not isinstance(workers, dict):
        low, high = SUPPORTED
        raise PebbleInternalsError(
            f"pebble {installed_version('Pebble') or '(not installed)'} has no ProcessPool._pool_manager."
            f"worker_manager.workers, which the server's worker count relies on (written for pebble >={low},<{high})"
        )
    return [w.pid for w in workers.values()]


check_version()
