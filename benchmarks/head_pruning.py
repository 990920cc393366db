"""The pruning curve of a Transformer translator: BLEU against the share of heads removed, in the order each
head-importance score gives (Michel, Levy & Neubig 2019, Fig. 3; Voita et al. 2019).

    PYTHONPATH=src .venv/bin/python benchmarks/head_pruning.py --model transformer-es-en \
        --importance-verses 32 --test-verses 100 --output benchmarks/results/head_pruning.json

The heads are scored (ablation and gradient importance, :mod:`attnkit.attribution.head_importance`) on the
first ``--importance-verses`` *validation* verses, so the order never sees a test verse; then the
``k`` least important heads of all three attention types together are zero-ablated
(:class:`~attnkit.attribution.interventions.HeadAblation`, the masked model: a head removed contributes
nothing to its output projection) and the first ``--test-verses`` test verses are translated greedily
with the rest. A random order (seeded) is the baseline. BLEU is sacrebleu's corpus BLEU.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="transformer-es-en")
    ap.add_argument("--importance-verses", type=int, default=32)
    ap.add_argument("--test-verses", type=int, default=100)
    ap.add_argument("--removed", default="0,4,8,12,16,20,24,28", help="numbers of heads removed, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default=None)
    args = ap.parse_args()

    from attnkit.attribution.head_importance import head_importance
    from attnkit.attribution.interventions import HeadAblation, intervene
    from attnkit.data.corpus import open_corpus
    from attnkit.service import open_model
    from attnkit.tasks.translation.metrics import corpus_scores

    t0 = time.perf_counter()
    tr = open_model(args.model).impl
    corpus = open_corpus(getattr(tr, "corpus", "bible"), None)
    valid = corpus.pairs("valid", limit=args.importance_verses)
    test = corpus.pairs("test", limit=args.test_verses)
    report = head_importance(tr, [p.src for p in valid], [p.tgt for p in valid])
    heads = report.heads
    orders = {
        "ablation": sorted(heads, key=lambda h: h.ablation),  # least important first
        "gradient": sorted(heads, key=lambda h: h.gradient),
        "random": random.Random(args.seed).sample(heads, len(heads)),
    }
    removed = [int(k) for k in args.removed.split(",")]
    sources, refs = [p.src for p in test], [p.tgt for p in test]
    curves: dict[str, list[dict]] = {}
    cache: dict[tuple, float] = {}
    for name, order in orders.items():
        curves[name] = []
        for k in removed:
            gone = tuple(sorted((h.site, h.layer, h.head) for h in order[:k]))
            if gone not in cache:
                with intervene(tr.model, [HeadAblation(layer, head, site=site) for site, layer, head in gone]):
                    hyps = [t.translation for t in tr.translate(sources, beam_size=1)]
                cache[gone] = corpus_scores(hyps, refs)["bleu"]
            curves[name].append({"removed": k, "share": round(k / len(heads), 3), "bleu": cache[gone]})
            print(f"{name:>8} {k:>3} heads removed ({k / len(heads):5.1%}): BLEU {cache[gone]:.2f}", flush=True)
    out = {
        "model": args.model,
        "heads": len(heads),
        "importance_verses": len(valid),
        "test_verses": len(test),
        "decoding": "greedy",
        "order": {name: [f"{h.site} L{h.layer + 1}.H{h.head + 1}" for h in order] for name, order in orders.items()},
        "curves": curves,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(f"{out['seconds']} s")
    if args.output:
        Path(args.output).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
