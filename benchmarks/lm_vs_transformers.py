"""attnkit's LanguageModel (llama shape) against ``transformers``' own ``LlamaForCausalLM`` of the same
configuration (issue 57): training throughput and validation loss at equal wall time, on CPU.

Both are trained by one plain PyTorch loop (AdamW, betas (0.9, 0.95), weight decay 0.1, linear warm-up
over the first ``--warmup`` steps then the constant peak ``--lr``, gradient clipping at 1.0) on the
same batches of the same tokens: the Bible's English train split (the shipped 8,000-piece tokenizer),
bos before each verse and eos after it, blocks of ``--context`` tokens in one seeded order
(:mod:`attnkit.tasks.language_model.data`). What differs, by default, is what attnkit's own trainer
does: attnkit's loss is :func:`~attnkit.tasks.language_model.loss.next_token_loss` (the chunked output
layer, ``--attnkit-loss own``; ``plain`` gives it the peer's ``F.cross_entropy`` over the logits) and its
AdamW is PyTorch's fused one (``--attnkit-optimizer fused``, as ``attnkit train language-model`` builds
it); the peer gets ``F.cross_entropy`` and ``AdamW(...)`` as a plain loop writes them
(``--peer-optimizer``). Same math, same numbers to float rounding.

The two models train in alternating rounds of ``--round-s`` seconds (the one that goes first changes
every round), so that other jobs on the machine slow both alike, until each has trained ``--seconds``
at each thread count; the ratio reported is the median over rounds of attnkit's tokens/s over the
peer's in the same round pair. The 1-minute load average is recorded before and after every round
pair. Then each model's mean next-token loss on the first ``--eval-blocks`` blocks of the valid split
is measured (not timed). Each model starts from its own initialisation under the same seed (the two
libraries initialise differently). Targets: attnkit ≥ 1.3× the peer's tokens/s, validation loss ≤ the
peer's at equal time.

    PYTHONPATH=src nice -n 10 .venv/bin/python benchmarks/lm_vs_transformers.py --seconds 60

``--attnkit-compile``: attnkit's model is run through ``torch.compile(model, dynamic=False)`` (inductor's
C++ backend on the CPU; every block has one shape ``(B, T)``, so one graph, no recompiles; the chunked output
layer's loss stays eager). The compile happens inside attnkit's first timed step, so it is counted in
attnkit's wall clock: the report gives the steady-state ratio (median over the rounds after the first) and
the tokens each model trained in the same wall time, compile included (``tokens_in_equal_wall_time``: each
model's tokens up to the shorter of the two totals, read off its per-step clock), and the compile's
seconds (attnkit's first step minus its median step). The peer stays the plain loop the issue defines.
The rotary table is made by one untimed, no-grad forward of one block before compiling (else the first
compiled call grows it and the second recompiles). Inductor's cache (``TORCHINDUCTOR_CACHE_DIR``) makes a
second run's compile much shorter; point it at an empty folder to measure a first run's.

Writes every number to ``benchmarks/results/lm_vs_transformers.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnkit.data.corpus import open_corpus
from attnkit.data.tokenizer import Tokenizer
from attnkit.models.language_model import LanguageModel, LanguageModelConfig
from attnkit.pretrained import resolve_model
from attnkit.tasks.language_model.data import lm_batches, side_texts, token_stream
from attnkit.tasks.language_model.loss import next_token_loss


def peer_model(cfg: LanguageModelConfig):
    """``transformers``' Llama with ``cfg``'s sizes (sdpa attention, its default)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.d_model,
            intermediate_size=cfg.ff_width,
            num_hidden_layers=cfg.n_layers,
            num_attention_heads=cfg.n_heads,
            num_key_value_heads=cfg.kv_heads,
            max_position_embeddings=cfg.max_len,
            rms_norm_eps=cfg.norm_eps,
            rope_theta=cfg.rope_theta,
            tie_word_embeddings=cfg.tie_embeddings,
            attention_bias=False,
            mlp_bias=False,
        )
    )


def logits_of(model, ids: torch.Tensor) -> torch.Tensor:
    ours = isinstance(getattr(model, "_orig_mod", model), LanguageModel)  # _orig_mod: under torch.compile
    return model(ids).logits if ours else model(input_ids=ids).logits  # (B, T, V)


def make_optimizer(model, lr: float, kind: str) -> torch.optim.AdamW:
    """AdamW (betas (0.9, 0.95), weight decay 0.1) in PyTorch's ``kind`` of implementation: ``default``
    (what ``AdamW(...)`` picks on this device: the per-parameter loop on the CPU), ``foreach`` or ``fused``."""
    extra = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[kind]
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1, **extra)


def train_step(model, opt, batch: dict, *, own_loss: bool = False) -> float:
    """One step: forward, mean next-token cross-entropy, backward, clipping at 1.0, AdamW. ``own_loss``
    (attnkit only): the loss attnkit's trainer uses (:func:`next_token_loss`), else the plain
    ``F.cross_entropy`` over the ``(B·T, V)`` logits, as for the peer."""
    if own_loss:
        loss = next_token_loss(model, batch)
    else:
        logits = logits_of(model, batch["ids"])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


class Runner:
    """One model's training state across the alternating rounds: optimizer, batch order, counts."""

    def __init__(self, name: str, model, train, args):
        self.name, self.model, self.args = name, model, args
        self.own_loss = name == "attnkit" and args.attnkit_loss == "own"
        self.compiled = name == "attnkit" and args.attnkit_compile
        self.step_model = model
        if self.compiled:
            model.eval()
            with torch.no_grad():  # makes the rotary table before tracing (not timed; one block, no compile)
                model(torch.zeros(1, args.context, dtype=torch.long))
            self.step_model = torch.compile(model, dynamic=False)
        kind = args.attnkit_optimizer if name == "attnkit" else args.peer_optimizer
        self.kind = kind
        self.opt = make_optimizer(model, args.lr, kind)
        self.batches = lm_batches(train, context=args.context, batch_size=args.batch_size, seed=args.seed)
        self.epoch, self.it = 0, None
        self.steps = self.tokens = 0
        self.seconds = 0.0
        self.rates: list[float] = []  # tokens/s of each round
        self.step_ends: list[tuple[float, int]] = []  # (seconds trained, tokens trained) after each step

    def _next_batch(self) -> dict:
        while True:
            if self.it is None:
                self.batches.set_epoch(self.epoch)
                self.it = iter(self.batches)
            batch = next(self.it, None)
            if batch is not None:
                return batch
            self.it, self.epoch = None, self.epoch + 1

    def run_round(self, seconds: float) -> None:
        """Train for ``seconds`` of wall time (whole steps; the last one may overrun)."""
        self.model.train()
        start = time.perf_counter()
        steps = tokens = 0
        while time.perf_counter() - start < seconds:
            batch = self._next_batch()
            for group in self.opt.param_groups:
                group["lr"] = self.args.lr * min(1.0, (self.steps + 1) / self.args.warmup)
            train_step(self.step_model, self.opt, batch, own_loss=self.own_loss)
            self.steps += 1
            steps += 1
            tokens += batch["ids"].numel()
            self.step_ends.append((self.seconds + time.perf_counter() - start, self.tokens + tokens))
        elapsed = time.perf_counter() - start
        self.seconds += elapsed
        self.tokens += tokens
        self.rates.append(tokens / elapsed)


@torch.no_grad()
def valid_loss(model, batches) -> float:
    model.eval()
    total = n = 0
    for batch in batches:
        logits = logits_of(model, batch["ids"])
        total += F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), reduction="sum").item()
        n += batch["targets"].numel()
    return total / n


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="training wall time of each model at each thread count")
    p.add_argument("--round-s", type=float, default=5.0, help="length of one round; the models alternate rounds")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--eval-blocks", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--attnkit-loss",
        choices=("own", "plain"),
        default="own",
        help="own: the loss attnkit's trainer uses (next_token_loss); plain: F.cross_entropy over the logits",
    )
    p.add_argument("--attnkit-optimizer", choices=("default", "foreach", "fused"), default="fused")
    p.add_argument("--peer-optimizer", choices=("default", "foreach", "fused"), default="default")
    p.add_argument(
        "--attnkit-compile",
        action="store_true",
        help="run attnkit's model through torch.compile(dynamic=False); the compile counts in its wall clock",
    )
    p.add_argument(
        "--tokenizer",
        default="transformer-es-en",
        help="the model (shipped name or folder) whose tokenizer cuts the text: transformer-es-en's 8,000 pieces, "
        "or lm-4l-en's 2,048 (the shipped language model's own)",
    )
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "lm_vs_transformers.json"))
    args = p.parse_args(argv)

    tok = Tokenizer.load(resolve_model(args.tokenizer))
    corpus = open_corpus("bible")
    train = token_stream(side_texts(corpus, "train", "en"), tok)
    valid = token_stream(side_texts(corpus, "valid", "en"), tok)[: args.eval_blocks * args.context + 1]
    cfg = LanguageModelConfig(
        vocab_size=len(tok),
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        n_kv_heads=args.kv_heads,
        max_len=args.context,
        shape="llama",
    )
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        runners = []
        for name in ("attnkit", "transformers"):
            torch.manual_seed(args.seed)
            model = LanguageModel(cfg) if name == "attnkit" else peer_model(cfg)
            runners.append(Runner(name, model, train, args))
        load = [os.getloadavg()[0]]
        rounds = max(1, round(args.seconds / args.round_s))
        for r in range(rounds):  # alternate, each model first in every other round
            for runner in runners if r % 2 == 0 else runners[::-1]:
                runner.run_round(args.round_s)
            load.append(os.getloadavg()[0])
        for runner in runners:
            row = {
                "model": runner.name,
                "threads": threads,
                "loss_path": "own" if runner.own_loss else "plain",
                "optimizer": runner.kind,
                "steps": runner.steps,
                "tokens": runner.tokens,
                "seconds": runner.seconds,
                "tokens_per_s": runner.tokens / runner.seconds,
                "median_round_tokens_per_s": statistics.median(runner.rates),
                "round_tokens_per_s": runner.rates,
                "load_1min": load,
                "compiled": runner.compiled,
                "step_ends": runner.step_ends,
            }
            if runner.compiled:
                steps_s = [b[0] - a[0] for a, b in zip(runner.step_ends, runner.step_ends[1:])]
                row["first_step_s"] = runner.step_ends[0][0]
                row["compile_s"] = runner.step_ends[0][0] - statistics.median(steps_s) if steps_s else None
            row["valid_loss"] = valid_loss(
                runner.model, lm_batches(valid, context=args.context, batch_size=args.batch_size, shuffle=False)
            )
            row["params"] = sum(q.numel() for q in runner.model.parameters())
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1) + "\n")
    print("| threads | model | params | steps | tokens/s (median round) | tokens/s (all) | valid loss | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['threads']} | {r['model']} | {r['params']:,} | {r['steps']} | {r['median_round_tokens_per_s']:,.0f} "
            f"| {r['tokens_per_s']:,.0f} | {r['valid_loss']:.3f} | {min(r['load_1min']):.1f}–{max(r['load_1min']):.1f} |"
        )
    for threads in sorted({r["threads"] for r in rows}):
        a, t = (
            next(r for r in rows if r["threads"] == threads and r["model"] == m) for m in ("attnkit", "transformers")
        )
        pairs = list(zip(a["round_tokens_per_s"], t["round_tokens_per_s"]))
        skip = 1 if a["compiled"] and len(pairs) > 1 else 0  # the round that holds the compile
        ratio = statistics.median(x / y for x, y in pairs[skip:])
        print(f"{threads} thread(s): attnkit / transformers = {ratio:.2f}x (median of the rounds' ratios)")
        if a["compiled"]:
            wall = min(a["seconds"], t["seconds"])
            ta, tt = (max((k for s_, k in r["step_ends"] if s_ <= wall), default=0) for r in (a, t))
            print(
                f"  compiled: compile ~{a['compile_s']:.0f} s (first step {a['first_step_s']:.0f} s); steady-state "
                f"ratio over rounds 2..; tokens in equal wall time ({wall:.0f} s, compile included): attnkit "
                f"{ta:,} vs transformers {tt:,} = {ta / max(tt, 1):.2f}x"
            )


if __name__ == "__main__":
    main()
