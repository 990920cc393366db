"""attnkit's LanguageModel (llama shape) against ``transformers``' own ``LlamaForCausalLM`` of the same
configuration (issue 57): training throughput and validation loss at equal wall time, on CPU.

Both are trained by one plain PyTorch loop (AdamW, betas (0.9, 0.95), weight decay 0.1, linear warm-up
over the first ``--warmup`` steps then the constant peak ``--lr``, gradient clipping at 1.0) on the
same batches of the same tokens: the Bible's English train split (the shipped 8,000-piece tokenizer),
bos before each verse and eos after it, blocks of ``--context`` tokens in one seeded order
(:mod:`attnkit.tasks.language_model.data`). Each model trains for ``--seconds`` of wall time at each
thread count; then its mean next-token loss on the first ``--eval-blocks`` blocks of the valid split is
measured (not timed). Each model starts from its own initialisation under the same seed (the two
libraries initialise differently). Targets: attnkit ≥ 1.3× the peer's tokens/s, validation loss ≤ the
peer's at equal time.

    PYTHONPATH=src nice -n 10 .venv/bin/python benchmarks/lm_vs_transformers.py --seconds 60

Writes every number to ``benchmarks/results/lm_vs_transformers.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnkit.data.corpus import open_corpus
from attnkit.data.tokenizer import Tokenizer
from attnkit.models.language_model import LanguageModel, LanguageModelConfig
from attnkit.pretrained import resolve_model
from attnkit.tasks.language_model.data import lm_batches, side_texts, token_stream


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
    return model(ids).logits if isinstance(model, LanguageModel) else model(input_ids=ids).logits  # (B, T, V)


def train_for(model, batches, seconds: float, args) -> dict:
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    steps = tokens = 0
    start = time.perf_counter()
    epoch = 0
    while time.perf_counter() - start < seconds:
        batches.set_epoch(epoch)
        for batch in batches:
            for group in opt.param_groups:
                group["lr"] = args.lr * min(1.0, (steps + 1) / args.warmup)
            logits = logits_of(model, batch["ids"])
            loss = F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            steps += 1
            tokens += batch["ids"].numel()
            if time.perf_counter() - start >= seconds:
                break
        epoch += 1
    elapsed = time.perf_counter() - start
    return {"steps": steps, "tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed}


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
    p.add_argument("--seconds", type=float, default=60.0)
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
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "lm_vs_transformers.json"))
    args = p.parse_args(argv)

    tok = Tokenizer.load(resolve_model("transformer-es-en"))
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
        for name in ("attnkit", "transformers"):
            torch.manual_seed(args.seed)
            model = LanguageModel(cfg) if name == "attnkit" else peer_model(cfg)
            batches = lm_batches(train, context=args.context, batch_size=args.batch_size, seed=args.seed)
            row = {"model": name, "threads": threads, **train_for(model, batches, args.seconds, args)}
            row["valid_loss"] = valid_loss(
                model, lm_batches(valid, context=args.context, batch_size=args.batch_size, shuffle=False)
            )
            row["params"] = sum(q.numel() for q in model.parameters())
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1) + "\n")
    print("| threads | model | params | steps | tokens/s | valid loss |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['threads']} | {r['model']} | {r['params']:,} | {r['steps']} | {r['tokens_per_s']:.0f} "
            f"| {r['valid_loss']:.3f} |"
        )


if __name__ == "__main__":
    main()
