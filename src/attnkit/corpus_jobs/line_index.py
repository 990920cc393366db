"""A memory-mapped index of the byte offsets where each line of a text file starts.

Built once per input file and kept beside the job's output, so every rank reads only its own
lines (``seek`` to the first offset, read up to the next part's offset) and no rank holds the
whole file in memory: the index is a ``uint64`` array of ``n_lines + 1`` offsets (the last one is
the file size), read through ``numpy.memmap``. The index is keyed by the input's size and
modification time; a changed input gets a new index.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnkit.errors import no_such_file
from attnkit.paths import atomic_write_text, atomic_writer

__all__ = ["LineIndex", "input_identity", "open_line_index", "remove_line_index"]

_CHUNK = 1 << 20  # bytes read at a time while indexing


def input_identity(path: str | os.PathLike) -> dict:
    """What identifies an input file's contents for reuse: its resolved path, size and mtime (ns)."""
    p = Path(path)
    st = p.stat()
    return {"path": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


@dataclass(frozen=True)
class LineIndex:
    """Start offsets of the lines of ``path``: ``offsets[i]`` is where line ``i`` (0-based) starts."""

    path: Path
    offsets: np.ndarray  # (n_lines + 1,) uint64, memory-mapped

    @property
    def n_lines(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def read_bytes(self, start: int, stop: int) -> bytes:
        """The raw bytes of lines ``start`` (inclusive) to ``stop`` (exclusive), line ends kept."""
        if not 0 <= start <= stop <= self.n_lines:
            raise ValueError(f"line range [{start}, {stop}) is outside 0..{self.n_lines}")
        lo, hi = int(self.offsets[start]), int(self.offsets[stop])
        with open(self.path, "rb") as f:
            f.seek(lo)
            return f.read(hi - lo)

    def read_lines(self, start: int, stop: int, encoding: str = "utf-8") -> list[str]:
        """Lines ``start`` to ``stop`` as text, without their line ends (as ``str.splitlines`` on ``\\n``)."""
        data = self.read_bytes(start, stop).decode(encoding)
        lines = data.split("\n")
        if data.endswith("\n"):
            lines.pop()
        return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _write_offsets(path: Path, data_file: Path) -> None:
    """Stream the offsets of every line start (a final line without ``\\n`` counts), then the file size,
    to ``data_file`` atomically, a chunk at a time: memory stays bounded whatever the input's size."""
    with atomic_writer(data_file) as out, open(path, "rb") as f:
        pos, last = 0, b""
        out.write(np.zeros(1, dtype=np.uint64).tobytes())  # line 1 starts at 0
        while chunk := f.read(_CHUNK):
            arr = np.frombuffer(chunk, dtype=np.uint8)
            out.write((np.flatnonzero(arr == 10).astype(np.uint64) + np.uint64(pos + 1)).tobytes())
            pos += len(chunk)
            last = chunk[-1:]
        if pos and last != b"\n":
            out.write(np.array([pos], dtype=np.uint64).tobytes())  # the unterminated last line ends at EOF


def open_line_index(path: str | os.PathLike, index_dir: str | os.PathLike) -> LineIndex:
    """Open the line index of ``path`` kept in ``index_dir``, building it first if it is missing or stale.

    Written atomically (offsets first, then a small JSON key naming the input's identity), so a
    reader never trusts a half-built index. In a multi-process job rank 0 calls this first and the
    others after a barrier.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(no_such_file(path))
    index_dir = Path(index_dir)
    ident = input_identity(path)
    key_file = index_dir / "line_index.json"
    data_file = index_dir / "line_index.u64"
    fresh = False
    if key_file.is_file() and data_file.is_file():
        try:
            fresh = json.loads(key_file.read_text(encoding="utf-8")) == ident
        except (OSError, ValueError):
            fresh = False
    if not fresh:
        _write_offsets(path, data_file)
        atomic_write_text(key_file, json.dumps(ident, sort_keys=True))
    mm = np.memmap(data_file, dtype=np.uint64, mode="r")
    return LineIndex(path=path, offsets=mm)


def remove_line_index(index_dir: str | os.PathLike) -> None:
    """Delete the index files :func:`open_line_index` wrote in ``index_dir`` (those two names only)."""
    for name in ("line_index.json", "line_index.u64"):
        with contextlib.suppress(FileNotFoundError):
            (Path(index_dir) / name).unlink()
        for leftover in Path(index_dir).glob(f".{name}.*.tmp"):  # a write of ours cut short by a kill
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
