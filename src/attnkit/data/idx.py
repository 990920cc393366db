"""A small reader (and writer) for IDX files, the format of MNIST and Fashion-MNIST.

We read IDX ourselves rather than pull in a dataset library: the format is a
4-byte magic number (two zero bytes, a dtype code, the number of dimensions),
then one big-endian uint32 per dimension, then the data, big-endian, row-major.
Files may be gzip-compressed (``.gz``, detected by content, not by name).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

__all__ = [
    "FASHION_CLASSES",
    "FASHION_MNIST_ROOT",
    "FASHION_WORDS",
    "load_fashion_mnist",
    "read_idx",
    "write_idx",
]

FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"

#: Fashion-MNIST class names, indexed by label.
FASHION_CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
#: One lower-case word per class, used in scene captions (same order as FASHION_CLASSES).
FASHION_WORDS: tuple[str, ...] = (
    "tshirt",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "boot",
)

# IDX dtype code -> numpy dtype (big-endian where it matters).
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_CODES: dict[str, int] = {
    "u1": 0x08,
    "i1": 0x09,
    "i2": 0x0B,
    "i4": 0x0C,
    "f4": 0x0D,
    "f8": 0x0E,
}
_INSTALL_HINT = "install it with `apt-get install dataset-fashion-mnist`"


def _read_bytes(path: Path) -> bytes:
    """Read the whole file, gunzipping when it starts with the gzip magic bytes."""
    if not path.is_file():
        raise FileNotFoundError(f"IDX file not found: {path} ({_INSTALL_HINT})")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError) as e:  # truncated or corrupt gzip stream
            raise ValueError(f"IDX file {path}: corrupt or truncated gzip data ({e})") from e
    return raw


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (plain or gzip) into a numpy array of its stored shape.

    Multi-byte types are converted to native byte order. Raises FileNotFoundError
    for a missing file and ValueError (naming the file) for a bad magic number,
    an unknown dtype code, or a size that does not match the header.
    """
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise ValueError(f"IDX file {path}: truncated header, expected at least 4 bytes, got {len(raw)}")
    zero0, zero1, code, ndim = raw[0], raw[1], raw[2], raw[3]
    if zero0 != 0 or zero1 != 0 or code not in _IDX_DTYPES:
        raise ValueError(
            f"IDX file {path}: bad magic number 0x{raw[:4].hex()} "
            f"(expected 0x0000 then a dtype code in {sorted(hex(c) for c in _IDX_DTYPES)} then ndim)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"IDX file {path}: truncated header, expected {header} bytes for {ndim} dims, got {len(raw)}")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        what = "truncated" if len(raw) < expected else "has trailing bytes"
        raise ValueError(
            f"IDX file {path}: {what}: expected {expected} bytes for shape {dims} of {dtype}, got {len(raw)}"
        )
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def write_idx(path: str | os.PathLike, array: np.ndarray, *, compress: bool | None = None) -> Path:
    """Write ``array`` as an IDX file; gzip it when ``compress`` (default: path ends in ``.gz``).

    Exists mainly so tests can make IDX files; it is the exact inverse of read_idx.
    """
    path = Path(path)
    array = np.asarray(array)
    key = array.dtype.kind + str(array.dtype.itemsize)
    if key not in _IDX_CODES:
        raise TypeError(f"array: dtype {array.dtype} has no IDX code (use one of u1, i1, i2, i4, f4, f8)")
    if array.ndim > 255:
        raise ValueError(f"array: IDX supports at most 255 dims, got {array.ndim}")
    code = _IDX_CODES[key]
    body = (
        bytes([0, 0, code, array.ndim])
        + np.asarray(array.shape, dtype=">u4").tobytes()
        + np.ascontiguousarray(array, dtype=_IDX_DTYPES[code]).tobytes()
    )
    if compress is None:
        compress = path.suffix == ".gz"
    if compress:
        body = gzip.compress(body, mtime=0)
    from ..paths import atomic_write_bytes

    return atomic_write_bytes(path, body)


def _find(root: Path, stem: str) -> Path:
    """Return root/stem.gz or root/stem, whichever exists (the .gz name in the error if neither)."""
    for name in (stem + ".gz", stem):
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(f"Fashion-MNIST file not found: {root / (stem + '.gz')} ({_INSTALL_HINT})")


def load_fashion_mnist(split: str, root: str | os.PathLike = FASHION_MNIST_ROOT) -> tuple[np.ndarray, np.ndarray]:
    """Load a Fashion-MNIST split: ``(images uint8 (N, 28, 28), labels int64 (N,))``.

    ``split`` is ``"train"`` (60,000 photos) or ``"test"`` (10,000). Files are the
    standard IDX names, gzip or plain, under ``root`` (the Debian package's folder
    by default).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', got {split!r}")
    root = Path(root)
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(_find(root, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(_find(root, f"{prefix}-labels-idx1-ubyte"))
    if images.ndim != 3 or images.dtype != np.uint8:
        raise ValueError(f"Fashion-MNIST {split} images: expected uint8 (N, 28, 28), got {images.dtype} {images.shape}")
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise ValueError(f"Fashion-MNIST {split} labels: expected shape ({images.shape[0]},), got {labels.shape}")
    labels = labels.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= len(FASHION_CLASSES)):
        raise ValueError(f"Fashion-MNIST {split} labels: values outside 0..{len(FASHION_CLASSES) - 1}")
    return images, labels
