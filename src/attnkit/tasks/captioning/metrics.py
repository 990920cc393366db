"""Caption metrics: BLEU-1..4 and exact match, and attention correctness.

Attention correctness: for a generated word that names an item of the scene (a class word;
the item is found from the class and the place the caption gives it), the share of the word's
attention mass that falls inside the item's ground-truth box. The ``h×w`` map is spread over
the canvas with nearest-neighbour upsampling (each cell's weight spread evenly over its
``C/h × C/w`` pixels), so a uniform map puts exactly ``box area / canvas area`` inside a box:
the uniform-attention baseline.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ...data.datasets.scenes import scan_caption

# ---------------------------------------------------------------------------------------- metrics


def words_to_items(words: Sequence[str], classes: Sequence[int], places: Sequence[int]) -> list[int]:
    """For each caption word, the index of the scene item it names, or -1.

    A class word (found by :func:`attnkit.data.datasets.scenes.scan_caption`) names the item of that class
    at the place the caption gives next (``<class> at the <row> <col>``); failing that, the only
    item of that class. A class word that matches no item (a wrong word) names nothing.
    """
    classes, places = [int(c) for c in classes], [int(p) for p in places]
    out = [-1] * len(words)
    for i, c, place in scan_caption(words):
        match = [k for k, (ck, pk) in enumerate(zip(classes, places)) if ck == c and (place is None or pk == place)]
        if not match and place is not None:
            match = [k for k, ck in enumerate(classes) if ck == c]
        out[i] = match[0] if len(match) == 1 else -1
    return out


def attention_mass_in_box(alphas, grid_shape: tuple[int, int], canvas: int, boxes) -> np.ndarray:
    """Share of each map's mass inside its box: ``alphas (T, L)`` or ``(T, h, w)``, ``boxes (T, 4)``
    half-open ``(x0, y0, x1, y1)`` canvas pixels. Maps are spread over the canvas with
    nearest-neighbour upsampling and normalised to sum 1. Returns ``(T,)`` float."""
    from ...viz import upsample_attention

    a = torch.as_tensor(np.asarray(alphas, dtype=np.float64))
    if a.dim() == 3:
        a = a.flatten(1)
    if a.dim() != 2:
        raise ValueError(f"alphas must have shape (T, L) or (T, h, w), got {tuple(a.shape)}")
    boxes = np.asarray(boxes, dtype=np.int64).reshape(-1, 4)
    if len(boxes) != a.shape[0]:
        raise ValueError(f"boxes has {len(boxes)} rows for {a.shape[0]} maps; expected one box per map")
    if a.shape[0] == 0:
        return np.zeros(0)
    up = upsample_attention(a.numpy(), grid_shape, (canvas, canvas), mode="nearest").astype(np.float64)
    tot = up.sum(axis=(1, 2))
    out = np.zeros(len(boxes))
    for t, (x0, y0, x1, y1) in enumerate(boxes.tolist()):
        if tot[t] > 0:
            out[t] = up[t, max(y0, 0) : y1, max(x0, 0) : x1].sum() / tot[t]
    return out


def _distribution(values: Sequence[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    if not len(v):
        return {"n": 0, "mean": None}
    hist, edges = np.histogram(v, bins=10, range=(0.0, 1.0))
    return {
        "n": len(v),
        "mean": round(float(v.mean()), 4),
        "quantiles": {q: round(float(np.quantile(v, float(q))), 4) for q in ("0.1", "0.25", "0.5", "0.75", "0.9")},
        "histogram": {"edges": [round(float(e), 2) for e in edges], "counts": hist.tolist()},
    }


def attention_correctness(
    maps: Sequence, word_items: Sequence[Sequence[int]], scene_boxes: Sequence, grid_shape: tuple[int, int], canvas: int
) -> dict:
    """Attention correctness over a set of captions, against the uniform-attention baseline.

    ``maps[n]`` is caption n's ``(T_n, L)`` attention, ``word_items[n]`` its per-word item index
    (-1 for words naming nothing), ``scene_boxes[n]`` the ``(items, 4)`` boxes. Returns
    ``{"model": distribution, "uniform": distribution}`` (``n``, ``mean``, quantiles, histogram).
    """
    got, uniform = [], []
    L = grid_shape[0] * grid_shape[1]
    for att, items, boxes in zip(maps, word_items, scene_boxes):
        idx = [t for t, k in enumerate(items) if k >= 0]
        if not idx:
            continue
        boxes = np.asarray(boxes).reshape(-1, 4)
        b = boxes[[items[t] for t in idx]]
        a = np.asarray(att, dtype=np.float64).reshape(len(items), -1)[idx]
        got += attention_mass_in_box(a, grid_shape, canvas, b).tolist()
        uniform += attention_mass_in_box(np.full((len(idx), L), 1.0 / L), grid_shape, canvas, b).tolist()
    return {"model": _distribution(got), "uniform": _distribution(uniform)}


def caption_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """BLEU-1..4 (sacrebleu corpus BLEU with max n-gram order n) and the exact-match rate."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    out = {}
    for n in (1, 2, 3, 4):
        bleu = sacrebleu.BLEU(max_ngram_order=n, effective_order=True) if n < 4 else sacrebleu.BLEU()
        out[f"bleu{n}"] = round(bleu.corpus_score(list(hypotheses), [list(references)]).score, 2) if hypotheses else 0.0
    out["exact_match"] = (
        round(float(np.mean([h == r for h, r in zip(hypotheses, references)])), 4) if hypotheses else 0.0
    )
    return out
