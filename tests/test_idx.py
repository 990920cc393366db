"""IDX reader: round trip, bad magic, truncation, and the real Fashion-MNIST files."""

import gzip
from pathlib import Path

import numpy as np
import pytest

from attnkit.data.idx import FASHION_CLASSES, FASHION_WORDS, load_fashion_mnist, read_idx, write_idx

FMNIST = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.parametrize("name", ["a.idx", "a.idx.gz"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_round_trip(tmp_path, name, dtype):
    a = (np.arange(2 * 3 * 5) - 7).astype(dtype).reshape(2, 3, 5)
    if dtype == np.uint8:
        a = np.arange(30, dtype=np.uint8).reshape(2, 3, 5)
    p = write_idx(tmp_path / name, a)
    assert (p.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    b = read_idx(p)
    assert b.dtype == a.dtype.newbyteorder("=") and b.shape == a.shape
    np.testing.assert_array_equal(a, b)


def test_header_is_big_endian(tmp_path):
    p = tmp_path / "x.idx"
    p.write_bytes(bytes([0, 0, 0x0C, 1]) + (2).to_bytes(4, "big") + (258).to_bytes(4, "big") + (1).to_bytes(4, "big"))
    assert read_idx(p).tolist() == [258, 1]


def test_missing_file_names_it_and_the_package(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.idx.*apt-get install dataset-fashion-mnist"):
        read_idx(tmp_path / "nope.idx")
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        load_fashion_mnist("train", root=tmp_path)


def test_bad_magic(tmp_path):
    p = tmp_path / "bad.idx"
    p.write_bytes(b"\x01\x02\x08\x01" + bytes(8))
    with pytest.raises(ValueError, match=r"bad\.idx.*bad magic"):
        read_idx(p)
    p.write_bytes(b"\x00\x00\x42\x01" + bytes(8))  # unknown dtype code
    with pytest.raises(ValueError, match="bad magic"):
        read_idx(p)


@pytest.mark.parametrize("gz", [False, True])
def test_truncated(tmp_path, gz):
    full = (tmp_path / "full.idx").as_posix()
    write_idx(full, np.zeros((4, 5), np.uint8), compress=False)
    raw = Path(full).read_bytes()[:-3]  # header 12 bytes + 20 data bytes, minus 3
    p = tmp_path / ("cut.idx.gz" if gz else "cut.idx")
    p.write_bytes(gzip.compress(raw) if gz else raw)
    with pytest.raises(ValueError, match=r"cut\.idx.*truncated.*expected 32 bytes.*got 29"):
        read_idx(p)


def test_truncated_gzip_stream(tmp_path):
    p = tmp_path / "cut.gz"
    p.write_bytes(gzip.compress(bytes([0, 0, 8, 1, 0, 0, 0, 100]) + bytes(100))[:-10])
    with pytest.raises(ValueError, match=r"cut\.gz"):
        read_idx(p)


def test_classes_and_words():
    assert len(FASHION_CLASSES) == len(FASHION_WORDS) == 10
    assert FASHION_CLASSES[0] == "T-shirt/top" and FASHION_CLASSES[9] == "Ankle boot"
    assert all(w.isalpha() and w.islower() for w in FASHION_WORDS) and len(set(FASHION_WORDS)) == 10


def test_bad_split():
    with pytest.raises(ValueError, match="split"):
        load_fashion_mnist("valid")


@pytest.mark.skipif(not FMNIST.is_dir(), reason="dataset-fashion-mnist not installed")
@pytest.mark.parametrize("split,n", [("train", 60000), ("test", 10000)])
def test_real_fashion_mnist(split, n):
    x, y = load_fashion_mnist(split)
    assert x.shape == (n, 28, 28) and x.dtype == np.uint8
    assert y.shape == (n,) and y.dtype == np.int64
    assert y.min() == 0 and y.max() == 9
    assert np.bincount(y, minlength=10).tolist() == [n // 10] * 10  # Fashion-MNIST is balanced
