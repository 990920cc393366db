"""A language model's held-out scores, as `index.json` records them for a shipped one.

Perplexity on the test split of the side of the corpus it was trained on (the Bible's English by
default: bos/eos-wrapped verses packed into blocks of the model's context, every whole block), and the
induction measurements of :func:`attnkit.models.induction.induction_scores` (repeated random tokens,
``length`` each half): the best head above the first layer by prefix matching, its copying score, and the
best previous-token score of the first layer. Layers and heads are numbered from 1.

    PYTHONPATH=src .venv/bin/python benchmarks/lm_scores.py src/attnkit/pretrained/attention-only-2l-en
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch


def main(argv=None) -> int:
    from attnkit.data.corpus import open_corpus
    from attnkit.data.tokenizer import MODEL_FILENAME, Tokenizer
    from attnkit.models.induction import induction_scores
    from attnkit.tasks.language_model.data import side_texts, token_stream
    from attnkit.tasks.language_model.train import mean_block_loss, valid_blocks
    from attnkit.training.checkpoint import load_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an attnkit language-model folder (a checkpoint or an exported model)")
    ap.add_argument("--data", default="bible")
    ap.add_argument("--side", default="en")
    ap.add_argument("--split", default="test")
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model, _, _ = load_model(args.model)
    model.eval()
    tokenizer = Tokenizer.from_bytes((Path(args.model) / MODEL_FILENAME).read_bytes())
    corpus = open_corpus(args.data, None)
    stream = token_stream(side_texts(corpus, args.split, args.side), tokenizer)
    blocks = valid_blocks(stream, model.config.max_len, 10**9)  # (N, T + 1)
    with torch.no_grad():
        loss = mean_block_loss(model, blocks, args.batch)
    scores = induction_scores(model, length=min(args.length, model.config.max_len // 2), batch=args.batch)
    # an induction head reads a previous-token head's output, so it sits above the first layer
    later = [
        (layer, head)
        for layer in range(1, len(scores.prefix_matching))
        for head in range(len(scores.prefix_matching[layer]))
    ]
    later = later or [(0, head) for head in range(len(scores.prefix_matching[0]))]  # a one-layer model
    layer, best = max(later, key=lambda lh: scores.prefix_matching[lh[0]][lh[1]])
    out = {
        f"{args.split}_ppl": round(math.exp(loss), 2),
        f"{args.split}_tokens": int(blocks[:, 1:].numel()),
        "induction_head": f"L{layer + 1}.H{best + 1}",
        "induction_prefix_matching": round(scores.prefix_matching[layer][best], 4),
        "induction_copying": round(scores.copying[layer][best], 4),
        "previous_token_layer1": round(max(scores.previous_token[0]), 4),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
