"""The fused additive score (attention/additive_fused.py) against the broadcast form autograd runs
(OpenNMT-py's ``mlp`` attention: ``tanh(Wq.unsqueeze(2) + Uk.unsqueeze(1)) @ v``), forward+backward.

    PYTHONPATH=src .venv/bin/python benchmarks/additive_fused.py [--threads 2] → results/additive_fused.json

Two shapes: a whole target sentence at once (B=64, Nq=Nk=50, A=512) and a decoder's 50 steps of one
query each (B=64, Nq=1, Nk=50, A=256, all kept for one backward, as teacher-forced training does).
Times are medians of interleaved repetitions in one process; peak memory is the growth of the
resident set of a fresh process that runs one forward+backward.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnkit.attention.additive_fused import additive_scores  # noqa: E402

SHAPES = {"sentence": (64, 50, 50, 512, 1), "decoder_steps": (64, 1, 50, 256, 50)}


def broadcast(a, b, v):
    return torch.tanh(a.unsqueeze(2) + b.unsqueeze(1)) @ v


def run(fn, B, Nq, Nk, A, steps):
    torch.manual_seed(0)
    b, v = torch.randn(B, Nk, A, requires_grad=True), torch.randn(A, requires_grad=True)
    qs = [torch.randn(B, Nq, A, requires_grad=True) for _ in range(steps)]
    t = time.perf_counter()
    sum(fn(q, b, v).sum() for q in qs).backward()
    return time.perf_counter() - t


def peak_mb(kind: str, shape: str) -> float:
    code = f"""
import resource, sys, torch
sys.path.insert(0, {str(ROOT / "src")!r}); sys.path.insert(0, {str(Path(__file__).parent)!r})
from additive_fused import SHAPES, broadcast, run
from attnkit.attention.additive_fused import additive_scores
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
run({"additive_scores" if kind == "fused" else "broadcast"}, *SHAPES[{shape!r}])
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
"""
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "additive_fused.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # memory first: a child process starts with its parent's peak RSS (Linux keeps ru_maxrss across exec)
    mems = {name: {k: peak_mb(k, name) for k in ("broadcast", "fused")} for name in SHAPES}
    rows = []
    for name, shape in SHAPES.items():
        times = {"broadcast": [], "fused": []}
        for _ in range(args.repeats):
            times["broadcast"].append(run(broadcast, *shape))
            times["fused"].append(run(additive_scores, *shape))
        med = {k: statistics.median(v[1:]) for k, v in times.items()}
        mem = mems[name]
        rows.append(
            {
                "shape": name,
                "B_Nq_Nk_A_steps": shape,
                "broadcast_ms": round(med["broadcast"] * 1e3, 1),
                "fused_ms": round(med["fused"] * 1e3, 1),
                "speedup": round(med["broadcast"] / med["fused"], 2),
                "broadcast_peak_mb": round(mem["broadcast"], 1),
                "fused_peak_mb": round(mem["fused"], 1),
            }
        )
        print(rows[-1])
    Path(args.output).write_text(json.dumps({"threads": args.threads, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
