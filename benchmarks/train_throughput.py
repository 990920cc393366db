"""Training throughput of the three translation models on the same batches, in one run.

    PYTHONPATH=src python benchmarks/train_throughput.py [--steps 30] [--threads 2] [--models ...] [--precision fp32 bf16]

The README's table reports each model's tokens/s over its whole training run, and those runs
shared the machine differently. This benchmark puts them on equal terms: the same real training
batches (64 verses, bucketed by length, seed 0), the same thread count, one model after the other
in one process, each timed over ``--steps`` optimizer steps (forward, label-smoothed loss,
backward, clipping, Adam) after ``--warmup`` untimed ones. Sizes are those of the shipped models
(``TranslationConfig`` defaults; Transformer 3+3 layers, d_model 256, 4 heads, FFN 1024), and
RNNsearch with ``rnn_attention="luong"`` (the same sizes, attention after the GRU step), and that
with ``encoder_dim=128`` (OpenNMT-py's ``brnn`` 256: 128 units per encoder direction).
``--precision fp32 bf16`` (or ``auto``: bf16 where a matmul probe measures it faster) times each
model in both (bf16: autocast with fp32 master weights, as ``attnkit train --precision bf16`` trains;
each model's rows one after the other, from the same initial weights) and prints each row against the
first precision's. Prints target tokens/s and the ratio to RNNsearch (the
first precision's); writes ``benchmarks/results/train_throughput.json``. Run it with nothing else on
the machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnkit.data.batching import encode_pairs  # noqa: E402
from attnkit.data.datasets.bible import load_pairs  # noqa: E402
from attnkit.tasks.translation import (  # noqa: E402
    TranslationConfig,
    build_optimizer,
    build_translation_model,
    get_tokenizer,
    translation_batches,
    translation_loss_fn,
)
from attnkit.training import ListBatches, RunConfig, Trainer  # noqa: E402

MODELS = {
    "rnnencdec": dict(model="rnnencdec"),
    "rnnsearch": dict(model="rnnsearch"),
    "rnnsearch-luong": dict(model="rnnsearch", rnn_attention="luong"),  # attention after the GRU step
    # OpenNMT-py's brnn 256 with input_feed 0: the same decoder, 128 units per encoder direction
    "rnnsearch-brnn": dict(model="rnnsearch", rnn_attention="luong", encoder_dim=128),
    "transformer": dict(model="transformer", dropout=0.1, warmup_steps=500, lr=1.5e-3),
}


def time_model(name: str, batches: list[dict], warmup: int, pad_id: int, precision: str = "fp32") -> dict:
    """Time ``Trainer.train_step``, the step training runs, on ``batches[warmup:]``."""
    cfg = TranslationConfig.from_options(**MODELS[name])
    torch.manual_seed(0)
    model = build_translation_model(cfg, 8000).train()
    opt, sched = build_optimizer(cfg, model)
    with tempfile.TemporaryDirectory() as tmp:  # the trainer wants a folder; nothing is saved here
        trainer = Trainer(
            model,
            opt,
            RunConfig(
                out_dir=tmp, clip_grad_norm=cfg.run.clip_grad_norm, progress=False, device=None, precision=precision
            ),
            loss_fn=translation_loss_fn(pad_id, cfg.label_smoothing),
            train_batches=ListBatches(batches),
            scheduler=sched,
        )
        for b in batches[:warmup]:
            trainer.train_step(b)
        t = time.perf_counter()
        tokens = sum(trainer.train_step(b)[1] for b in batches[warmup:])
        dt = time.perf_counter() - t
    return {
        "model": name,
        "precision": precision,
        "dtype": str(trainer.amp_dtype).removeprefix("torch."),
        "parameters": sum(p.numel() for p in model.parameters()),
        "timed_steps": len(batches) - warmup,
        "target_tokens": tokens,
        "seconds": round(dt, 2),
        "tokens_per_s": round(tokens / dt, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per model")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    ap.add_argument(
        "--precision",
        nargs="+",
        choices=["fp32", "bf16", "auto"],
        default=["fp32"],
        help="auto: bf16 where measured faster",
    )
    ap.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "train_throughput.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = get_tokenizer(8000)
    examples = encode_pairs(load_pairs("train"), tok, 100)
    source = translation_batches(examples, batch_size=64, max_tokens=None, seed=0)
    source.set_epoch(0)
    batches = list(itertools.islice(iter(source), args.warmup + args.steps))
    rows = [time_model(m, batches, args.warmup, tok.pad_id, p) for m in args.models for p in args.precision]
    first = {r["model"]: r["tokens_per_s"] for r in reversed(rows)}  # each model's first precision
    for r in rows:
        if "rnnsearch" in first:
            r["vs_rnnsearch"] = round(r["tokens_per_s"] / first["rnnsearch"], 3)
        r["vs_first_precision"] = round(r["tokens_per_s"] / first[r["model"]], 3)
        print(
            f"{r['model']:16s} {r['precision']:5s} {r['parameters'] / 1e6:5.1f} M params  "
            f"{r['tokens_per_s']:8.1f} target tok/s  {r.get('vs_rnnsearch', float('nan')):.2f}x RNNsearch  "
            f"{r['vs_first_precision']:.2f}x {args.precision[0]}"
        )
    out = Path(args.output)
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "threads": args.threads,
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "torch": torch.__version__,
                "batch_size": 64,
                "rows": rows,
            },
            indent=2,
        )
    )
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
