"""Rank 0's first pass of a split ``attnkit translate --file`` (issue 58): its time on N lines, and what it wrote.

The pass (:func:`attnkit.cli.translate_job._prepare`) reads, checks and tokenises every line of the file
and writes the kept sentences in the one-process run's length-sorted order (``sorted.txt``) and each
one's place in it (``order.u64``), so that the parts are the one-process batches. Here it runs alone, in
this process, on the first input of ``benchmarks/corpus_jobs.py`` (the prepared Bible's Spanish verses of
at most 40 words, repeated to N lines), with the shipped translator; the SHA-256 of the two files it
writes are printed so that two versions of the pass can be checked to write the same bytes.

Usage: ``python benchmarks/translate_pass.py [--lines 300000] [--profile 25] [--out results/x.json]``
(``--profile K``: also run it under cProfile and print the K costliest functions by cumulative time).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import io
import json
import os
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=300_000, help="lines of the input (default: 300000)")
    ap.add_argument("--profile", type=int, default=0, help="print the K costliest functions (default: no profile)")
    ap.add_argument("--out", type=Path, default=None, help="also write the results here as JSON")
    opts = ap.parse_args()

    from attnkit.cli.translate_job import _prepare
    from attnkit.pretrained import DEFAULT_TRANSLATION_MODEL
    from attnkit.service import ModelKind, open_model
    from corpus_jobs import write_inputs

    tr = open_model(None, default=DEFAULT_TRANSLATION_MODEL, kind=ModelKind.TRANSLATOR).impl
    with tempfile.TemporaryDirectory(prefix="translate-pass-") as tmp:
        es, _, source = write_inputs(Path(tmp), opts.lines)
        args = SimpleNamespace(file=str(es), truncate=False)
        job = Path(tmp) / "job"
        job.mkdir()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        err = io.StringIO()
        profiler = cProfile.Profile() if opts.profile else None
        start = time.perf_counter()
        with contextlib.redirect_stderr(err):
            if profiler is not None:
                profiler.enable()
            _, counts = _prepare(tr, args, {"benchmark": True}, job)
            if profiler is not None:
                profiler.disable()
        seconds = time.perf_counter() - start
        result = {
            "lines": opts.lines,
            "input": source,
            "input_bytes": es.stat().st_size,
            "seconds": round(seconds, 2),
            "profiled": bool(profiler),
            "counts": counts,
            "stderr_lines": err.getvalue().count("\n"),
            "sorted_txt_sha256": _sha256(job / "sorted.txt"),
            "order_u64_sha256": _sha256(job / "order.u64"),
            "peak_rss_mib_before_pass": round(rss_before / 1024, 1),
            "peak_rss_mib_after_pass": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "load_average": os.getloadavg(),
            "threads": os.environ.get("OMP_NUM_THREADS"),
        }
    print(json.dumps(result, indent=1))
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(opts.profile)
    if opts.out is not None:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
