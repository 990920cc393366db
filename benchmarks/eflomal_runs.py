"""eflomal's AER over several independent runs, on the 100 scored gold verses.

eflomal (Östling & Tiedemann 2016) samples its alignments and takes no seed, so two runs differ; the guided
heads' claim ("they align as well as eflomal") is only as good as eflomal's spread. Each run trains eflomal
afresh on exactly what ``attnkit evaluate alignment`` trains it on (the 150 gold pairs and the Bible's training
split, lower-cased, whitespace words), symmetrises the two directions with grow-diag-final-and, and scores the
100 verses after the 50 dev ones. Nothing is cached: every run is a new sample.

    python benchmarks/eflomal_runs.py --runs 5 --out benchmarks/results/eflomal_runs.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from attnkit.alignment.aer import AERCounts, aer_counts
from attnkit.alignment.eflomal import eflomal_directional
from attnkit.alignment.gold import DEV_VERSES, load_gold
from attnkit.alignment.symmetrize import grow_diag_final_and
from attnkit.data.datasets.bible import load_pairs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="independent eflomal runs (default: 5)")
    ap.add_argument("--out", default=None, help="write the runs' AERs here as JSON (default: stdout only)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    verses = load_gold()
    src = [" ".join(v.source) for v in verses]
    tgt = [" ".join(v.target) for v in verses]
    train = load_pairs("train")
    extra = ([p.src for p in train], [p.tgt for p in train])
    scored = verses[DEV_VERSES:]
    runs = []
    for r in range(args.runs):
        t0 = time.perf_counter()
        forward, reverse = eflomal_directional(src, tgt, extra=extra)
        links = [grow_diag_final_and(f, b) for f, b in zip(forward, reverse)][DEV_VERSES:]
        total = sum((aer_counts(a, v.sure, v.possible) for a, v in zip(links, scored)), AERCounts())
        runs.append({"aer": round(total.aer, 4), "seconds": round(time.perf_counter() - t0, 1)})
        print(f"run {r + 1}: AER {total.aer:.4f} ({runs[-1]['seconds']} s)", file=sys.stderr, flush=True)
    aers = [x["aer"] for x in runs]
    report = {
        "what": "eflomal grow-diag-final-and AER on the 100 scored gold verses, one fresh training run each",
        "verses": len(scored),
        "runs": runs,
        "mean": round(statistics.fmean(aers), 4),
        "min": min(aers),
        "max": max(aers),
        "stdev": round(statistics.stdev(aers), 4) if len(aers) > 1 else None,
    }
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
