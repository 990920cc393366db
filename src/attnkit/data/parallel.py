"""Reading a user's parallel corpus: aligned plain-text files (Moses style) or one TSV file.

Two layouts, as OpenNMT-py, fairseq and Marian take them:

- two aligned files, one sentence a line, line ``n`` of the source translating line ``n`` of
  the target (``train.de`` / ``train.en``);
- one TSV file of two tab-separated columns, source then target.

Either may be gzip-compressed (detected by the ``.gz`` suffix or the gzip magic bytes). Text is
UTF-8, with or without a byte-order mark; lines end in ``\\n`` or ``\\r\\n``. Lines are read as bytes
and decoded one by one, so a file of any size streams, and a byte that is not UTF-8 is reported
with its file, its line and its byte offset in the file. Every problem is a :class:`ParallelDataError`,
a one-line message naming the file (both files, with both counts, when aligned files differ in
length) and the line.

:func:`read_lines` is also how every other command reads a user's text file (``translate --file``,
``align``, ``evaluate``'s ``--src``/``--ref``/``--gold``, guided-alignment links), so each file
problem reads the same everywhere. A NUL byte is refused there too (named by line and offset): no
text has one, and a file that does is binary, UTF-16, or damaged; :mod:`attnkit.data.corpus` asks
for the NUL lines instead (``allow_nul=True``) to drop and count them.

Nothing is dropped here: :func:`read_parallel` yields every line pair, empty ones included; the
caller (:mod:`attnkit.data.corpus`) decides what to keep and counts what it drops.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import AttnkitError, no_such_file

__all__ = ["ParallelDataError", "count_lines", "decode_lines", "read_lines", "read_parallel"]

_GZIP_MAGIC = b"\x1f\x8b"
_BOM = "\ufeff"


class ParallelDataError(AttnkitError, ValueError):
    """A parallel corpus file cannot be read as given; the message names the file (and line)."""


def _open_binary(path: Path):
    if not path.exists():
        raise ParallelDataError(no_such_file(path))
    if not path.is_file():
        raise ParallelDataError(f"{path}: not a file")
    try:
        with open(path, "rb") as f:
            head = f.read(2)
        return gzip.open(path, "rb") if head == _GZIP_MAGIC or path.suffix == ".gz" else open(path, "rb")
    except OSError as exc:
        raise ParallelDataError(f"{path}: cannot read: {exc.strerror or exc}") from None


def decode_lines(
    raw_lines: Iterable[bytes],
    name: str | os.PathLike,
    *,
    allow_nul: bool = False,
    offset_note: str = "",
    first_line: int = 1,
    first_offset: int = 0,
) -> Iterator[tuple[int, str]]:
    """``(line number from 1, text)`` of each line of a byte stream (a file opened in binary mode,
    ``sys.stdin.buffer``), decoded as UTF-8, without the line ending and a leading byte-order mark.

    A byte sequence that is not UTF-8, or a NUL byte unless ``allow_nul``, is a :class:`ParallelDataError`
    naming ``name``, the line, and the byte offset from the start of the stream (``offset_note`` says
    what that offset counts, e.g. "of the uncompressed text" for a ``.gz`` file). A stretch of a file read
    by byte range (a part of a corpus job) gives its first line's number and byte offset, so both are the
    file's own (and only the file's line 1 loses a byte-order mark)."""
    offset = first_offset  # bytes of the stream before this line
    for n, raw in enumerate(raw_lines, start=first_line):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParallelDataError(
                f"{name}:{n}: not valid UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {offset + exc.start}"
                f"{offset_note} (column {exc.start + 1} of line {n}); convert the file to UTF-8 (e.g. iconv -f "
                "LATIN1 -t UTF-8), or drop the damaged bytes (iconv -c -f UTF-8 -t UTF-8)"
            ) from None
        if not allow_nul and "\0" in line:
            col = raw.index(b"\0")
            raise ParallelDataError(
                f"{name}:{n}: a NUL byte at byte offset {offset + col}{offset_note} (column {col + 1} of line {n}); "
                "text has none: the file is binary, UTF-16 (convert it: iconv -f UTF-16 -t UTF-8), or damaged"
            )
        offset += len(raw)
        if n == 1 and line.startswith(_BOM):
            line = line[1:]
        yield n, line.rstrip("\n").removesuffix("\r")


def read_lines(path: str | os.PathLike, *, allow_nul: bool = False) -> Iterator[tuple[int, str]]:
    """``(line number from 1, text)`` of every line of a UTF-8 text file (``.gz`` too), without the
    line ending (``\\n`` or ``\\r\\n``) and without a leading byte-order mark. A file with no line at
    all, a byte sequence that is not UTF-8, or a NUL byte (unless ``allow_nul``) is a
    :class:`ParallelDataError` naming the file, the line and the byte offset (:func:`decode_lines`)."""
    path = Path(path)
    n = 0
    with _open_binary(path) as f:
        note = " of the uncompressed text" if isinstance(f, gzip.GzipFile) else ""
        try:
            for n, line in decode_lines(f, path, allow_nul=allow_nul, offset_note=note):
                yield n, line
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise ParallelDataError(f"{path}:{n + 1}: cannot read: {exc}") from None
    if n == 0:
        raise ParallelDataError(f"{path}: the file is empty")


def count_lines(path: str | os.PathLike) -> int:
    """Lines of a text file (``.gz`` too), the last one counted even without a final newline."""
    path = Path(path)
    n, last = 0, b"\n"
    with _open_binary(path) as f:
        try:
            while chunk := f.read(1 << 20):
                n += chunk.count(b"\n")
                last = chunk[-1:]
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise ParallelDataError(f"{path}: cannot read: {exc}") from None
    return n + (last != b"\n")


_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff")  # UTF-16 (and UTF-32 LE) byte-order marks


def _check_not_wide(path: Path) -> None:
    """A file that starts with a UTF-16 byte-order mark (Windows' "Unicode" text) is refused by name
    before its lines are counted: its newlines are two bytes, so a line count would mislead."""
    with _open_binary(path) as f:
        try:
            head = f.read(2)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise ParallelDataError(f"{path}: cannot read: {exc}") from None
    if head in _WIDE_BOMS:
        raise ParallelDataError(
            f"{path}:1: not valid UTF-8: byte 0x{head[0]:02x} at byte offset 0 (a UTF-16 byte-order mark); "
            "convert the file to UTF-8 (iconv -f UTF-16 -t UTF-8)"
        )


def _check_aligned(src: Path, tgt: Path) -> None:
    """Both files there, UTF-8 rather than UTF-16, not empty, and of the same number of lines
    (checked before reading any)."""
    _check_not_wide(src)
    _check_not_wide(tgt)
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    for path, n in ((src, n_src), (tgt, n_tgt)):
        if n == 0:
            raise ParallelDataError(f"{path}: the file is empty")
    if n_src != n_tgt:
        raise ParallelDataError(
            f"{src} has {n_src} lines but {tgt} has {n_tgt}: aligned files need one sentence a line, "
            "line n of one translating line n of the other"
        )


def _read_aligned(src: Path, tgt: Path, allow_nul: bool) -> Iterator[tuple[int, str, str]]:
    for (n, a), (_, b) in zip(read_lines(src, allow_nul=allow_nul), read_lines(tgt, allow_nul=allow_nul)):
        yield n, a, b


def _read_tsv(path: Path, allow_nul: bool) -> Iterator[tuple[int, str, str]]:
    for n, line in read_lines(path, allow_nul=allow_nul):
        if not line.strip():
            yield n, "", ""  # a blank line: an empty pair, dropped and counted by the caller
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise ParallelDataError(f"{path}:{n}: expected 2 tab-separated columns (source, target), got {len(fields)}")
        yield n, fields[0], fields[1]


def read_parallel(
    files: tuple[str | os.PathLike, ...] | list, *, allow_nul: bool = False
) -> Iterator[tuple[int, str, str]]:
    """``(line number, source, target)`` of every line pair of ``files``: ``(SRC, TGT)``, two aligned
    text files, or ``(PAIRS.tsv,)``, one two-column TSV file. Sentences are returned as read (the
    line ending removed); empty lines give empty strings. A NUL byte is an error unless ``allow_nul``
    (then the line is returned with it, for the caller to drop)."""
    files = tuple(Path(f) for f in files)
    if len(files) == 2:
        _check_aligned(*files)
        return _read_aligned(*files, allow_nul)
    if len(files) == 1:
        if count_lines(files[0]) == 0:
            raise ParallelDataError(f"{files[0]}: the file is empty")
        return _read_tsv(files[0], allow_nul)
    raise ParallelDataError(f"give two aligned files (SRC TGT) or one TSV file, got {len(files)} files")
