"""The ``attnkit`` command keeps freed memory in the process (glibc's mmap and trim thresholds), once,
before any work; ``ATTNKIT_MALLOC=default`` and other C libraries leave the allocator alone. The speed
this buys is measured in benchmarks (page faults of a beam search and a training step), not here."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from attnkit.cli import allocator


class _FakeLibc:
    """A C library that records ``mallopt`` calls (glibc's, or musl's without ``gnu_get_libc_version``)."""

    def __init__(self, glibc: bool = True, answer: int = 1):
        self.calls: list[tuple[int, int]] = []
        self.answer = answer
        if glibc:
            self.gnu_get_libc_version = lambda: b"2.36"

        def mallopt(param, value):
            self.calls.append((param, value))
            return self.answer

        self.mallopt = mallopt


def _with_libc(monkeypatch, libc) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: libc)


def test_glibc_gets_the_largest_mmap_threshold_and_no_trimming(monkeypatch):
    libc = _FakeLibc()
    _with_libc(monkeypatch, libc)
    monkeypatch.delenv(allocator.ENV, raising=False)
    assert allocator.keep_freed_memory() is True
    assert libc.calls == [(-3, 32 * 1024 * 1024), (-1, 2**31 - 1)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD


def test_opt_out_other_c_libraries_and_refusals_change_nothing(monkeypatch):
    libc = _FakeLibc()
    _with_libc(monkeypatch, libc)
    monkeypatch.setenv(allocator.ENV, "Default")
    assert allocator.keep_freed_memory() is False and libc.calls == []
    monkeypatch.delenv(allocator.ENV)
    musl = _FakeLibc(glibc=False)
    _with_libc(monkeypatch, musl)
    assert allocator.keep_freed_memory() is False and musl.calls == []
    refused = _FakeLibc(answer=0)  # mallopt returns 0 for a value it does not take
    _with_libc(monkeypatch, refused)
    assert allocator.keep_freed_memory() is False
    monkeypatch.setattr(sys, "platform", "darwin")
    assert allocator.keep_freed_memory() is False and len(refused.calls) == 1


def test_main_sets_it_once_before_the_command(monkeypatch, capsys):
    import attnkit.cli as cli

    seen = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: seen.append("malloc"))
    real = cli.build_parser

    def build_parser():
        seen.append("parser")
        return real()

    monkeypatch.setattr(cli, "build_parser", build_parser)
    assert cli.main(["translate", "--vmap", "Hola."]) == 2  # a one-line error; the allocator was set first
    assert seen == ["malloc", "parser"]
    assert "--vmap needs --engine ctranslate2" in capsys.readouterr().err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_real_glibc_takes_both_values():
    """In a fresh process on this machine's C library (glibc on Debian): both values are accepted."""
    code = "from attnkit.cli.allocator import keep_freed_memory; print(keep_freed_memory())"
    if not hasattr(ctypes.CDLL(None), "gnu_get_libc_version"):
        pytest.skip("not glibc")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "True"
