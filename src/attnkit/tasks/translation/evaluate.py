"""``attnkit evaluate translation``: BLEU/chrF of a model on a split, and BLEU by length."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ...data.bible import load_pairs
from .inference import Translator
from .lexical_shortlist import LexicalShortlist
from .metrics import bleu_by_length, corpus_scores


def evaluate_translation(
    model_dir: str | Path,
    *,
    split: str = "test",
    limit: int | None = None,
    beam_size: int = 1,
    home: str | Path | None = None,
    device: str | None = "cpu",
    dtype: str | torch.dtype | None = None,
    shortlist: LexicalShortlist | None = None,
) -> dict:
    """BLEU/chrF of a model on a split (optionally its first ``limit`` verses), and BLEU by length;
    with ``shortlist``, searching each batch's lexical shortlist instead of the whole vocabulary."""
    tr = Translator.load(model_dir, device=device, dtype=dtype)
    report = evaluate_translator(
        tr,
        split=split,
        limit=limit,
        beam_size=beam_size,
        home=home,
        shortlist=shortlist is not None,
        options={"shortlist": shortlist},
    )
    return {"model": str(model_dir), "model_type": getattr(tr.model, "model_type", "?"), **report}


def evaluate_translator(
    tr,
    *,
    split: str = "test",
    limit: int | None = None,
    beam_size: int = 1,
    home: str | Path | None = None,
    shortlist: bool = False,
    options: dict | None = None,
) -> dict:
    """The report of :func:`evaluate_translation` (less ``model``/``model_type``) for a loaded
    translator of either engine: anything with ``translate(sources, beam_size=, truncate=, **options)``
    returning dicts with ``translation``. ``shortlist`` says whether ``options`` restrict the vocabulary."""
    pairs = load_pairs(split, home=home, limit=limit)
    t0 = time.perf_counter()
    hyps = tr.translate([p.src for p in pairs], beam_size=beam_size, truncate=True, **(options or {}))
    elapsed = time.perf_counter() - t0
    out_text = [h.translation for h in hyps]
    scores = corpus_scores(out_text, [p.tgt for p in pairs])
    return {
        "split": split,
        "beam_size": beam_size,
        "shortlist": shortlist,
        **scores,
        "sentences_per_s": round(len(pairs) / max(elapsed, 1e-9), 2),
        "by_length": bleu_by_length([p.src for p in pairs], out_text, [p.tgt for p in pairs]),
        "examples": [
            {"ref": p.ref, "source": p.src, "reference": p.tgt, "output": o} for p, o in list(zip(pairs, out_text))[:5]
        ],
    }
