"""The translation comparison table of the README: shipped models on the Bible test split.

    PYTHONPATH=src python benchmarks/translation_table.py \
        --model rnnencdec-es-en --model rnnsearch-es-en [--run runs/rnnencdec --run runs/rnnsearch]

For each model: parameters, test BLEU/chrF (sacrebleu, all test verses) greedy and with beam 5,
BLEU by source length (greedy), decoding sentences/s (greedy and beam 5, on the first
``--speed-sentences`` test verses), and, when its training run folder is given, training time and
tokens/s read from ``train_log.jsonl`` (every ``end`` event of the run, resumed pieces included). A run
given as ``-`` keeps that model's training facts from the previous ``translation.json`` (for a model that
was not retrained, whose run folder is gone: run folders are not committed). Writes
``benchmarks/results/translation.json``, ``docs/bleu_by_length.png`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnkit.data.datasets.bible import load_pairs  # noqa: E402
from attnkit.tasks.translation import Translator, evaluate_translation  # noqa: E402
from attnkit.training.trainer import run_totals  # noqa: E402
from attnkit.viz.curves import plot_bleu_by_length  # noqa: E402

TRAINING_KEYS = ("train_time_min", "train_tokens_per_s", "steps", "epochs", "best_valid_bleu")


def training_stats(run: Path) -> dict:
    t = run_totals(run)
    tps = t["tokens_per_s"]
    return {
        "train_time_min": round(t["time_s"] / 60, 1),
        "train_tokens_per_s": None if tps is None else round(tps, 1),
        "steps": t["steps"],
        "epochs": t["epochs"],
        "best_valid_bleu": t["best_metric"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--run", action="append", default=[])
    ap.add_argument("--limit", type=int, default=None, help="test verses for BLEU (default: all)")
    ap.add_argument("--speed-sentences", type=int, default=100)
    ap.add_argument("--plot", default=str(ROOT / "docs" / "bleu_by_length.png"))
    args = ap.parse_args()
    out = ROOT / "benchmarks" / "results" / "translation.json"
    previous = {r["model_type"]: r for r in json.loads(out.read_text())} if out.exists() else {}
    rows = []
    speed_src = [p.src for p in load_pairs("test")[: args.speed_sentences]]
    for i, m in enumerate(args.model):
        rep = evaluate_translation(m, limit=args.limit)
        b5 = evaluate_translation(m, limit=args.limit, beam_size=5)
        rep.update(beam5_bleu=b5["bleu"], beam5_chrf=b5["chrf"])
        tr = Translator.load(m)
        rep["parameters"] = sum(p.numel() for p in tr.model.parameters())
        for beam in (1, 5):
            t = time.perf_counter()
            tr.translate(speed_src, beam_size=beam, truncate=True)
            rep[f"beam{beam}_sentences_per_s"] = round(len(speed_src) / (time.perf_counter() - t), 2)
        if i < len(args.run) and args.run[i] == "-":
            old = previous.get(rep["model_type"], {})
            rep.update({k: old[k] for k in TRAINING_KEYS if k in old})
        elif i < len(args.run):
            rep.update(training_stats(Path(args.run[i])))
        rows.append(rep)
        print(f"{m}: BLEU {rep['bleu']} chrF {rep['chrf']} (beam 5: {rep['beam5_bleu']})", file=sys.stderr)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2, ensure_ascii=False))
    plot_bleu_by_length(rows, args.plot)
    buckets = [b["bucket"] for b in rows[0]["by_length"]]
    print(
        "| model | params | train time | train tok/s | test BLEU greedy / beam 5 | test chrF greedy / beam 5 "
        "| greedy sent/s | beam-5 sent/s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model_type']} | {r['parameters'] / 1e6:.1f} M | {r.get('train_time_min', '?')} min | "
            f"{r.get('train_tokens_per_s', '?')} | {r['bleu']:.2f} / {r['beam5_bleu']:.2f} | "
            f"{r['chrf']:.2f} / {r['beam5_chrf']:.2f} | "
            f"{r['beam1_sentences_per_s']} | {r['beam5_sentences_per_s']} |"
        )
    print()
    print("| BLEU by source length (words) | " + " | ".join(buckets) + " |")
    print("|---|" + "---|" * len(buckets))
    print("| test verses | " + " | ".join(str(b["n"]) for b in rows[0]["by_length"]) + " |")
    for r in rows:
        print(f"| {r['model_type']} | " + " | ".join(f"{b['bleu']:.1f}" for b in r["by_length"]) + " |")
    print(f"\nwrote {out} and {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
