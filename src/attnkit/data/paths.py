"""Where attnkit keeps prepared data, and how it writes files safely.

All prepared data lives under one folder, ``$ATTNKIT_HOME`` (default
``~/.cache/attnkit``), so that a run can find what an earlier run prepared and a
user can move or delete it in one place.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["attnkit_home", "atomic_write_bytes"]


def attnkit_home() -> Path:
    """Return the data root: env ``ATTNKIT_HOME`` if set and non-empty, else ``~/.cache/attnkit``.

    The folder is not created here; writers create the sub-folders they need.
    """
    env = os.environ.get("ATTNKIT_HOME", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "attnkit"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, ``os.replace``.

    A reader therefore sees either the old file or the complete new one, never a
    half-written file, even if the process is killed mid-write.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path
