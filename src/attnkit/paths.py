"""Where attnkit keeps its data, and how every file it writes is written (atomically).

Everything attnkit prepares (corpora, splits) lives under one folder, ``$ATTNKIT_HOME``
(default ``~/.cache/attnkit``), so it is prepared once, cached, and easy to delete.
Files are written atomically (temp file in the same folder, fsync, ``os.replace``) so an
interrupted run never leaves a half-written file that a later run would trust.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["COMPLETE_NAME", "atomic_write_bytes", "atomic_write_text", "attnkit_home", "fsync_dir"]

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


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike, mode: str = "wb", **open_kwargs) -> Iterator[IO]:
    """``with atomic_writer(path) as f:`` write ``path`` atomically, streaming: a temp file in the same
    folder, fsync, ``os.replace`` when the block ends, then the folder fsynced; on an error the temp file
    is removed and ``path`` is untouched. ``mode`` (``"wb"`` or ``"w"``) and ``open_kwargs`` as for ``open``.

    Readers see either the old file or the complete new one, never a partial write. The file gets the
    permissions any new file of the user's gets (``0o666`` less the umask: ``-rw-r--r--`` under the usual
    022), not the owner-only ``0o600`` of :func:`tempfile.mkstemp`'s private temp files.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_temp_file(path)
    try:
        with os.fdopen(fd, mode, **open_kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def _new_temp_file(path: Path) -> tuple[int, str]:
    """``(fd, name)`` of a new, empty temp file beside ``path`` (``.NAME.XXXXXXXX.tmp``), opened for writing,
    created with mode ``0o666`` so the kernel applies the umask (as for any file the user's programs make);
    exclusive, so a name already taken is skipped."""
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:  # 48 random bits taken already: draw again
            continue
    raise FileExistsError(f"no free temp file name beside {path}")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_writer`)."""
    with atomic_writer(path) as f:
        f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    return atomic_write_bytes(path, text.encode(encoding))


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
