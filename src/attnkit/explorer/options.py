"""The options of ``attnkit serve``: one dataclass field each (its default, range and help), which become
the command's flags (:func:`attnkit.cli.options.add_config_arguments`) and the limits the API page lists.

Serving is a security boundary, so every request's work is bounded before a tensor is built: the
characters and subword tokens of a source and a forced target, the beam, the images and pixels of an
upload, the size of an answer (per-head maps, one layer at a time beyond a budget) and the bytes of any
request body. Light requests (plain translations and captions) run in the server's fast lane
(:mod:`.lane`); heavy jobs (attribution methods, beams above ``heavy_beam``) wait in a bounded queue for
one of ``workers`` worker processes (:mod:`.jobs`), which leave a core to the fast lane; anything beyond
``127.0.0.1``/``::1``/``localhost`` needs a token.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from dataclasses import dataclass

from ..checks import Range, check_fields
from ..config import option

__all__ = ["ServeOptions", "is_loopback", "limits_table"]

PORT = Range(0, high=65536, integer=True)
BIG = Range(1, high=2**31, integer=True)  # every size bounded, so a typo cannot ask for the whole machine


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only lets this machine in (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ServeOptions:
    """What ``attnkit serve`` binds, who may call it and how much work one request may ask for."""

    host: str = option(
        "127.0.0.1",
        "address to bind; anything but a loopback address exposes the server to the network and needs a token",
    )
    port: int = option(8000, "port", check=PORT)
    token: str | None = option(
        None,
        "the token every API call must carry (header 'Authorization: token T', or ?token=T once in the page's "
        "URL) (default: $ATTNKIT_TOKEN, else a random one for a non-loopback --host, none on loopback)",
        metavar="TOKEN",
    )
    allow_host: str | None = option(
        None,
        "more names the Host header may carry, comma-separated (always allowed: localhost, 127.0.0.1, ::1 and "
        "--host) (default: none)",
        metavar="NAMES",
    )
    max_text_chars: int = option(
        2000, "the most characters of a source text", check=Range(1, high=1_000_001, integer=True)
    )
    max_target_chars: int = option(
        2000, "the most characters of a forced target text", check=Range(1, high=1_000_001, integer=True)
    )
    max_tokens: int = option(
        200,
        "the most subword tokens of a source or a forced target (a model's own lower maximum applies first)",
        check=Range(1, high=100_001, integer=True),
    )
    max_new_tokens: int = option(
        20,
        "the most tokens a decoder-only model writes for one /api/generate request (its attributions cost "
        "about one forward and backward pass per token)",
        check=Range(1, high=513, integer=True),
    )
    max_beam: int = option(16, "the largest beam a request may ask for", check=Range(1, high=257, integer=True))
    heavy_beam: int = option(
        5, "beams above this run as heavy jobs, in a worker process (so do attribution methods)", check=BIG
    )
    max_upload_bytes: int = option(8 * 1024 * 1024, "the largest uploaded image file, in bytes", check=BIG)
    max_upload_pixels: int = option(
        40_000_000, "the most pixels of an uploaded image (read from its header, before decoding)", check=BIG
    )
    max_decode_bytes: int = option(
        160_000_000,
        "the most bytes an uploaded image may take while it is decoded: its pixels times the bytes kept per pixel "
        "(4 for RGB and RGBA, 1 for grayscale; a JPEG counts at the reduced size it is decoded at, 1/64 of its "
        "pixels at most); it is reduced to the captioner's canvas at once",
        check=BIG,
    )
    max_decodes: int = option(
        2,
        "uploaded images decoded at once (each holds up to --max-decode-bytes meanwhile); more wait their turn",
        check=Range(1, high=257, integer=True),
    )
    max_body_bytes: int = option(
        65536,
        "the largest request body of every route but /api/caption (which takes max-upload-bytes of image, "
        "base64 in JSON); counted as it streams in, 413 beyond",
        check=BIG,
    )
    max_answer_numbers: int = option(
        1_000_000,
        'the most numbers of per-head maps in one answer; beyond it ask for one layer at a time ("layer": l)',
        check=BIG,
    )
    fast_batch: int = option(
        8,
        "plain translations of one model and beam that the fast lane searches as one batch when they wait "
        "together (1: one at a time)",
        check=Range(1, high=257, integer=True),
    )
    fast_lanes: int = option(
        min(2, os.cpu_count() or 1),
        "threads of the fast lane, each searching one batch at a time (default: 2, or 1 on a one-core machine; "
        "torch releases Python's GIL in its operators, so on two cores two threads answer about 1.8x as many "
        "translations as one)",
        check=Range(1, high=65, integer=True),
    )
    fast_wait: float = option(
        10.0,
        "a plain translation or caption that would wait longer than this many seconds for the fast lane (the "
        "requests ahead of it times their recent mean time) is answered 503 with Retry-After at once (0: never)",
        check=Range(0, high=86_401),
    )
    fast_threads: int = option(
        1,
        "torch threads of the server process, where the fast lane computes plain translations and captions",
        check=Range(1, high=257, integer=True),
    )
    workers: int = option(
        max(1, (os.cpu_count() or 1) - 1),
        "heavy jobs at once, each in a worker process (default: the core count less one, at least 1, so the "
        "fast lane keeps a core)",
        check=Range(1, high=257, integer=True),
    )
    worker_threads: int = option(1, "torch threads of each worker process", check=Range(1, high=257, integer=True))
    queue: int = option(
        8,
        "heavy jobs that may wait for a worker; more, or one that would wait longer than --job-timeout "
        "(the queue ahead of it times the recent jobs' mean time), are answered 503 with Retry-After at once",
        check=Range(0, high=10_001, integer=True),
    )
    job_timeout: float = option(
        120.0,
        "seconds a heavy job may run before it is stopped (answered 504)",
        check=Range(0, open_low=True, high=86_401),
    )
    worker_tasks: int = option(
        1,
        "jobs a worker process runs before a fresh one replaces it (1: a job's memory goes back to the system "
        "when it ends)",
        check=BIG,
    )
    worker_nice: int = option(
        10,
        "niceness of the worker processes (0..19): heavy jobs yield the cores to plain translations",
        check=Range(0, high=20, integer=True),
    )
    follow_every: float = option(
        10.0,
        "a model given as a training run's folder (attnkit train's --out-dir) is followed: a request for it "
        "that comes at least this many seconds after the last look finds the run's newest complete checkpoint "
        "and serves it, so attention can be watched as it forms (0: keep the checkpoint loaded at start)",
        check=Range(0, high=86_401),
    )
    limit_concurrency: int = option(
        64,
        "requests in flight at once, counted once their head and body have arrived (a connection that never "
        "completes a request takes no place); beyond it, 503 with Retry-After and a JSON message",
        check=Range(2, high=100_001, integer=True),
    )
    header_timeout: float = option(
        10.0,
        "seconds a connection may take to send a whole request head, from its opening or the end of its previous "
        "answer (bytes trickling in do not restart the clock); it is closed after",
        check=Range(0, open_low=True, high=3601),
    )
    body_timeout: float = option(
        60.0,
        "seconds a request body may take to arrive after its head; 408 and the connection closed after",
        check=Range(0, open_low=True, high=3601),
    )
    max_client_connections: int = option(
        32,
        "connections one client address (IPv6: its /64 network) may hold open at once; one more is closed as "
        "it opens (behind a reverse proxy every client has the proxy's address: raise it)",
        check=Range(1, high=100_001, integer=True),
    )
    max_connections: int = option(
        512,
        "open connections in all; at the cap a newcomer first closes the one that has waited longest without "
        "a complete request, and is closed itself only when every connection is inside a request",
        check=Range(2, high=100_001, integer=True),
    )

    def __post_init__(self) -> None:
        check_fields(self)
        if self.heavy_beam > self.max_beam:
            self.heavy_beam = self.max_beam

    @property
    def caption_body_bytes(self) -> int:
        """The body limit of ``/api/caption``: the image in base64 (4/3 of its bytes) plus room for the fields."""
        return self.max_upload_bytes * 4 // 3 + 4 + self.max_body_bytes

    def allowed_hosts(self) -> set[str]:
        """Host header names (without the port) this server answers."""
        names = {"localhost", "127.0.0.1", "::1", self.host.strip("[]").lower()}
        names |= {h.strip().lower() for h in (self.allow_host or "").split(",") if h.strip()}
        return names - {"0.0.0.0", "::"}


_LIMITS = (
    "max_text_chars",
    "max_target_chars",
    "max_tokens",
    "max_new_tokens",
    "max_beam",
    "heavy_beam",
    "max_upload_bytes",
    "max_upload_pixels",
    "max_decode_bytes",
    "max_decodes",
    "max_body_bytes",
    "max_answer_numbers",
    "fast_batch",
    "fast_lanes",
    "fast_wait",
    "fast_threads",
    "workers",
    "worker_threads",
    "queue",
    "job_timeout",
    "worker_tasks",
    "worker_nice",
    "limit_concurrency",
    "header_timeout",
    "body_timeout",
    "max_client_connections",
    "max_connections",
)


def limits_table(opts: ServeOptions) -> str:
    """The limits in force, as a Markdown list (the API page's description shows it)."""
    help_of = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(opts)}
    return "\n".join(
        f"- `--{name.replace('_', '-')}` = **{getattr(opts, name)}**: {help_of[name].split(' (default')[0]}"
        for name in _LIMITS
    )
