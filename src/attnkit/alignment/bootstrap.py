"""How sure an AER is: bootstrap intervals over verses, and paired comparisons of two aligners.

AER is a corpus-level ratio of summed counts (:class:`attnkit.alignment.AERCounts`), so a verse is
the unit that is resampled (Koehn 2004's bootstrap for BLEU, applied to alignments): draw ``n``
verses with replacement from the ``n`` scored ones, sum their counts, recompute the AER; repeat
``samples`` times. The 95 % interval is the 2.5th and 97.5th percentiles of those AERs.

Two aligners scored on the same verses are compared **paired**: each resample draws the same verses
for both and takes the difference ``AER_a − AER_b``; when that difference's interval holds 0 the two
are a **tie** at that confidence (on 100 verses, differences of 0.01–0.02 usually are).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .aer import AERCounts

__all__ = ["DEFAULT_SAMPLES", "aer_interval", "paired_aer_difference"]

DEFAULT_SAMPLES = 1000


def _counts_array(counts: Sequence[AERCounts], name: str) -> np.ndarray:
    if not counts:
        raise ValueError(f"{name} must hold the counts of at least one verse, got none")
    if not all(isinstance(c, AERCounts) for c in counts):
        raise TypeError(f"{name} must be a sequence of AERCounts, one per verse")
    return np.array([[c.a_and_s, c.a_and_p, c.a, c.s] for c in counts], dtype=np.float64)  # (n, 4)


def _aer(summed: np.ndarray) -> np.ndarray:
    """``(..., 4)`` summed counts → AER, 0 where there is nothing to score (as AERCounts.aer)."""
    denom = summed[..., 2] + summed[..., 3]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, 1.0 - (summed[..., 0] + summed[..., 1]) / denom, 0.0)


def _resampled_aers(arrays: Sequence[np.ndarray], samples: int, seed: int) -> list[np.ndarray]:
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be a positive integer, got {samples!r}")
    n = arrays[0].shape[0]
    idx = np.random.default_rng(seed).integers(0, n, size=(samples, n))  # (samples, n) verse draws
    return [_aer(a[idx].sum(axis=1)) for a in arrays]  # each (samples,)


def _bounds(values: np.ndarray, confidence: float) -> tuple[float, float]:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def aer_interval(
    counts: Sequence[AERCounts], *, samples: int = DEFAULT_SAMPLES, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float]:
    """The bootstrap interval ``(low, high)`` of the corpus AER of per-verse ``counts``."""
    (aers,) = _resampled_aers([_counts_array(counts, "counts")], samples, seed)
    return _bounds(aers, confidence)


def paired_aer_difference(
    counts_a: Sequence[AERCounts],
    counts_b: Sequence[AERCounts],
    *,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict:
    """``AER_a − AER_b`` on the same verses with its paired bootstrap interval:
    ``{"difference", "low", "high", "tie"}`` (``tie`` when the interval holds 0)."""
    a, b = _counts_array(counts_a, "counts_a"), _counts_array(counts_b, "counts_b")
    if a.shape != b.shape:
        raise ValueError(f"counts_a and counts_b must score the same verses, got {a.shape[0]} and {b.shape[0]} verses")
    aer_a, aer_b = _resampled_aers([a, b], samples, seed)
    low, high = _bounds(aer_a - aer_b, confidence)
    difference = float(_aer(a.sum(axis=0)) - _aer(b.sum(axis=0)))
    return {"difference": difference, "low": low, "high": high, "tie": bool(low <= 0.0 <= high)}
