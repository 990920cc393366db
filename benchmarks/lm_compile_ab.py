"""``torch.compile`` of attnkit's language model against the same model eager (issue 57, "Quality"): one
training step each (the model's forward up to the output layer's inputs through
``torch.compile(dynamic=False)`` or eager, then the
chunked output layer's loss, eager in both, backward, clipping at 1.0, fused AdamW), the two models
from one initialisation on the same random batches, alternating steps (the one that goes first changes
every step) so that other jobs on the machine slow both alike.

Prints the compiled model's first step (the compile, counted) and second step, the median step time of
each after the first three steps, the median of the per-step ratios, and the largest difference between
the two models' losses (equal numbers: within float rounding).

    PYTHONPATH=src OMP_NUM_THREADS=1 flock /tmp/attnkit-heavy.lock nice -n 10 \\
        .venv/bin/python benchmarks/lm_compile_ab.py --size default --steps 16
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnkit.models.language_model import LanguageModel, LanguageModelConfig
from attnkit.training.linear_cross_entropy import linear_cross_entropy

SIZES = {"small": (128, 2, 8), "default": (256, 4, 16), "shipped": (128, 4, 32)}
# d_model, layers, batch: lm_vs_transformers.py's sizes, and lm-4l-en's (with --vocab 2048)


def _features(model: LanguageModel):
    """The model's forward up to the output layer's inputs, without its argument checks (the batches here
    are made right): ``ids (B, T) -> features (B, T, D)``."""
    return lambda ids: model._run(ids, None, False, features_only=True).features


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=SIZES, default="small")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--vocab", type=int, default=8000)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    d, layers, batch = SIZES[args.size]
    cfg = LanguageModelConfig(
        vocab_size=args.vocab, d_model=d, n_layers=layers, n_heads=4, n_kv_heads=2, max_len=args.context
    )
    g = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, args.vocab, (args.steps, batch, args.context + 1), generator=g)
    runs = {}
    for name in ("eager", "compiled"):
        torch.manual_seed(0)
        model = LanguageModel(cfg)
        model.eval()
        with torch.no_grad():  # the rotary table, made before tracing (else the second call recompiles)
            model(blocks[0, :1, :-1])
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        runs[name] = {
            "model": model,
            "features": torch.compile(_features(model), dynamic=False) if name == "compiled" else _features(model),
            "opt": opt,
            "times": [],
            "losses": [],
        }

    def step(run: dict, i: int) -> None:
        ids, targets = blocks[i, :, :-1], blocks[i, :, 1:]  # (B, T), (B, T)
        start = time.perf_counter()
        h = run["features"](ids)  # (B, T, D)
        weight, bias = run["model"].output_layer()
        loss = linear_cross_entropy(h.flatten(0, 1), weight, bias, targets.flatten()) / targets.numel()
        run["opt"].zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(run["model"].parameters(), 1.0)
        run["opt"].step()
        run["times"].append(time.perf_counter() - start)
        run["losses"].append(float(loss.detach()))

    for i in range(args.steps):
        for name in ("eager", "compiled") if i % 2 else ("compiled", "eager"):
            step(runs[name], i)
    e, c = runs["eager"], runs["compiled"]
    print(
        f"{args.size}, {args.threads} thread(s): compiled first step {c['times'][0]:.1f} s, second {c['times'][1]:.2f} s"
    )
    print(
        f"median step: eager {1000 * statistics.median(e['times'][3:]):.0f} ms, compiled "
        f"{1000 * statistics.median(c['times'][3:]):.0f} ms; median of per-step ratios eager/compiled "
        f"{statistics.median(a / b for a, b in zip(e['times'][3:], c['times'][3:])):.3f}"
    )
    print(
        f"largest |loss difference| over {args.steps} steps: {max(abs(a - b) for a, b in zip(e['losses'], c['losses'])):.2e}"
    )


if __name__ == "__main__":
    main()
