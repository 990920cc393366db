"""An on-disk cache of token ids that training memory-maps: corpora bigger than memory.

The layout is fairseq's ``MMapIndexedDataset`` reduced to what a translation corpus needs: for each
split and side, ``SPLIT.SIDE.bin`` holds every sentence's token ids back to back (``uint16`` when
the vocabulary fits, else ``int32``) and ``SPLIT.SIDE.idx`` the ``n + 1`` ``int64`` offsets, so
sentence ``i`` is ``bin[idx[i]:idx[i + 1]]``. Both are read with ``numpy.memmap``: a sentence costs
only the pages it touches, and those pages belong to the page cache (shared, evictable), not to the
process's anonymous memory. :func:`build_token_cache` tokenises a corpus once, in parallel over
the machine's cores (``multiprocessing``; each worker encodes chunks of lines with its own copy of
the sentencepiece model, and the parent writes the chunks in order, so the cache is the same
whatever the number of workers).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

__all__ = ["TokenArray", "build_token_cache", "cache_workers", "token_dtype"]

#: Lines per chunk handed to a worker: large enough that a chunk is mostly encoding, small enough
#: that ``workers × WINDOW`` chunks in flight stay a few MB.
CHUNK_LINES = 20_000
WINDOW = 4


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest dtype that holds every id of a ``vocab_size`` vocabulary: uint16 up to 65,536."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def cache_workers() -> int:
    """The cores this process may run on (``sched_getaffinity``, else ``cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class TokenArray:
    """One side of one split: ``len(a)`` sentences, ``a[i]`` the ids of sentence ``i`` (a read-only
    uint16/int32 view into the map), ``a.lengths`` every sentence's length (int64, in memory)."""

    def __init__(self, prefix: str | os.PathLike, dtype: str | np.dtype):
        prefix = Path(prefix)
        self.path = prefix
        self.offsets = np.memmap(prefix.with_name(prefix.name + ".idx"), dtype=np.int64, mode="r")
        n_ids = int(self.offsets[-1])
        bin_path = prefix.with_name(prefix.name + ".bin")
        if n_ids == 0:  # numpy cannot map an empty file
            self.ids = np.zeros(0, dtype=np.dtype(dtype))
        else:
            self.ids = np.memmap(bin_path, dtype=np.dtype(dtype), mode="r", shape=(n_ids,))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


_worker_tokenizers: tuple = ()


def _init_worker(src_proto: bytes, tgt_proto: bytes) -> None:
    global _worker_tokenizers
    import sentencepiece as spm

    toks = []
    for proto in (src_proto, tgt_proto):
        sp = spm.SentencePieceProcessor()
        sp.LoadFromSerializedProto(proto)
        toks.append(sp)
    _worker_tokenizers = tuple(toks)


def _encode_chunk(chunk: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(src ids, src lengths, tgt ids, tgt lengths)`` of a chunk of pairs (flat int64 arrays)."""
    out = []
    for side, sp in enumerate(_worker_tokenizers):
        encoded = sp.encode([pair[side] for pair in chunk], out_type=int)
        lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
        flat = np.fromiter((t for e in encoded for t in e), dtype=np.int64, count=int(lengths.sum()))
        out += [flat, lengths]
    return tuple(out)  # type: ignore[return-value]


def _chunks(pairs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    chunk = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def build_token_cache(
    pairs: Iterable[tuple[str, str]],
    prefix: str | os.PathLike,
    src_proto: bytes,
    tgt_proto: bytes,
    vocab_size: int,
    *,
    workers: int | None = None,
    chunk_lines: int = CHUNK_LINES,
) -> int:
    """Tokenise ``pairs`` (an iterable of ``(source, target)`` text, streamed) into
    ``PREFIX.src.{bin,idx}`` and ``PREFIX.tgt.{bin,idx}``; returns the number of pairs.

    ``src_proto`` / ``tgt_proto`` are the serialized sentencepiece models (the same bytes for a
    joint vocabulary). ``workers`` processes (default: :func:`cache_workers`) encode chunks of
    ``chunk_lines`` pairs; at most ``WINDOW × workers`` chunks are in flight, so memory stays
    bounded whatever the corpus size.
    """
    workers = cache_workers() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    dtype = token_dtype(vocab_size)
    prefix = Path(prefix)
    stack = contextlib.ExitStack()
    names = ("src.bin", "src.idx", "tgt.bin", "tgt.idx")
    files = {name: stack.enter_context(prefix.with_name(f"{prefix.name}.{name}").open("wb")) for name in names}
    ends = {"src": 0, "tgt": 0}
    n = 0

    def write(result) -> None:
        nonlocal n
        for side, (flat, lengths) in zip(("src", "tgt"), (result[:2], result[2:])):
            files[f"{side}.bin"].write(flat.astype(dtype).tobytes())
            offsets = ends[side] + np.cumsum(lengths)
            files[f"{side}.idx"].write(offsets.astype(np.int64).tobytes())
            if len(offsets):
                ends[side] = int(offsets[-1])
        n += len(result[1])

    with stack:
        for side in ("src", "tgt"):
            files[f"{side}.idx"].write(np.zeros(1, dtype=np.int64).tobytes())
        chunks = _chunks(pairs, chunk_lines)
        if workers == 1:
            _init_worker(src_proto, tgt_proto)
            for chunk in chunks:
                write(_encode_chunk(chunk))
        else:
            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
            with mp.get_context(method).Pool(workers, _init_worker, (src_proto, tgt_proto)) as pool:
                while True:  # a bounded window of chunks at a time: imap would read the whole input ahead
                    window = [c for _, c in zip(range(WINDOW * workers), chunks)]
                    if not window:
                        break
                    for result in pool.imap(_encode_chunk, window):
                        write(result)
    return n
