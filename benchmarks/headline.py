"""The README's headline scores, measured: BLEU and chrF of the four shipped translators on the 1,058 held-out
test verses (greedy and beam 5), and the two captioners on the 1,000 held-out test scenes. Each row is what
``attnkit evaluate translation|captioning --model M --beam B --json`` prints, run as a user runs it, so the
file holds the command's own report. ``tools/tables.py`` writes the README's tables from this file, and
``tests/test_doc_tables.py`` fails when a table and the file disagree.

    python benchmarks/headline.py --out benchmarks/results/headline.json   # ~10 min on 2 CPUs

``--only translation`` or ``--only captioning`` measures one part and keeps the other part of an existing
``--out`` file.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

TRANSLATORS = ["rnnencdec-es-en", "rnnsearch-es-en", "transformer-es-en", "transformer-en-es"]
CAPTIONERS = ["captioner-soft", "captioner-hard"]
BEAMS = [1, 5]


def _evaluate(task: str, model: str, beam: int) -> dict:
    """``attnkit evaluate TASK --model MODEL --beam BEAM --json``: its report, and the seconds it took."""
    cmd = [sys.executable, "-m", "attnkit", "evaluate", task, "--model", model, "--beam", str(beam), "--json"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:])} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    report = report[0] if isinstance(report, list) else report
    report["command"] = "attnkit " + " ".join(cmd[3:])
    report["parameters"] = _parameters(model)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"{report['command']}: {report['seconds']} s", file=sys.stderr)
    return report


def _parameters(name: str) -> int:
    """The shipped model's parameter count (its network's, the tokenizer apart)."""
    from attnkit.service import open_model

    impl = open_model(name).impl
    return sum(p.numel() for p in impl.model.parameters())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/headline.json"))
    ap.add_argument("--only", choices=["translation", "captioning"], default=None)
    args = ap.parse_args(argv)
    old = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    result = {
        "what": __doc__.splitlines()[0],
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "date": time.strftime("%Y-%m-%d"),
        "translation": old.get("translation", []),
        "captioning": old.get("captioning", []),
    }
    if args.only in (None, "translation"):
        result["translation"] = [_evaluate("translation", m, b) for m in TRANSLATORS for b in BEAMS]
    if args.only in (None, "captioning"):
        result["captioning"] = [_evaluate("captioning", m, 1) for m in CAPTIONERS]
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
