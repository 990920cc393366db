"""``--processes N`` with forked ranks (:mod:`attnkit.cli.forked_ranks`): each rank is the command without
``--processes`` under torchrun's variables; the supervisor's answers to a rank's error, a rank killed, a
``SIGTERM`` and its own death, each checked on real processes with a stand-in command (no model); the
part sizes a job gets when ``--part-lines`` is not given; and the torchrun launcher kept for CUDA builds,
still giving the one-process bytes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit.cli.forked_ranks import can_fork_ranks
from attnkit.corpus_jobs import PartPlan, auto_part_lines

pytestmark = pytest.mark.skipif(not can_fork_ranks(), reason="forked ranks need Linux and a CPU build of PyTorch")

ROOT = Path(__file__).resolve().parents[1]

#: a stand-in for ``attnkit.cli.main`` in each rank: records itself, then does what ``mode`` says
STAND_IN = r"""
import json, os, sys, time
import torch
import attnkit.cli
from attnkit.cli import forked_ranks

mode, folder = sys.argv[1], sys.argv[2]
forked_ranks.GRACE_S = 0.5

def command(argv):
    rank = int(os.environ["RANK"])
    seen = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS")}
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
        json.dump({"pid": os.getpid(), "ppid": os.getppid(), "argv": argv, "threads": torch.get_num_threads(), **seen}, f)
    if mode == "ok":
        return 0
    if mode == "fail" and rank == 1:
        print("attnkit: error: rank 1's own error", file=sys.stderr)
        return 2
    time.sleep(120)
    return 0

attnkit.cli.main = command
sys.exit(forked_ranks.fork_ranks(["translate", "--file", "x"], 2, 1))
"""


def _start(mode: str, folder: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen(
        [sys.executable, "-c", STAND_IN, mode, str(folder)], stderr=subprocess.PIPE, text=True, env=env
    )


def _ranks(folder: Path, n: int = 2, timeout: float = 60.0) -> list[dict]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(n)]
        except (OSError, ValueError):
            time.sleep(0.05)
    raise AssertionError(f"the ranks did not start: {sorted(p.name for p in folder.iterdir())}")


def _gone(pid: int, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_each_rank_runs_the_command_under_torchruns_variables(tmp_path):
    proc = _start("ok", tmp_path)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    ranks = _ranks(tmp_path)
    assert [r["RANK"] for r in ranks] == ["0", "1"] and [r["LOCAL_RANK"] for r in ranks] == ["0", "1"]
    assert {r["WORLD_SIZE"] for r in ranks} == {"2"} and {r["MASTER_ADDR"] for r in ranks} == {"127.0.0.1"}
    assert len({r["MASTER_PORT"] for r in ranks}) == 1 and int(ranks[0]["MASTER_PORT"]) > 0
    assert all(r["argv"] == ["translate", "--file", "x"] and r["threads"] == 1 for r in ranks)
    assert {r["ppid"] for r in ranks} == {proc.pid}  # forked from the launching process, no launcher between
    assert len({r["pid"] for r in ranks}) == 2


def test_a_ranks_own_error_stops_the_others_with_its_status(tmp_path):
    proc = _start("fail", tmp_path)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.count("rank 1's own error") == 1 and "was stopped" not in err
    assert _gone(_ranks(tmp_path)[0]["pid"])  # rank 0 (asleep) was stopped after the grace


def test_a_rank_killed_is_named_and_the_others_stop(tmp_path):
    proc = _start("sleep", tmp_path)
    ranks = _ranks(tmp_path)
    os.kill(ranks[1]["pid"], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "rank 1 was stopped (SIGKILL); run the same command again to resume" in err
    assert _gone(ranks[0]["pid"])


def test_sigterm_to_the_launch_stops_every_rank(tmp_path):
    proc = _start("sleep", tmp_path)
    ranks = _ranks(tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted (SIGTERM)" in err
    assert all(_gone(r["pid"]) for r in ranks)


def test_the_ranks_die_with_a_killed_launch(tmp_path):
    proc = _start("sleep", tmp_path)
    ranks = _ranks(tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    assert all(_gone(r["pid"]) for r in ranks)  # PR_SET_PDEATHSIG: no rank is left running


@given(st.integers(0, 5_000_000), st.sampled_from([1, 16, 64, 256]))
def test_auto_part_lines_is_a_whole_number_of_units_giving_about_32_parts(n, unit):
    lines = auto_part_lines(n, unit)
    assert lines % unit == 0 and unit <= lines <= max(unit, -(-1024 // unit) * unit)
    parts = PartPlan(n, lines, 2).n_parts
    if n >= 32 * unit and lines < 1024:
        assert 16 < parts <= 32  # enough parts for every rank, not one per line
    if lines >= 1024:
        assert parts <= -(-n // 1024)


def test_auto_part_lines_refuses_bad_arguments():
    with pytest.raises(ValueError, match="unit"):
        auto_part_lines(10, 0)
    with pytest.raises(ValueError, match="n_lines"):
        auto_part_lines(-1)
