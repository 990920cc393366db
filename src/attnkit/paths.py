"""Where attnkit keeps its data, and how every file it writes is written (atomically).

Everything attnkit prepares (corpora, splits) lives under one folder, ``$ATTNKIT_HOME``
(default ``~/.cache/attnkit``), so it is prepared once, cached, and easy to delete.
Every file attnkit writes, its caches and every output file a command is given (``--output``, ``--plot``,
``--html``, a shortlist, a part of a corpus job and its assembly), goes through one helper,
:func:`atomic_writer`: a temp file in the same folder, fsync, ``os.replace``. So a file appears whole
or not at all: an interrupted or failed run never leaves a half-written file that a later run or a user
would trust, and never truncates a user's earlier file of that name.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = [
    "COMPLETE_NAME",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_writer",
    "attnkit_home",
    "current_umask",
    "fsync_dir",
]

#: The manifest an attnkit checkpoint folder is written with, last (attnkit.training.checkpoint): a folder
#: without it is incomplete, or not attnkit's (attnkit.pretrained.hf_source reads it as a Hugging Face one)
COMPLETE_NAME = "COMPLETE"


def attnkit_home(home: str | os.PathLike | None = None) -> Path:
    """Return the attnkit data folder: ``home`` if given, else ``$ATTNKIT_HOME``, else ``~/.cache/attnkit``.

    The folder is not created here; writers create the sub-folders they need.
    """
    if home is not None:
        if not isinstance(home, (str, os.PathLike)):
            raise TypeError(f"home must be a str or os.PathLike, got {type(home).__name__}")
        return Path(home).expanduser()
    env = os.environ.get("ATTNKIT_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "attnkit"


def current_umask() -> int:
    """The process's file mode creation mask, read without changing it where the system says it
    (Linux's ``/proc/self/status``); elsewhere set and put back at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_writer(
    path: str | os.PathLike, mode: str = "wb", *, temporary: str | os.PathLike | None = None, **open_kwargs
) -> Iterator[IO]:
    """``with atomic_writer(path) as f:`` write ``path`` atomically, streaming: a temp file in the same
    folder (``.NAME.XXXXXXXX.tmp``), flushed and fsynced when the block ends, then ``os.replace``-d onto
    ``path`` and the folder fsynced. On an exception (a bad input line, Ctrl-C) the temp file is removed
    and ``path`` is untouched: an earlier file of that name is kept as it was. Killed outright (SIGKILL,
    power loss), the same holds for ``path``; only the hidden temp file may be left.

    The new file gets the permissions a plain ``open(path, "w")`` gives, ``0o666`` less the umask (the
    temp file ``mkstemp`` makes is ``0o600``). ``mode`` (``"wb"`` or ``"w"``) and ``open_kwargs`` as for
    ``open``; the file object may be handed to any writer of file objects (``Figure.savefig``).
    ``temporary``: a fixed name in the same folder for the temp file instead of a fresh one, for a folder
    whose manifest names its temporaries before they are written (:class:`attnkit.output_folder.WrittenFolder`);
    a file there is overwritten (a link there is refused, not followed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if temporary is None:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    else:
        tmp = Path(temporary)
        if tmp.parent.resolve() != path.parent.resolve() or tmp.name == path.name:
            raise ValueError(f"temporary must be another name in {path.parent}, got {temporary}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, mode, **open_kwargs) as f:
            os.fchmod(f.fileno(), 0o666 & ~current_umask())
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, temporary: str | os.PathLike | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_writer`, and for ``temporary``)."""
    with atomic_writer(path, temporary=temporary) as f:
        f.write(data)
    return Path(path)


def atomic_write_text(
    path: str | os.PathLike, text: str, encoding: str = "utf-8", *, temporary: str | os.PathLike | None = None
) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    return atomic_write_bytes(path, text.encode(encoding), temporary=temporary)


def fsync_dir(folder: Path) -> None:
    """Make the rename itself durable; best effort (not every platform can fsync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
