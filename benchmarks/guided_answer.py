"""What the explorer's answer for a guided model costs: its guided head's rows read from the pass that draws
the maps (``TranslationAttention.guided``, one step more in that pass) against a pass of their own (the
aligner of ``attnkit align``, as the explorer read them before), in-process, the same run.

    PYTHONPATH=src .venv/bin/python benchmarks/guided_answer.py [--model transformer-es-en] [--verses 20] [--repeats 5]

For each of the first ``--verses`` test verses, the page's answer (beam 5 with every head's maps) is built
from the verse's beam-5 result (the search is not timed): the forced pass, then ``translation_payload``.
The two ways alternate ``--repeats`` times (torch at 1 thread); the report gives the median time per answer
of each and their ratio, checks that both give the same links, and writes
benchmarks/results/guided_answer.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="transformer-es-en")
    ap.add_argument("--verses", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "guided_answer.json"))
    args = ap.parse_args()

    import torch

    from attnkit.data.datasets.bible import load_pairs
    from attnkit.explorer.payload import translation_payload
    from attnkit.pretrained import resolve_model
    from attnkit.tasks.translation import Translator
    from attnkit.tasks.translation.alignment import has_guided_head

    torch.set_num_threads(1)
    tr = Translator.load(resolve_model(args.model))
    if not has_guided_head(tr):
        sys.exit(f"{args.model} was not trained with guided alignment: nothing to compare")
    verses = [p.src for p in load_pairs("test")[: args.verses]]
    results = tr.translate(verses, beam_size=5)

    def answers(same_pass: bool) -> tuple[float, list]:
        links = []
        t = time.perf_counter()
        for s, r in zip(verses, results):
            ta = tr.attention_batch([s], [r["tokens"]])[0]
            if not same_pass:  # the rows dropped: the payload reads the head with the aligner's own pass
                ta = dataclasses.replace(ta, guided=None)
            links.append(translation_payload(tr, s, result=r, forced=ta, heads=True)["words"]["links"])
        return (time.perf_counter() - t) / len(verses), links

    answers(True)  # warm
    times: dict[str, list[float]] = {"own_pass": [], "same_pass": []}
    same_links = True
    for _ in range(args.repeats):
        own, own_links = answers(False)
        same, links = answers(True)
        times["own_pass"].append(own)
        times["same_pass"].append(same)
        same_links &= links == own_links
    med = {k: statistics.median(v) for k, v in times.items()}
    report = {
        "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "model": args.model,
        "verses": len(verses),
        "ms_per_answer": {k: [round(t * 1e3, 1) for t in v] for k, v in times.items()},
        "median_ms": {k: round(t * 1e3, 1) for k, t in med.items()},
        "ratio_same_over_own": round(med["same_pass"] / med["own_pass"], 2),
        "same_links": same_links,
        "cpu_count": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
