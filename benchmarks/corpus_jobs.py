"""Corpus jobs split across processes (issue 58): what this first version can measure.

Two checks on the mechanism in ``attnkit.corpus_jobs`` (the commands do not use it yet, so the
job here is a stand-in: each line reversed):

- ``memory``: peak RSS of one rank that builds the line index of an input and reads 200 parts of
  1,000 lines through it, for 30,000 and 3,000,000 lines (each size in a fresh process).
- ``resume``: a two-process ``torchrun`` job whose rank 1 fails on its second part; the rerun of
  the same command must redo only the unfinished parts and write the bytes a plain loop writes.

Usage: ``python benchmarks/corpus_jobs.py [--out results/corpus_jobs.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = "verse {} in the beginning god created the heaven and the earth\n"

MEMORY = r"""
import resource, sys
from attnkit.corpus_jobs import PartPlan, open_line_index
idx = open_line_index(sys.argv[1], sys.argv[2])
plan = PartPlan(idx.n_lines, 1000, 2)
n = sum(len(idx.read_lines(*plan.part_range(p))) for p in plan.parts_of_rank(1)[:200])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, n)
"""

JOB = r"""
import sys, torch.distributed as dist
from attnkit.corpus_jobs import run_job
dist.init_process_group("gloo")
fail = sys.argv[1] == "fail"
def work(lines):
    if fail and dist.get_rank() == 1 and "line 130" in lines:
        raise ValueError("injected")
    return "".join(x[::-1] + "\n" for x in lines).encode()
try:
    print("DONE", dist.get_rank(), run_job("in.txt", "out.txt", "job", {"cmd": "rev"}, work, 40), flush=True)
except Exception as e:
    print("ERROR", dist.get_rank(), e, flush=True)
finally:
    dist.destroy_process_group()
"""


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}


def memory(tmp: Path) -> dict:
    out = {}
    for n in (30_000, 3_000_000):
        path = tmp / f"in_{n}.txt"
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(LINE.format(i) for i in range(n))
        res = subprocess.run(
            [sys.executable, "-c", MEMORY, str(path), str(tmp / f"job_{n}")],
            capture_output=True,
            text=True,
            env=_env(),
            check=True,
        )
        rss, lines = res.stdout.split()
        out[str(n)] = {"max_rss_mib": int(rss), "lines_read": int(lines), "input_bytes": path.stat().st_size}
    out["ratio"] = round(out["3000000"]["max_rss_mib"] / out["30000"]["max_rss_mib"], 3)
    return out


def resume(tmp: Path) -> dict:
    (tmp / "in.txt").write_text("".join(f"line {i}\n" for i in range(300)), encoding="utf-8")
    (tmp / "job.py").write_text(JOB, encoding="utf-8")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "job.py"]
    first = subprocess.run([*torchrun, "fail"], cwd=tmp, capture_output=True, text=True, env=_env())
    second = subprocess.run([*torchrun, "ok"], cwd=tmp, capture_output=True, text=True, env=_env())
    ref = "".join(x[::-1] + "\n" for x in (tmp / "in.txt").read_text(encoding="utf-8").splitlines()).encode()
    return {
        "first_run": [ln for ln in first.stdout.splitlines() if ln.startswith(("DONE", "ERROR"))],
        "rerun": [ln for ln in second.stdout.splitlines() if ln.startswith(("DONE", "ERROR"))],
        "identical_bytes": (tmp / "out.txt").read_bytes() == ref,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = {"memory": memory(Path(tmp)), "resume": resume(Path(tmp))}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
