"""``attnkit translate --format html --processes 2`` on a 1,000-block document: byte for byte one process's.

The document: the first 1,000 test verses, each a ``<p>`` with one to three random tags over its words
(``markup_transfer.draw_tags``, seeded), between a header and a footer. Each run is the real command line
(a fresh process, the shipped ``transformer-es-en``, beam 5); the outputs are compared byte for byte and
the wall times reported (they depend on the machine and its load: say which it was).

    PYTHONPATH=src python benchmarks/markup_processes.py [--blocks 1000] [--output results/markup_processes.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from attnkit.data.datasets.bible import load_pairs
from markup_transfer import as_html, draw_tags


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=1000)
    ap.add_argument("--model", default="transformer-es-en")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--output", default=None)
    args = ap.parse_args()
    rng = random.Random(0)
    verses = load_pairs("test", limit=args.blocks)
    paras = [as_html(p.src.split(), draw_tags(rng, len(p.src.split()), set(range(len(p.src.split()))))) for p in verses]
    with tempfile.TemporaryDirectory() as tmp:
        doc = Path(tmp) / "doc.html"
        doc.write_text("<html><body>\n<h1>Juan</h1>\n" + "\n".join(paras) + "\n</body></html>\n", encoding="utf-8")
        runs = {}
        for name, extra in (("one process", []), ("--processes 2", ["--processes", "2"])):
            out = Path(tmp) / f"{len(runs)}.html"
            argv = [sys.executable, "-m", "attnkit", "translate", "--model", args.model, "--format", "html"]
            argv += ["--file", str(doc), "--beam", str(args.beam), "--output", str(out), *extra]
            started = time.monotonic()
            subprocess.run(argv, check=True, env=os.environ)
            runs[name] = {
                "seconds": round(time.monotonic() - started, 1),
                "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
                "bytes": out.stat().st_size,
            }
            print(f"{name}: {runs[name]['seconds']} s, {runs[name]['bytes']} bytes")
    same = len({r["sha256"] for r in runs.values()}) == 1
    print(f"byte-identical: {same}")
    report = {"blocks": len(paras), "model": args.model, "beam": args.beam, "byte_identical": same, "runs": runs}
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
