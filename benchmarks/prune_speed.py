"""Heads pruned for good: does the physically pruned export translate as the masked model, and how much faster
does it decode? (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?", §6: pruning's speed.)

    PYTHONPATH=src .venv/bin/python benchmarks/prune_speed.py --model transformer-es-en --share 0.25 \
        --importance-verses 32 --test-verses 100 --runs 5 --output benchmarks/results/prune_speed.json

The heads are scored by ablation importance on the first ``--importance-verses`` validation verses (as
``benchmarks/head_pruning.py``); the ``round(share · heads)`` least important go. The pruned model is written by
``attnkit export MODEL OUT --prune-heads SPEC`` (fp16 weights, as the shipped model's) and loaded back with
``Translator.load``; the masked model is the unpruned one with the same heads zero-ablated (``HeadAblation``
through ``intervene``). Both translate the first ``--test-verses`` test verses greedily (and with beam 5):
identical outputs counted, BLEU of each. Speed: one thread (``torch.set_num_threads(1)``), the unpruned and the
pruned model timed in turn in this one process, ``--runs`` times each over the same verses (after one warm-up
each); the ratio of the median wall times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _timed(tr, sources, beam) -> float:
    t0 = time.perf_counter()
    tr.translate(sources, beam_size=beam)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="transformer-es-en")
    ap.add_argument("--share", type=float, default=0.25)
    ap.add_argument("--importance-verses", type=int, default=32)
    ap.add_argument("--test-verses", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--output", default=None)
    args = ap.parse_args()

    import torch

    from attnkit.attribution.head_importance import head_importance
    from attnkit.attribution.interventions import HeadAblation, intervene
    from attnkit.cli import main as cli
    from attnkit.data.corpus import open_corpus
    from attnkit.models.head_pruning import head_counts
    from attnkit.service import open_model
    from attnkit.tasks.translation import Translator
    from attnkit.tasks.translation.metrics import corpus_scores

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    full = open_model(args.model).impl
    corpus = open_corpus(getattr(full, "corpus", "bible"), None)
    valid = corpus.pairs("valid", limit=args.importance_verses)
    test = corpus.pairs("test", limit=args.test_verses)
    sources, refs = [p.src for p in test], [p.tgt for p in test]
    report = head_importance(full, [p.src for p in valid], [p.tgt for p in valid])
    k = round(args.share * len(report.heads))
    gone = sorted((h.site, h.layer, h.head) for h in sorted(report.heads, key=lambda h: h.ablation)[:k])
    spec = ",".join(f"{s}:{layer + 1}.{h + 1}" for s, layer, h in gone)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pruned"
        if cli(["export", args.model, str(out), "--prune-heads", spec]) != 0:
            raise SystemExit("the pruned export failed")
        pruned = Translator.load(out)
        size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    params = [sum(p.numel() for p in m.parameters()) for m in (full.model, pruned.model)]

    same: dict[str, int] = {}
    bleu: dict[str, dict[str, float]] = {}
    for name, beam in (("greedy", 1), ("beam5", 5)):
        with intervene(full.model, [HeadAblation(layer, head, site=site) for site, layer, head in gone]):
            masked = [t.translation for t in full.translate(sources, beam_size=beam)]
        cut = [t.translation for t in pruned.translate(sources, beam_size=beam)]
        clean = [t.translation for t in full.translate(sources, beam_size=beam)]
        same[name] = sum(a == b for a, b in zip(masked, cut))
        bleu[name] = {
            n: corpus_scores(h, refs)["bleu"] for n, h in (("unpruned", clean), ("masked", masked), ("pruned", cut))
        }
        print(f"{name}: {same[name]}/{len(sources)} identical to the masked model; BLEU {bleu[name]}", flush=True)

    seconds: dict[str, dict[str, list[float]]] = {}
    for name, beam in (("greedy", 1), ("beam5", 5)):
        runs = seconds[name] = {"unpruned": [], "pruned": []}
        for tr in (full, pruned):  # warm-up
            _timed(tr, sources, beam)
        for _ in range(args.runs):
            runs["unpruned"].append(_timed(full, sources, beam))
            runs["pruned"].append(_timed(pruned, sources, beam))
        med = {n: statistics.median(v) for n, v in runs.items()}
        print(
            f"{name}: median {med['unpruned']:.3f} s unpruned, {med['pruned']:.3f} s pruned, "
            f"ratio {med['pruned'] / med['unpruned']:.3f}",
            flush=True,
        )
    out = {
        "model": args.model,
        "share": args.share,
        "heads_removed": spec,
        "removed": len(gone),
        "heads": len(report.heads),
        "heads_per_layer": head_counts(pruned.model.config),
        "parameters": {"unpruned": params[0], "pruned": params[1]},
        "export_bytes": size,
        "importance_verses": len(valid),
        "test_verses": len(test),
        "identical_to_masked": same,
        "bleu": bleu,
        "threads": torch.get_num_threads(),
        "runs": args.runs,
        "seconds": seconds,
        "median_ratio_pruned_over_unpruned": {
            n: statistics.median(v["pruned"]) / statistics.median(v["unpruned"]) for n, v in seconds.items()
        },
        "torch": torch.__version__,
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    print(f"{out['wall_seconds']} s")
    if args.output:
        Path(args.output).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
