"""benchmarks/bench.py (``make bench``): argument parsing, the rows' quick commands, the kernel
environments, the runner on a tiny stand-in row, and a missing peer. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("attnkit_bench", ROOT / "benchmarks" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _echo_row(
    bench,
    code="import os; print('capability', os.environ.get('ATEN_CPU_CAPABILITY'), os.environ.get('CT2_FORCE_CPU_ISA'))",
):
    return bench.Row("echo", "a stand-in row", lambda quick, isa, work: [("echo", [sys.executable, "-c", code], ())])


def test_defaults_and_quick_paths(bench):
    args = bench.parse_args([])
    assert args.rows == list(bench.ROWS) and args.isa == ["native", "avx2"] and not args.quick
    assert args.work == ROOT / "runs" / "bench" and args.out.name == "bench.json"
    quick = bench.parse_args(["--quick", "--rows", "ig", "--isa", "avx2"])
    assert quick.rows == ["ig"] and quick.isa == ["avx2"]
    assert quick.work == ROOT / "runs" / "bench-quick" and quick.out.name == "bench_quick.json"
    with pytest.raises(SystemExit):
        bench.parse_args(["--rows", "no-such-row"])


def test_every_issue_row_is_there_with_tiny_quick_commands(bench, tmp_path):
    assert set(bench.ROWS) == {
        "transformer-training", "rnn-training", "transformer-beam5", "transformer-greedy", "rnn-beam5", "ig"
    }  # fmt: skip
    for row in bench.ROWS.values():
        for isa in bench.ISA_ENV:
            full = row.commands(False, isa, tmp_path)
            quick = row.commands(True, isa, tmp_path)
            assert len(full) == len(quick) >= 1
            for (_, f, _), (_, q, _) in zip(full, quick):
                assert Path(q[1]).is_file()  # the benchmark script exists
                assert q != f  # quick mode changes every command (a smaller slice)
                assert all(str(tmp_path) in a for a in q if a.endswith(".json"))  # outputs stay in the work folder
    ((_, ct2, _),) = bench.ROWS["transformer-greedy"].commands(True, "avx2", tmp_path)
    assert ct2[ct2.index("--isa") + 1] == "avx2" and ct2[ct2.index("--limit") + 1] == "5"


def test_avx2_environment_limits_every_library(bench):
    env = bench.ISA_ENV["avx2"]
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["CT2_FORCE_CPU_ISA"] == "AVX2"
    assert bench.ISA_ENV["native"] == {}
    assert "CTranslate2 AVX2" in bench.kernels("avx2") and bench.kernels("avx2").startswith("ATen ")


def test_runner_passes_the_kernel_environment_and_records_output(bench, tmp_path):
    (rec,) = bench.run_row(_echo_row(bench), "avx2", True, tmp_path)
    assert rec["status"] == "ok" and "capability avx2 AVX2" in rec["stdout"]
    (rec,) = bench.run_row(_echo_row(bench), "native", True, tmp_path)
    inherited = f"capability {os.environ.get('ATEN_CPU_CAPABILITY')} {os.environ.get('CT2_FORCE_CPU_ISA')}"
    assert rec["stdout"].strip() == inherited  # native: this process's environment, nothing added
    (bad,) = bench.run_row(_echo_row(bench, "import sys; sys.exit(3)"), "native", True, tmp_path)
    assert bad["status"] == "failed (exit 3)"


def test_missing_peer_gives_a_line_saying_so_and_the_rest_runs(bench, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "ONMT_VENV", tmp_path / "no-venv")
    own = [sys.executable, "-c", "print('attnkit side ran')"]
    row = bench.Row("race", "a peer and attnkit", lambda q, i, w: [("peer", ["onmt"], ("opennmt",)), ("own", own, ())])
    peer, ours = bench.run_row(row, "native", True, tmp_path)
    assert peer["status"] == "not installed" and "OpenNMT-py is not installed" in peer["why"]
    assert "setup.sh" in peer["why"]
    assert ours["status"] == "ok" and "attnkit side ran" in ours["stdout"]
    assert "peer: not run: OpenNMT-py is not installed" in capsys.readouterr().out
    # a row that needs the peer as a whole (decoding against a finished OpenNMT-py run) is one line
    (rec,) = bench.run_row(bench.ROWS["rnn-beam5"], "native", True, tmp_path)
    assert rec["status"] == "not installed" and "OpenNMT-py is not installed" in rec["why"]


def test_main_writes_one_table_per_row_and_kernel_set(bench, tmp_path, monkeypatch):
    monkeypatch.setitem(bench.ROWS, "echo", _echo_row(bench))
    out = tmp_path / "bench_quick.json"
    records = bench.main(["--quick", "--rows", "echo", "--work", str(tmp_path / "w"), "--out", str(out)])
    assert [r["isa"] for r in records] == ["native", "avx2"] and all(r["status"] == "ok" for r in records)
    report = json.loads(out.read_text())
    assert report["quick"] and report["cpu"]["model"]
    md = out.with_suffix(".md").read_text()
    assert md.count("### echo: a stand-in row") == 2
    assert "kernels [native]: ATen " in md and "kernels [avx2]: ATen " in md and "CTranslate2 AVX2" in md
    assert f"CPU: {report['cpu']['model']}" in md and "capability avx2 AVX2" in md
