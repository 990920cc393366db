"""Where one training step of attnkit's language model and of ``transformers``' ``LlamaForCausalLM``
spends its time (issue 57, "Quality"): ``torch.profiler`` over a few steps (forward, loss, backward,
gradient clipping, AdamW) of each model at ``lm_vs_transformers.py``'s configuration, on random
tokens, ops sorted by self CPU time.

    PYTHONPATH=src OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/lm_step_profile.py \
        --d-model 128 --layers 2 --heads 4 --kv-heads 2 --batch-size 8

Prints each model's table (top ``--rows`` ops) and its mean step time over the profiled steps.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))

from attnkit.models.language_model import LanguageModel, LanguageModelConfig
from lm_vs_transformers import make_optimizer, peer_model, train_step


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rows", type=int, default=25)
    p.add_argument("--models", default="attnkit,transformers")
    p.add_argument("--optimizer", choices=("default", "foreach", "fused"), default="fused", help="attnkit's AdamW")
    p.add_argument("--loss", choices=("own", "plain"), default="own", help="attnkit's own loss path or plain CE")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = LanguageModelConfig(
        vocab_size=args.vocab,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        n_kv_heads=args.kv_heads,
        max_len=args.context,
        shape="llama",
    )
    g = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, args.vocab, (args.steps + 3, args.batch_size, args.context + 1), generator=g)
    batches = [{"ids": b[:, :-1], "targets": b[:, 1:]} for b in blocks]
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = LanguageModel(cfg) if name == "attnkit" else peer_model(cfg)
        model.train()
        opt = make_optimizer(model, 1e-3, args.optimizer if name == "attnkit" else "default")
        own = name == "attnkit" and args.loss == "own"
        for b in batches[:3]:  # warm-up
            train_step(model, opt, b, own_loss=own)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            for b in batches[3:]:
                train_step(model, opt, b, own_loss=own)
            per_step = (time.perf_counter() - start) / args.steps
        print(f"\n### {name} ({'own loss' if own else 'plain loss'}): {per_step * 1000:.1f} ms a step (profiled)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
