"""``attnkit evaluate captioning``: BLEU, exact match and attention correctness on the test scenes."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ...data.datasets.scenes import collate_captions, load_scenes
from .inference import Captioner
from .metrics import attention_correctness, caption_scores, words_to_items

# ---------------------------------------------------------------------------------------- evaluation


def _teacher_forced_alphas(model, batch) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        p = next(model.parameters())
        images, captions = batch["images"].to(p.device, p.dtype), batch["captions"].to(p.device)
        return model(images, captions[:, :-1]).alphas.float().cpu()  # (B, T, L), row t predicts token t+1


def evaluate_captioning(
    model_dir: str | Path,
    *,
    split: str = "test",
    limit: int | None = None,
    beam_size: int = 1,
    home: str | Path | None = None,
    device: str | None = "cpu",
    dtype: str | torch.dtype | None = None,
) -> dict:
    """BLEU-1..4, exact match and attention correctness (vs uniform) of a captioner on the scenes."""
    cm = Captioner.load(model_dir, device=device, dtype=dtype)
    data = load_scenes(split, home, canvas=cm.canvas)
    if data.vocab != cm.vocab:
        raise ValueError(f"{model_dir}: the model's vocabulary differs from the scenes' vocabulary")
    n = len(data) if limit is None else min(int(limit), len(data))
    items = [data[i] for i in range(n)]
    t0 = time.perf_counter()
    results, tf_maps = [], []
    for s in range(0, n, 200):
        batch = collate_captions(items[s : s + 200])
        results += cm.caption(batch["images"], beam_size=beam_size)
        tf = _teacher_forced_alphas(cm.model, batch)
        for b, it in enumerate(items[s : s + 200]):
            tf_maps.append(tf[b, : len(it["word_item"])].numpy())
    elapsed = time.perf_counter() - t0
    hyps = [r.caption for r in results]
    refs = [it["caption"] for it in items]
    scores = caption_scores(hyps, refs)
    grid = cm.model.grid_shape
    gen_items = [
        words_to_items(r.words, it["classes"].tolist(), it["places"].tolist()) for r, it in zip(results, items)
    ]
    gen = attention_correctness(
        [r.attention.numpy() for r in results], gen_items, [it["boxes"].numpy() for it in items], grid, cm.canvas
    )
    tf = attention_correctness(
        tf_maps, [it["word_item"].tolist() for it in items], [it["boxes"].numpy() for it in items], grid, cm.canvas
    )
    # diagnostic: the map one word *before* each item word (the article "a"), teacher-forced. A decoder
    # that feeds the context into its LSTM can look at the item there and name it from memory.
    prev = attention_correctness(
        tf_maps,
        [[*it["word_item"].tolist()[1:], -1] for it in items],
        [it["boxes"].numpy() for it in items],
        grid,
        cm.canvas,
    )
    return {
        "model": str(model_dir),
        "attention": cm.config.attention,
        "score": cm.config.score,
        "split": split,
        "n_scenes": n,
        "beam_size": beam_size,
        **scores,
        "attention_correctness": gen["model"]["mean"],
        "uniform_attention_correctness": gen["uniform"]["mean"],
        "teacher_forced_attention_correctness": tf["model"]["mean"],
        "previous_word_attention_correctness": prev["model"]["mean"],
        "attention_correctness_detail": {"generated": gen, "teacher_forced": tf, "previous_word": prev},
        "scenes_per_s": round(n / max(elapsed, 1e-9), 1),
        "examples": [{"reference": r, "output": h} for r, h in list(zip(refs, hyps))[:5]],
    }
