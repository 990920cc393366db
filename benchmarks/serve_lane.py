"""The fast lane's dynamic batching and threads, in-process: the time to answer a burst of plain translations
with ``--fast-batch`` B against one at a time (B = 1), on one lane thread, and with B on ``--lanes`` threads,
measured in the same run.

    PYTHONPATH=src .venv/bin/python benchmarks/serve_lane.py [--burst 24] [--batch 8] [--lanes 2] [--repeats 3]
    PYTHONPATH=src .venv/bin/python benchmarks/serve_lane.py --alone      # each request's own time, alone

A burst of held-out test verses (beam 5, every head's maps, as the page asks; spread over the three
translators, in a seeded order) is submitted to a :class:`attnkit.explorer.lane.FastLane` at once, as
when many clients wait; the lane's threads answer them. The settings alternate ``--repeats`` times
(torch at 1 thread). Reports the burst's wall time for each, and their ratios; writes
benchmarks/results/serve_lane.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burst", type=int, default=24)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lanes", type=int, default=2, help="lane threads of the third setting (batches of --batch)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--alone",
        action="store_true",
        help="instead: the time of each request alone (one thread, nothing waiting), for each of the 200 verses "
        "the load test draws from and each translator: p50/p95/max/mean (writes serve_lane_alone.json)",
    )
    ap.add_argument("--output", default=None, help="JSON report (default: results/serve_lane[_alone].json)")
    args = ap.parse_args()
    args.output = args.output or str(
        ROOT / "benchmarks" / "results" / ("serve_lane_alone.json" if args.alone else "serve_lane.json")
    )

    import torch

    from attnkit.data.datasets.bible import load_pairs
    from attnkit.explorer.app import load_models
    from attnkit.explorer.lane import FastLane
    from attnkit.explorer.payload import translation_payload

    torch.set_num_threads(1)
    names = ["transformer-es-en", "rnnsearch-es-en", "rnnencdec-es-en"]
    translators = load_models(names).translators
    rng = random.Random(args.seed)
    verses = [p.src for p in load_pairs("test")[:200]]
    burst = [(rng.choice(names), rng.choice(verses)) for _ in range(args.burst)]
    if args.alone:
        return alone(translators, verses, translation_payload, args.output)

    def run(batch: int, threads: int = 1) -> float:
        lane = FastLane(max_batch=batch, threads=threads)
        t = time.perf_counter()
        futures = [
            lane.submit_translation(translation_payload, translators[n], v, 5, heads=True, model=n) for n, v in burst
        ]
        answers = [f.result() for f in futures]
        took = time.perf_counter() - t
        lane.stop()
        assert [a["model"] for a in answers] == [n for n, _ in burst]
        return took

    run(args.batch)  # warm
    settings = {"1": (1, 1), str(args.batch): (args.batch, 1), f"{args.batch}x{args.lanes}": (args.batch, args.lanes)}
    times: dict[str, list[float]] = {k: [] for k in settings}
    for _ in range(args.repeats):
        for k, (b, threads) in settings.items():
            times[k].append(run(b, threads))
    med = {k: statistics.median(ts) for k, ts in times.items()}
    batched, threaded = str(args.batch), f"{args.batch}x{args.lanes}"
    report = {
        "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "burst": args.burst,
        "batch": args.batch,
        "lanes": args.lanes,
        "seconds": {k: [round(t, 2) for t in ts] for k, ts in times.items()},
        "median_s": {k: round(t, 2) for k, t in med.items()},
        "per_translation_s": {k: round(t / args.burst, 3) for k, t in med.items()},
        "batched_time_ratio": round(med[batched] / med["1"], 2),
        "threads_time_ratio": round(med[threaded] / med[batched], 2),
        "cpu_count": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def alone(translators: dict, verses: list[str], payload, output: str) -> None:
    """Each verse's answer timed alone (what one request costs the lane when nothing waits beside it)."""
    from serve import quantiles  # the load test's percentiles (benchmarks/serve.py), the same definition

    report: dict = {"finished": None, "verses": len(verses), "seconds": {}}
    for name, tr in translators.items():
        payload(tr, verses[0], beam=5, heads=True, model=name)  # warm
        times = []
        for v in verses:
            t = time.perf_counter()
            payload(tr, v, beam=5, heads=True, model=name)
            times.append(time.perf_counter() - t)
        q = quantiles(times)
        report["seconds"][name] = {k: q[k] for k in ("p50", "p95", "max")} | {"mean": round(statistics.mean(times), 3)}
        print(name, report["seconds"][name], flush=True)
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    report["load_average_1m_at_end"] = round(os.getloadavg()[0], 1)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
