"""A bounded abuse benchmark of ``attnkit serve`` on 127.0.0.1 (issue 54): what a hostile client costs.

    PYTHONPATH=src .venv/bin/python benchmarks/serve_abuse.py [--uploads 8] [--idle 200] [--hold 60]

Starts the real server (``--model captioner-soft rnnsearch-es-en``, ``--workers 1``, otherwise its
defaults) on a free loopback port, then:

1. **uploads**: ``--uploads`` clients at once each send a 36-megapixel RGBA PNG (6000×6000, one colour: a
   file of ~150 KB, under every default cap) to ``/api/caption``. Reports the resident memory of the server
   process (psutil RSS) when idle, at its peak (sampled every 20 ms) and ``--settle`` seconds after, and the
   answers' statuses.
2. **idle**: the unloaded p50/p95 of plain translations (one client, one after another, for ``--probe``
   seconds); then, with ``--idle`` sockets held open that send nothing (re-opened as the server closes
   them, for ``--hold`` seconds), the same client's statuses and p50/p95. The idle sockets come from other
   loopback addresses than the client's (127.0.0.2 and up: ``--idle-addresses`` of them, so both the
   per-client cap and the header timeout are met), and they only ever connect to the server's 127.0.0.1
   port. Reports how many idle connections the server closed, and how many it refused at once.

Every loop is bounded by its time or count. Prints the results and writes
benchmarks/results/serve_abuse.json. ``--src`` runs another checkout's code (the server before a change).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import selectors
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
SOURCE = "Y dijo Dios: Sea la luz: y fué la luz."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quantiles(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) >= 2 else [xs[0]] * 99
    return {"n": len(xs), "p50": round(q[49], 4), "p95": round(q[94], 4), "max": round(xs[-1], 4)}


def big_png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGBA", (6000, 6000), (200, 100, 50, 180)).save(buf, format="PNG")
    return buf.getvalue()


class Served:
    def __init__(self, src: str, home: str, extra: list[str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": src}
        env.pop("ATTNKIT_TOKEN", None)
        cmd = [sys.executable, "-m", "attnkit.cli", "--home", home, "serve", "--port", str(self.port)]
        cmd += ["--model", "captioner-soft", "rnnsearch-es-en", "--workers", "1", *extra]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "api/models", timeout=2).status_code == 200:
                    break
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited")
            time.sleep(0.25)
        else:
            raise RuntimeError("the server did not start")

    def rss(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def uploads(server: Served, n: int, settle: float) -> dict:
    data = base64.b64encode(big_png()).decode()
    with httpx.Client(base_url=server.url, timeout=120) as c:  # one small caption first: lazy caches are warm
        small = io.BytesIO()
        from PIL import Image

        Image.new("L", (64, 64), 200).save(small, format="PNG")
        c.post("api/caption", json={"image": base64.b64encode(small.getvalue()).decode()})
    time.sleep(1.0)
    idle = server.rss()
    statuses: list[int] = []
    lock = threading.Lock()

    def one():
        with httpx.Client(base_url=server.url, timeout=300) as c:
            r = c.post("api/caption", json={"image": data})
        with lock:
            statuses.append(r.status_code)

    threads = [threading.Thread(target=one) for _ in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    peak = idle
    while any(t.is_alive() for t in threads) and time.perf_counter() - t0 < 600:
        peak = max(peak, server.rss())
        time.sleep(0.02)
    for t in threads:
        t.join(timeout=60)
    took = time.perf_counter() - t0
    time.sleep(settle)
    after = server.rss()
    mb = 1 << 20
    return {
        "uploads": n,
        "png_bytes": len(data) * 3 // 4,
        "statuses": sorted(statuses),
        "seconds": round(took, 2),
        "idle_mb": round(idle / mb),
        "peak_mb": round(peak / mb),
        "peak_over_idle_mb": round((peak - idle) / mb),
        "after_mb": round(after / mb),
        "settle_s": settle,
        "after_over_idle": round(after / idle, 3),
    }


def probe(url: str, seconds: float, stop: threading.Event | None = None) -> tuple[list[float], dict]:
    """Plain translations one after another for ``seconds``: their latencies and status counts."""
    lat, codes = [], {}
    end = time.perf_counter() + seconds
    with httpx.Client(base_url=url, timeout=30) as c:
        while time.perf_counter() < end and not (stop and stop.is_set()):
            t = time.perf_counter()
            try:
                r = c.post("api/translate", json={"text": SOURCE, "model": "rnnsearch-es-en", "beam": 1})
                code = r.status_code
            except httpx.HTTPError as exc:
                code = type(exc).__name__
            dt = time.perf_counter() - t
            codes[code] = codes.get(code, 0) + 1
            if code == 200:
                lat.append(dt)
    return lat, codes


def idle_sockets(server: Served, n: int, addresses: int, hold: float, probe_s: float) -> dict:
    base_lat, base_codes = probe(server.url, probe_s)
    sel = selectors.DefaultSelector()
    opened = refused = closed = failed = 0
    live: set[socket.socket] = set()
    born: dict[socket.socket, float] = {}

    def open_one(k: int):
        nonlocal opened, refused, failed
        s = socket.socket()
        s.setblocking(False)
        try:
            s.bind((f"127.0.0.{2 + k % addresses}", 0))
            s.connect_ex(("127.0.0.1", server.port))
        except OSError:
            failed += 1
            s.close()
            return
        opened += 1
        live.add(s)
        born[s] = time.perf_counter()
        sel.register(s, selectors.EVENT_READ)

    answers: dict = {}
    stop = threading.Event()
    prober = threading.Thread(target=lambda: answers.update(zip(("lat", "codes"), probe(server.url, hold, stop))))
    for k in range(n):
        open_one(k)
    t0 = time.perf_counter()
    prober.start()
    k = n
    lifetimes = []
    while time.perf_counter() - t0 < hold:
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if data:  # an answer (a refusal) before any request: read on until it closes
                continue
            sel.unregister(s)
            live.discard(s)
            age = time.perf_counter() - born.pop(s)
            if age < 0.05:
                refused += 1
            else:
                closed += 1
                lifetimes.append(age)
            s.close()
        while len(live) < n and time.perf_counter() - t0 < hold:  # the attacker keeps n sockets open
            open_one(k)
            k += 1
    stop.set()
    prober.join(timeout=60)
    for s in list(live):
        sel.unregister(s)
        s.close()
    base = quantiles(base_lat)
    loaded = quantiles(answers.get("lat", []))
    return {
        "idle_sockets": n,
        "source_addresses": addresses,
        "hold_s": hold,
        "unloaded": {**base, "codes": {str(k): v for k, v in base_codes.items()}},
        "with_idle": {**loaded, "codes": {str(k): v for k, v in answers.get("codes", {}).items()}},
        "p95_ratio": round(loaded["p95"] / base["p95"], 2) if loaded.get("n") and base.get("n") else None,
        "sockets_opened": opened,
        "closed_by_server_after_s": quantiles(lifetimes),
        "refused_at_once": refused,
        "open_failed": failed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uploads", type=int, default=8, help="36-Mpx PNGs sent at once (0: skip)")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds after the uploads before RSS is read again")
    ap.add_argument("--idle", type=int, default=200, help="idle sockets held (0: skip)")
    ap.add_argument("--idle-addresses", type=int, default=50, help="loopback source addresses they come from")
    ap.add_argument("--hold", type=float, default=60.0, help="seconds the idle sockets are held")
    ap.add_argument("--probe", type=float, default=15.0, help="seconds of unloaded translations first")
    ap.add_argument("--src", default=str(ROOT / "src"), help="the attnkit source folder the server runs")
    ap.add_argument("--serve-args", default="", help="more options for attnkit serve")
    ap.add_argument("--home", default=None, help="attnkit --home (default: a temporary folder)")
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "serve_abuse.json"))
    args = ap.parse_args()

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result: dict = {"src": args.src, "serve_args": args.serve_args}
        server = Served(args.src, args.home or tmp, args.serve_args.split())
        try:
            if args.uploads:
                result["uploads"] = uploads(server, args.uploads, args.settle)
                print(json.dumps(result["uploads"]), flush=True)
            if args.idle:
                result["idle"] = idle_sockets(server, args.idle, args.idle_addresses, args.hold, args.probe)
                print(json.dumps(result["idle"]), flush=True)
            result["server_alive"] = server.proc.poll() is None
        finally:
            server.stop()
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
