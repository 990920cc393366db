"""How fast RNNsearch learns per update under one training recipe: valid loss against steps and tokens.

    PYTHONPATH=src python benchmarks/rnn_recipe.py NAME [--steps 300] [--eval-every 50] [--threads 1] \
        [--set option=value ...]

Trains ``attnkit train translation``'s RNNsearch (the same model, optimizer, batches and loss it builds
from ``TranslationConfig``; ``--set`` overrides any of its options, e.g. ``--set param_init=0.1
--set max_tokens=2048``) for ``--steps`` optimizer steps on the Bible training split, and every
``--eval-every`` steps measures the teacher-forced cross-entropy (no smoothing, dropout off) on the
first ``--valid-verses`` validation verses. Training time is measured without the evaluations.
Writes ``benchmarks/results/rnn_recipe/NAME.json``: the options, then one row per evaluation
(step, target tokens seen, training seconds, valid loss). Recipes are compared at equal steps and
at equal tokens seen; run two at once with one thread each only when comparing learning, never speed.
"""

from __future__ import annotations

import argparse
import ast
import json
import platform
import sys
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
from attnkit.training.losses import label_smoothed_nll  # noqa: E402


def parse_sets(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set wants option=value, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


@torch.no_grad()
def valid_loss(model, batches, pad_id: int) -> float:
    model.eval()
    total, n = 0.0, 0
    batches.set_epoch(0)
    for b in batches:
        logits, _ = model(b["src"], b["src_lengths"], b["tgt_in"])
        s, k = label_smoothed_nll(logits, b["tgt_out"], pad_id, 0.0)
        total, n = total + float(s), n + k
    model.train()
    return total / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--valid-verses", type=int, default=400)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="OPTION=VALUE")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    options = {"model": "rnnsearch", **parse_sets(args.set)}
    cfg = TranslationConfig.from_options(**options)
    tok = get_tokenizer(cfg.vocab_size)
    train = encode_pairs(load_pairs("train"), tok, cfg.max_len)
    valid = encode_pairs(load_pairs("valid")[: args.valid_verses], tok, cfg.max_len)
    torch.manual_seed(cfg.run.seed)
    model = build_translation_model(cfg, tok.vocab_size).train()
    opt, sched = build_optimizer(cfg, model)
    loss_fn = translation_loss_fn(tok.pad_id, cfg.label_smoothing)
    batches = translation_batches(train, batch_size=cfg.batch_size, max_tokens=cfg.max_tokens, seed=cfg.run.seed)
    vbatches = translation_batches(valid, batch_size=64, max_tokens=None, seed=0, shuffle=False)
    out = ROOT / "benchmarks" / "results" / "rnn_recipe" / f"{args.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"step": 0, "tokens": 0, "train_s": 0.0, "valid_loss": valid_loss(model, vbatches, tok.pad_id)}]
    step, tokens, train_s, epoch = 0, 0, 0.0, 0
    print(rows[-1], flush=True)
    while step < args.steps:
        batches.set_epoch(epoch)
        for batch in batches:
            t = time.perf_counter()
            loss_sum, n, _ = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            (loss_sum / n).backward()
            if cfg.run.clip_grad_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.run.clip_grad_norm)
            opt.step()
            if sched is not None:
                sched.step()
            train_s += time.perf_counter() - t
            step, tokens = step + 1, tokens + n
            if step % args.eval_every == 0 or step == args.steps:
                rows.append(
                    {
                        "step": step,
                        "tokens": tokens,
                        "train_s": round(train_s, 1),
                        "valid_loss": round(valid_loss(model, vbatches, tok.pad_id), 4),
                    }
                )
                print(rows[-1], flush=True)
                out.write_text(
                    json.dumps(
                        {
                            "name": args.name,
                            "options": options,
                            "threads": args.threads,
                            "machine": platform.processor() or platform.machine(),
                            "rows": rows,
                        },
                        indent=1,
                    )
                )
            if step == args.steps:
                break
        epoch += 1


if __name__ == "__main__":
    main()
