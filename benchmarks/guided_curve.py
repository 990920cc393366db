"""Guided alignment as training goes on: AER and BLEU of every checkpoint of a training run, and a plot.

    PYTHONPATH=src .venv/bin/python benchmarks/guided_curve.py runs/transformer-guided \
        --output benchmarks/results/guided_curve.json --plot docs/images/guided_curve.png

For each complete ``step-*`` checkpoint of the run (and the shipped model as step 0 when ``--start`` names
it): the AER of its guided head on the 100 scored gold verses (one way, and both ways by
grow-diag-final-and), the same on the 50 dev gold verses, and BLEU (greedy) on the first ``--valid``
validation verses. Only dev data is read here, so the curve may be used to choose a checkpoint; the test
verses are for the chosen one (``attnkit evaluate translation``). The plot has AER against steps on the
left and validation BLEU on the right.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def point(model: str, step: int, valid: int, method: str) -> dict:
    from attnkit.tasks.translation.alignment_evaluate import evaluate_alignment
    from attnkit.tasks.translation.translation_quality import evaluate_translation

    one = evaluate_alignment(model, methods=(method,), references=False)["rows"][0]
    both = evaluate_alignment(model, methods=(method,), both_ways="grow-diag-final-and", references=False)["rows"][0]
    bleu = evaluate_translation(model, split="valid", limit=valid)
    return {
        "step": step,
        "model": model,
        "aer": one["aer"],
        "aer_95ci": one["aer_95ci"],
        "dev_aer": one["dev_aer"],
        "aer_both_ways": both["aer"],
        "dev_aer_both_ways": both["dev_aer"],
        "valid_bleu_greedy": bleu["bleu"],
        "valid_sentences": bleu["n_sentences"],
    }


def plot(points: list[dict], path: Path, label: str, xlabel: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p["step"] for p in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(steps, [p["aer"] for p in points], "o-", label="guided head")
    left.plot(steps, [p["aer_both_ways"] for p in points], "s--", label="guided head, both ways")
    left.set(xlabel=xlabel, ylabel="AER (100 gold verses)", title=f"{label}: alignment")
    left.grid(alpha=0.3)
    left.legend()
    right.plot(steps, [p["valid_bleu_greedy"] for p in points], "o-", color="tab:green")
    right.set(xlabel=xlabel, ylabel="BLEU, greedy", title=f"validation, {points[0]['valid_sentences']} verses")
    right.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a training run's folder (its --out-dir)")
    ap.add_argument("--start", default=None, help="the model it was fine-tuned from, plotted as step 0 (attention)")
    ap.add_argument("--valid", type=int, default=300, help="validation verses for BLEU (default 300)")
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "guided_curve.json"))
    ap.add_argument("--plot", default=None, help="write the plot here (PNG)")
    args = ap.parse_args()

    from attnkit.training.checkpoint import checkpoint_step, list_checkpoints

    out = Path(args.output)
    done = {p["model"]: p for p in json.loads(out.read_text())["points"]} if out.exists() else {}
    points = []
    if args.start:
        points.append(done.get(args.start) or point(args.start, 0, args.valid, "attention"))
    for ckpt in list_checkpoints(args.run):
        points.append(done.get(str(ckpt)) or point(str(ckpt), checkpoint_step(ckpt), args.valid, "guided"))
        print(json.dumps(points[-1]), flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"run": args.run, "points": points}, indent=1) + "\n")
    if args.plot:
        plot(points, Path(args.plot), Path(args.run).name, "fine-tuning step" if args.start else "training step")


if __name__ == "__main__":
    main()
