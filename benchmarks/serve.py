"""A bounded load test of ``attnkit serve`` on 127.0.0.1: concurrent clients, mixed translate and caption.

    PYTHONPATH=src .venv/bin/python benchmarks/serve.py [--clients 8] [--requests 400] [--beam 5]

Starts the server (every shipped model) on a free loopback port, waits until it answers, then N
client threads send a fixed, seeded mix of requests (3/4 translations of held-out test verses spread
over the three translators; 1/4 captions spread over the two captioners, half of them held-out test
scenes by index and half the same kind of scene uploaded as a PNG, multipart/form-data)
and stop after the given number. Translations ask for every layer's and head's maps, as the page
does (``--no-heads`` leaves them out). Reports requests/s, p50/p95/max latency, errors (any non-200 or
exception; the target is 0) and the server's peak resident memory (VmHWM), and writes
benchmarks/results/serve.json.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def multipart(image: bytes, fields: dict) -> tuple[bytes, str]:
    """A multipart/form-data body with an ``image`` file and text fields (what a browser sends)."""
    boundary = "attnkit-bench-boundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="scene.png"\r\n'
        f"Content-Type: image/png\r\n\r\n".encode()
        + image
        + b"\r\n"
    )
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def post(url: str, body: dict | tuple) -> tuple[int, float]:
    """POST JSON (a dict) or a prepared (bytes, content type) body; the status and the seconds it took."""
    t = time.perf_counter()
    data, ctype = (json.dumps(body).encode(), "application/json") if isinstance(body, dict) else body
    req = urllib.request.Request(url, data=data, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    return status, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--no-heads",
        dest="heads",
        action="store_false",
        help="translate without every layer's and head's maps (default: with them, as the page asks)",
    )
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "serve.json"))
    args = ap.parse_args()

    from attnkit.data.datasets.bible import load_pairs

    verses = [p.src for p in load_pairs("test")[:200]]
    rng = random.Random(args.seed)
    translators = ["transformer-es-en", "rnnsearch-es-en", "rnnencdec-es-en"]
    captioners = ["captioner-soft", "captioner-hard"]
    jobs = []
    for i in range(args.requests):
        if i % 8 == 3:
            jobs.append(("api/caption", {"scene": rng.randrange(1000), "model": captioners[(i // 8) % 2]}))
        elif i % 8 == 7:  # an upload: a test scene's PNG, sent as multipart/form-data
            jobs.append(("api/caption/upload", {"scene": rng.randrange(12), "model": captioners[(i // 8) % 2]}))
        else:
            jobs.append(
                (
                    "api/translate",
                    {"text": rng.choice(verses), "model": translators[i % 3], "beam": args.beam, "heads": args.heads},
                )
            )

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "attnkit.cli", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    base = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "api/models", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        post(base + "api/caption", {"scene": 0})  # prepare the scenes once, outside the timing
        with urllib.request.urlopen(base + "api/scenes?limit=12", timeout=300) as r:
            pngs = [base64.b64decode(s["image"].split(",", 1)[1]) for s in json.loads(r.read())["scenes"]]
        jobs = [
            (ep, multipart(pngs[b["scene"]], {"model": b["model"]})) if ep.endswith("upload") else (ep, b)
            for ep, b in jobs
        ]
        results: list[tuple[str, int, float]] = []
        lock = threading.Lock()
        it = iter(jobs)

        def client():
            while True:
                with lock:
                    job = next(it, None)
                if job is None:
                    return
                try:
                    status, secs = post(base + job[0].removesuffix("/upload"), job[1])
                except Exception:
                    status, secs = -1, 0.0
                with lock:
                    results.append((job[0], status, secs))

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        status_text = Path(f"/proc/{server.pid}/status").read_text()
        peak_kb = int(next(line.split()[1] for line in status_text.splitlines() if line.startswith("VmHWM")))
    finally:
        server.terminate()
        server.wait(timeout=30)

    lat = sorted(s for _, st, s in results if st == 200)
    errors = sum(st != 200 for _, st, _ in results)
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [0.0] * 99
    report = {
        "clients": args.clients,
        "requests": len(results),
        "beam": args.beam,
        "heads": args.heads,
        "errors": errors,
        "requests_per_s": round(len(results) / wall, 2),
        "wall_s": round(wall, 1),
        "latency_s": {"p50": round(q[49], 3), "p95": round(q[94], 3), "max": round(lat[-1], 3) if lat else None},
        "by_endpoint": {
            ep: {
                "n": sum(e == ep for e, _, _ in results),
                "p50_s": round(statistics.median([s for e, st, s in results if e == ep and st == 200]), 3),
            }
            for ep in ("api/translate", "api/caption", "api/caption/upload")
        },
        "server_peak_rss_mb": round(peak_kb / 1024, 1),
        "cpu_threads": os.cpu_count(),
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
