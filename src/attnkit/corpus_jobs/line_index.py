"""A memory-mapped index of the byte offsets where each line of a text file starts.

Built once per input file and kept beside the job's output, so every rank reads only its own
lines (``seek`` to the first offset, read up to the next part's offset) and no rank holds the
whole file in memory: the index is a ``uint64`` array of ``n_lines + 1`` offsets (the last one is
the file size), read through ``numpy.memmap``. The index is keyed by the input's size and
modification time; a changed input gets a new index.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnkit.paths import atomic_write_bytes, atomic_write_text

__all__ = ["LineIndex", "input_identity", "open_line_index"]

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


def _scan_offsets(path: Path) -> np.ndarray:
    """Offsets of every line start (a final line without ``\\n`` counts), then the file size."""
    starts = [np.zeros(1, dtype=np.uint64)]
    pos = 0
    last = b""
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            arr = np.frombuffer(chunk, dtype=np.uint8)
            nl = np.flatnonzero(arr == 10).astype(np.uint64) + np.uint64(pos + 1)
            starts.append(nl)
            pos += len(chunk)
            last = chunk[-1:]
    offsets = np.concatenate(starts)
    if pos == 0:
        return np.zeros(1, dtype=np.uint64)  # empty file: no lines
    if last == b"\n":
        return offsets  # the last start equals the size already
    return np.concatenate([offsets, np.array([pos], dtype=np.uint64)])


def open_line_index(path: str | os.PathLike, index_dir: str | os.PathLike) -> LineIndex:
    """Open the line index of ``path`` kept in ``index_dir``, building it first if it is missing or stale.

    Written atomically (offsets first, then a small JSON key naming the input's identity), so a
    reader never trusts a half-built index. In a multi-process job rank 0 calls this first and the
    others after a barrier.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"input file {str(path)!r} does not exist")
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
        offsets = _scan_offsets(path)
        atomic_write_bytes(data_file, offsets.tobytes())
        atomic_write_text(key_file, json.dumps(ident, sort_keys=True))
    mm = np.memmap(data_file, dtype=np.uint64, mode="r")
    return LineIndex(path=path, offsets=mm)
