"""The chunked fused output layer + loss (training/linear_cross_entropy.py) against the plain path
(``F.cross_entropy(F.linear(h, W, b), y, label_smoothing=0.1, reduction="sum")``), forward+backward.

    PYTHONPATH=src .venv/bin/python benchmarks/linear_cross_entropy.py [--threads 1 2] → results/linear_cross_entropy.json

The shape of a translation batch's output layer: N = 1,720 real target tokens (a 2,048-token batch),
E = 256, V = 8,000 (the tied joint vocabulary), with the bias. Times are medians of interleaved
repetitions in one process, for each thread count; the ratio is plain / fused.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnkit.training.linear_cross_entropy import linear_cross_entropy  # noqa: E402

N, E, V, SMOOTHING = 1720, 256, 8000, 0.1


def plain(h, w, b, y):
    return F.cross_entropy(F.linear(h, w, b), y, label_smoothing=SMOOTHING, reduction="sum")


def fused(h, w, b, y):
    return linear_cross_entropy(h, w, b, y, smoothing=SMOOTHING)


def once(fn, h, w, b, y) -> float:
    for p in (h, w, b):
        p.grad = None
    t = time.perf_counter()
    fn(h, w, b, y).backward()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "linear_cross_entropy.json"))
    args = ap.parse_args()
    torch.manual_seed(0)
    h = torch.randn(N, E, requires_grad=True)
    w = (torch.randn(V, E) * E**-0.5).requires_grad_()
    b = torch.zeros(V, requires_grad=True)
    y = torch.randint(0, V, (N,))
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        times = {"plain": [], "fused": []}
        for fn in (plain, fused):  # warm-up
            once(fn, h, w, b, y)
        for _ in range(args.repeats):  # interleaved, so drifts in the machine's speed hit both
            for name, fn in (("plain", plain), ("fused", fused)):
                times[name].append(once(fn, h, w, b, y))
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append(
            {
                "threads": threads,
                "plain_ms": round(med["plain"] * 1e3, 2),
                "fused_ms": round(med["fused"] * 1e3, 2),
                "speedup": round(med["plain"] / med["fused"], 3),
            }
        )
        print(
            f"{threads} thread(s): plain {med['plain'] * 1e3:7.1f} ms  fused {med['fused'] * 1e3:7.1f} ms  "
            f"{med['plain'] / med['fused']:.2f}x"
        )
    out = Path(args.output)
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "torch": torch.__version__,
                "N": N,
                "E": E,
                "V": V,
                "smoothing": SMOOTHING,
                "rows": rows,
            },
            indent=2,
        )
    )
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
