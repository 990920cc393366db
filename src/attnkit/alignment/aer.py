"""Links from attention, the reference aligners' links, and the alignment error rate.

With predicted links ``A``, sure gold links ``S`` and possible ones ``P`` (``S ⊆ P``), summed over
all verses (Och & Ney 2003)::

    precision = |A ∩ P| / |A|        recall = |A ∩ S| / |S|
    AER = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

Links are ``(source word, target word)`` pairs, as in the Pharaoh files (``i-j``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from torch import Tensor

__all__ = ["AERCounts", "aer_counts", "argmax_links", "diagonal_links", "threshold_links"]

Link = tuple[int, int]


@dataclass
class AERCounts:
    """The four counts AER is made of, summed over verses; add them up with ``+``."""

    a_and_s: int = 0
    a_and_p: int = 0
    a: int = 0
    s: int = 0

    def __add__(self, other: AERCounts) -> AERCounts:
        return AERCounts(self.a_and_s + other.a_and_s, self.a_and_p + other.a_and_p, self.a + other.a, self.s + other.s)

    @property
    def precision(self) -> float:
        return self.a_and_p / self.a if self.a else 0.0

    @property
    def recall(self) -> float:
        return self.a_and_s / self.s if self.s else 0.0

    @property
    def aer(self) -> float:
        return 1.0 - (self.a_and_s + self.a_and_p) / (self.a + self.s) if (self.a + self.s) else 0.0

    def to_dict(self) -> dict:
        return {
            "aer": round(self.aer, 4),
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "links": self.a,
            "sure": self.s,
        }


def aer_counts(predicted: Iterable[Link], sure: set[Link], possible: set[Link]) -> AERCounts:
    """The counts of one verse (``possible`` should contain ``sure``; it is united with it here)."""
    a = set(predicted)
    p = possible | sure
    return AERCounts(len(a & sure), len(a & p), len(a), len(sure))


def argmax_links(word_attention: Tensor) -> set[Link]:
    """Each target word linked to the source word it attends to most: ``(argmax_i A[j, i], j)``."""
    if word_attention.dim() != 2:
        raise ValueError(f"word_attention must be (target words, source words), got {tuple(word_attention.shape)}")
    if word_attention.shape[1] == 0:
        return set()
    return {(int(i), j) for j, i in enumerate(word_attention.argmax(dim=1).tolist())}


def threshold_links(word_attention: Tensor, threshold: float) -> set[Link]:
    """Every ``(source, target)`` pair whose word attention is at least ``threshold``."""
    return {(int(i), int(j)) for j, i in (word_attention >= threshold).nonzero().tolist()}


def diagonal_links(n_source: int, n_target: int) -> set[Link]:
    """The baseline: target word ``j`` linked to the source word at the same relative position,
    ``i = ⌊(j + ½) · n_source / n_target⌋``."""
    if n_source < 1 or n_target < 1:
        return set()
    return {(min(n_source - 1, int((j + 0.5) * n_source / n_target)), j) for j in range(n_target)}
