"""Seconds per verse of the gradient attributions on the shipped Transformer: a baseline against what
``attnkit explain`` runs (the shared-forward engine: one forward pass per interpolation point serves every
target piece, the pieces' backward passes batched), side by side in one run.

    PYTHONPATH=src .venv/bin/python benchmarks/attribution_speed.py [--model transformer-es-en] [--verses 1]
        [--repeats 3] [--threads 1 2] [--batch 256] [--cases ixg ig32 ig8 ig]
        [--baseline per-row|one-at-a-time] [--precision fp32 bf16] [--device cpu|cuda]

Baselines: ``per-row`` (default), the Captum engine batched over rows of (target piece, interpolation
point), one forward and one backward per row, up to ``--batch`` rows a pass (what ``explain`` ran before
the shared forward, and still runs for recurrent models); ``one-at-a-time``, Captum on one target piece at
a time. ``--precision`` casts the model (``attnkit explain --precision``); the baseline and the engine run
in the same precision.

The verses are the hand-aligned gold verses of 38–42 Spanish words (package data, no corpus needed),
each forced to its reference. Per verse and thread count, each path runs ``--repeats`` times after an
untimed warm-up; the table gives the median seconds per verse, the ratio (one at a time / batched) and
the largest difference between the two paths' attributions, and for integrated gradients the share of
target pieces whose attributions sum to f(x) − f(x') within 1 % of max(|gap|, 0.1). Cases: input ×
gradient, integrated gradients at a fixed 8 or 32 points (32: the first round of the default), and the
default (32 points doubled per piece up to 256 until complete within 1 %; one run each). Writes
benchmarks/results/attribution_speed.json. A number taken while other work shares the CPU says little
on its own; the ratio, measured in the same run, says more.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnkit.alignment.gold import load_gold  # noqa: E402
from attnkit.attribution import gradients  # noqa: E402
from attnkit.attribution.forced import forced_translation  # noqa: E402
from attnkit.attribution.methods import METHODS, translation_log_probs  # noqa: E402
from attnkit.tasks.translation import Translator  # noqa: E402


def one_target_at_a_time(model, pair, method: str, steps: int | None):
    """The per-target path: for each target piece, Captum on that piece alone (all its interpolation points
    in one pass, only its own log-probability computed), the same refinement rule as the batched path.
    Returns the signed attributions per source piece ``(T, S)``."""
    from captum.attr import InputXGradient, IntegratedGradients

    f = translation_log_probs(model, pair)
    x = model.embedding(pair.src).detach().float()[None]  # (1, S, E)
    base = torch.zeros_like(x)
    rows = []
    for t in range(len(pair.tgt)):
        column = torch.tensor([t])

        def f_t(batch, column=column):
            return f(batch, column.expand(batch.shape[0]))[:, None]  # (N, 1)

        if method == "input_x_gradient":
            rows.append(InputXGradient(f_t).attribute(x.clone(), target=0)[0].detach())
            continue
        with torch.no_grad():
            gap = float(f_t(x)[0, 0] - f_t(base)[0, 0])
        n = steps or gradients.DEFAULT_STEPS
        while True:
            a, d = IntegratedGradients(f_t).attribute(
                x.clone(), baselines=base, target=0, n_steps=n, method="gausslegendre", return_convergence_delta=True
            )
            ok = abs(float(d)) <= gradients.COMPLETENESS * max(abs(gap), gradients.GAP_FLOOR)
            if steps or ok or n * 2 > gradients.MAX_STEPS:
                break
            n *= 2
        rows.append(a[0].detach())
    return torch.stack(rows).sum(-1)  # (T, S)


def per_row(model, pair, method: str, steps: int | None, batch: int):
    """The per-row engine (Captum, rows of (piece, point) batched): signed attributions ``(T, S)``."""
    f = translation_log_probs(model, pair)
    emb = model.embedding(pair.src).detach().float()  # (S, E)
    attr, _, _ = gradients.attribute(method, f, emb, len(pair.tgt), steps=steps, batch=batch, forward_at=f)
    return attr.sum(-1).cpu()


def batched(model, pair, method: str, steps: int | None, batch: int):
    """What ``explain`` runs: ``(signed attributions (T, S), pieces complete within 1 %)``."""
    out = METHODS[method].translation(model, pair, steps=steps, batch=batch)
    if "convergence_delta" not in out.extra:
        return out.raw.cpu(), None
    delta = torch.tensor(out.extra["convergence_delta"])
    gap = out.raw.cpu().sum(1) - delta  # Δ_t = f_t(x) − f_t(x')
    tol = gradients.COMPLETENESS * gap.abs().clamp_min(gradients.GAP_FLOOR)
    return out.raw.cpu(), (delta.abs() <= tol).tolist()


CASES = {
    "ixg": ("input_x_gradient", None),
    "ig8": ("integrated_gradients", 8),
    "ig32": ("integrated_gradients", 32),
    "ig": ("integrated_gradients", None),
}


def timed(fn):
    """Seconds of ``fn()`` (the GPU's queue drained before the clock stops) and its result."""
    t0 = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def _case(args, model, pairs, method: str, steps: int | None, precision: str, threads: int) -> dict:
    """One row of the table: the baseline and the engine timed alternately on every verse."""
    label = f"{method}" + ("" if method != "integrated_gradients" else f" ({steps or 'refined'})")
    baseline = partial(per_row, batch=args.batch) if args.baseline == "per-row" else one_target_at_a_time
    old_s, new_s, diffs, complete = [], [], [], []
    for pair in pairs:
        batched(model, pair, method, 4 if method == "integrated_gradients" else None, args.batch)  # warm-up
        for _ in range(args.repeats if steps is not None or method != "integrated_gradients" else 1):
            t_new, (a_new, ok) = timed(partial(batched, model, pair, method, steps, args.batch))
            t_old, a_old = timed(partial(baseline, model, pair, method, steps))
            new_s.append(t_new)
            old_s.append(t_old)
            diffs.append(float((a_new - a_old).abs().max()))
            complete += ok or []
    old, new = statistics.median(old_s), statistics.median(new_s)
    row = {
        "method": label,
        "precision": precision,
        "threads": threads,
        "baseline_s": round(old, 3),
        "explain_s": round(new, 3),
        "ratio": round(old / new, 3),
        "max_abs_diff": max(diffs),
        "runs": len(new_s),
        "complete_within_1pct": round(sum(complete) / len(complete), 3) if complete else None,
    }
    print(
        f"{label:<36} {precision} threads {threads}  {args.baseline} {old:8.2f} s  explain {new:8.2f} s  "
        f"ratio {old / new:5.2f}x  max |diff| {max(diffs):.1e}  ({len(new_s)} runs)"
        + (f"  complete within 1 %: {row['complete_within_1pct']:.0%}" if complete else ""),
        flush=True,
    )
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="transformer-es-en")
    p.add_argument("--verses", type=int, default=1, help="gold verses of 38–42 Spanish words (default: 1)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batch", type=int, default=gradients.DEFAULT_BATCH)
    p.add_argument(
        "--cases",
        nargs="+",
        default=["ixg", "ig32"],
        choices=list(CASES),
        help="ixg: input × gradient; igN: integrated gradients at N fixed points (ig8, ig32); ig: the default, "
        "refined (default: ixg ig32)",
    )
    p.add_argument("--baseline", choices=["per-row", "one-at-a-time"], default="per-row")
    p.add_argument("--precision", nargs="+", choices=["fp32", "bf16"], default=["fp32"])
    p.add_argument("--device", default="cpu", help="cpu, or cuda (--threads then sets the CPU's threads only)")
    p.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "attribution_speed.json"))
    args = p.parse_args()

    verses = [v for v in load_gold() if 38 <= len(v.source) <= 42][: args.verses]
    cases = [CASES[c] for c in args.cases]
    rows = []
    for precision in args.precision:
        tr = Translator.load(args.model, dtype=precision, device=args.device)
        model = tr.model.eval()
        pairs = [forced_translation(tr, " ".join(v.source), " ".join(v.target)) for v in verses]
        for threads in args.threads:
            torch.set_num_threads(threads)
            for method, steps in cases:
                rows.append(_case(args, model, pairs, method, steps, precision, threads))
    report = {
        "model": args.model,
        "baseline": args.baseline,
        "verses": [
            {"source_words": len(v.source), "source_pieces": len(p.src), "target_pieces": len(p.tgt)}
            for v, p in zip(verses, pairs)
        ],
        "batch": args.batch,
        "cpu": platform.processor() or platform.machine(),
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "load_average_at_end": os.getloadavg(),
        "rows": rows,
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
