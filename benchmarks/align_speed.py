"""How fast ``attnkit align`` reads alignments: verse pairs per second of forced decoding and link extraction.

    PYTHONPATH=src .venv/bin/python benchmarks/align_speed.py [--model transformer-es-en] [--batch-size 32]
        [--threads 2] [--limit N] [--repeats 3]

Aligns the Bible test split (1,058 verse pairs) with the given model and reading (the default reading,
``--method shift`` or ``--symmetrize grow-diag-final-and`` as flags), exactly as ``attnkit align`` does
(:class:`attnkit.tasks.translation.alignment.ModelAligner`), after one untimed warm-up batch; reports the
median of ``--repeats`` runs in pairs/s and writes benchmarks/results/align.json. Run it on a quiet
machine: a number taken while other work shares the CPU says little.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnkit.data.datasets.bible import load_pairs  # noqa: E402
from attnkit.tasks.translation import Translator  # noqa: E402
from attnkit.tasks.translation.alignment import AttentionReading, ModelAligner  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="transformer-es-en")
    p.add_argument("--method", default="attention", choices=["attention", "shift", "guided"])
    p.add_argument("--layer", type=int, default=None)
    p.add_argument("--symmetrize", default=None)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=None, help="the first N test pairs only (for a quick check)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--home", default=None)
    p.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "align.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    pairs = [(x.src.split(), x.tgt.split()) for x in load_pairs("test", home=args.home, limit=args.limit)]
    aligner = ModelAligner(
        Translator.load(args.model), AttentionReading(args.method, args.layer, both_ways=args.symmetrize)
    )
    list(aligner.align(pairs[: args.batch_size], batch_size=args.batch_size))  # warm-up
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        links = list(aligner.align(pairs, batch_size=args.batch_size))
        times.append(time.perf_counter() - t0)
    seconds = statistics.median(times)
    result = {
        "model": args.model,
        "reading": aligner.describe(),
        "pairs": len(pairs),
        "batch_size": args.batch_size,
        "threads": args.threads,
        "seconds": [round(t, 3) for t in times],
        "pairs_per_s": round(len(pairs) / seconds, 1),
        "links": sum(len(a) for a in links if a is not None),
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
