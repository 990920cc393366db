"""A load test of ``attnkit serve`` on 127.0.0.1: many clients at once, plain translations and attributions.

    PYTHONPATH=src .venv/bin/python benchmarks/serve.py [--clients 50] [--attributing 10] [--seconds 60]

Starts the real server (every shipped model; the default options: ``--workers`` the core count less one, the
fast lane in the server) on a free loopback port with a queue deep enough for every attributing client
(``--queue`` = their number), waits until it
answers, then runs N client threads for the given time. Each client is a person at the page: it sends a
request, reads the answer, waits 0.5-1.5 s (seeded) and goes again. Most clients translate held-out test
verses (beam 5 with every layer's and head's maps, as the page asks, spread over the three translators);
``--attributing`` of them ask for an attribution method instead (saliency, ALTI+ or integrated gradients on
the Transformer), which the server runs as heavy jobs in its worker processes while plain translations stay
in the server's fast lane. A client refused with 503 "the server is busy" and ``Retry-After`` (admission
control: the heavy queue's, or the in-flight limit's) waits that long, as a polite client does, and asks again. Requests still running when the time is
up are waited for.

Reports the status codes per kind of request; the 503 admission refusals (with ``Retry-After``) apart from
the failures (every other 5xx and every connection error; the target is none); p50/p95/max latency of plain
translations (target p95 <= 1 s), per translator too; the attributions' latencies; and the resident memory
of the server and its worker processes
(psutil RSS) when idle, at its peak (sampled every 0.2 s) and 10 s after the load, and writes
benchmarks/results/serve.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
METHODS = ["saliency", "alti_plus", "integrated_gradients"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_rss(pid: int) -> int:
    """RSS of a process and every process under it, in bytes."""
    root = psutil.Process(pid)
    total = 0
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total


def quantiles(xs: list[float]) -> dict:
    """n, p50, p95 and max of ``xs``; the percentiles interpolate between the values seen (never beyond the
    largest, as the default 'exclusive' method does for a few values)."""
    if not xs:
        return {"n": 0}
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) >= 2 else [xs[0]] * 99
    return {"n": len(xs), "p50": round(q[49], 3), "p95": round(q[94], 3), "max": round(xs[-1], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--attributing", type=int, default=10, help="clients that ask for attribution methods")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "serve.json"))
    ap.add_argument("--serve-args", default="", help="more options for attnkit serve, e.g. '--fast-wait 1'")
    args = ap.parse_args()

    from attnkit.data.datasets.bible import load_pairs

    verses = [p.src for p in load_pairs("test")[:200]]
    translators = ["transformer-es-en", "rnnsearch-es-en", "rnnencdec-es-en"]
    port = free_port()
    server = subprocess.Popen(
        [
            *[sys.executable, "-m", "attnkit.cli", "serve", "--port", str(port)],
            *["--queue", str(max(1, args.attributing))],
            # every client comes from 127.0.0.1, one connection each (and one more while a refused one retries)
            *["--max-client-connections", str(max(32, 2 * args.clients)), *args.serve_args.split()],
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/"
    results: list[tuple[str, int, float]] = []
    lock = threading.Lock()
    try:
        for _ in range(1200):
            try:
                if httpx.get(base + "api/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.25)
        with httpx.Client(base_url=base, timeout=300) as c:  # warm: one of each kind, outside the timing
            for name in translators:
                c.post("api/translate", json={"text": verses[0], "model": name, "beam": 5, "heads": True})
            c.post("api/translate", json={"text": verses[0], "model": "transformer-es-en", "method": "saliency"})
        time.sleep(5)  # the worker that ran it is replaced
        idle = tree_rss(server.pid)
        stop_at = time.perf_counter() + args.seconds

        def client(k: int) -> None:
            rng = random.Random(args.seed * 1000 + k)
            attributing = k < args.attributing
            with httpx.Client(base_url=base, timeout=600) as c:
                first = None  # when the request now being retried was first sent
                while time.perf_counter() < stop_at:
                    if first is None:
                        text = rng.choice(verses)
                        if attributing:
                            kind = rng.choice(METHODS)
                            body = {"text": text, "model": "transformer-es-en", "beam": 1, "method": kind}
                        else:
                            kind = "translate"
                            body = {"text": text, "model": rng.choice(translators), "beam": 5, "heads": True}
                    t = time.perf_counter()
                    first = t if first is None else first
                    retry = None
                    try:
                        r = c.post("api/translate", json=body)
                        status = r.status_code
                        if status == 503 and "the server is busy" in r.text:  # admission, not a failure
                            retry = r.headers.get("retry-after", "1")
                    except httpx.HTTPError:
                        status = -1
                    now = time.perf_counter()
                    with lock:  # (kind, status, latency, model, refused, latency counting the refused tries)
                        results.append((kind, status, now - t, body["model"], retry is not None, now - first))
                    if retry is not None:  # an admission refusal: ask again when the server says
                        time.sleep(max(0.0, min(float(retry), stop_at - time.perf_counter())))
                    else:
                        first = None
                        time.sleep(rng.uniform(0.5, 1.5))

        load_at_start = os.getloadavg()[0]
        started_utc = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        peak = idle
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            peak = max(peak, tree_rss(server.pid))
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        time.sleep(10)
        after = tree_rss(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)

    statuses: dict[str, dict[str, int]] = {}
    for kind, s, *_ in results:
        per = statuses.setdefault("translate" if kind == "translate" else "attribution", {})
        per[str(s)] = per.get(str(s), 0) + 1
    admissions = [r for r in results if r[1] == 503 and r[4]]
    mb = lambda b: round(b / 2**20, 1)
    report = {
        "started": started_utc,
        "serve_args": f"--queue {max(1, args.attributing)} {args.serve_args}".strip(),
        "clients": args.clients,
        "attributing_clients": args.attributing,
        "seconds": args.seconds,
        "wall_s": round(wall, 1),
        "requests": len(results),
        "statuses": statuses,
        "admission_503": {"n": len(admissions), "translate": sum(1 for r in admissions if r[0] == "translate")},
        "failures_5xx": sum(1 for r in results if (r[1] >= 500 or r[1] < 0) and r not in admissions),
        "plain_translation_latency_s": quantiles([s for k, st, s, *_ in results if k == "translate" and st == 200]),
        "plain_translation_latency_with_retries_s": quantiles(
            [r[5] for r in results if r[0] == "translate" and r[1] == 200]  # from the first try, when refused
        ),
        "plain_translation_latency_by_model_s": {
            m: quantiles([s for k, st, s, name, *_ in results if k == "translate" and st == 200 and name == m])
            for m in translators
        },
        "attribution_latency_s": {
            m: quantiles([s for k, st, s, *_ in results if k == m and st == 200]) for m in METHODS
        },
        "rss_mb": {"idle": mb(idle), "peak": mb(peak), "after_10s": mb(after)},
        "cpu_count": os.cpu_count(),
        "load_average_1m_at_start": round(load_at_start, 1),
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
