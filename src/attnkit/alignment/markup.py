"""Markup tag projection: source word spans and word links -> target word spans.

A sentence's inline tags (``<b>``, a link, an XLIFF placeholder) are spans of its source words; the
translation's word links say where those words went. Following Hanneman & Dinu (2020, "How Should
Markup Tags Be Translated?") and Zenkel, Xu & DeNero (2021, "Automatic Bilingual Markup Transfer"), a
tag's target span runs from the first to the last target word linked to any source word inside it.
Then the spans are made a valid tree again, top down: a child is clipped into its parent, and siblings,
taken in target order, are cut so that none overlaps the one before it. No tag is ever dropped: a tag
whose words link to nothing is placed where its position in the source puts it in the target
(proportionally, the same rule :func:`proportional_spans` uses as a baseline), and an empty element
(``<br/>``, ``<x/>``, zero source words) goes after the target word linked to the source word before it,
else before the one linked to the word after it, else proportionally.

Spans are half-open ``(start, end)`` word indices; a tag's ``parent`` is the index of the innermost tag
enclosing it (``None`` at the top). The functions take plain lists, so that the document layer, the
benchmark and the tests share one rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["TagSpan", "check_spans", "project_spans", "proportional_spans"]


@dataclass(frozen=True)
class TagSpan:
    """One tag over source words ``[start, end)``, inside tag number ``parent`` (``None``: at the top)."""

    start: int
    end: int
    parent: int | None = None


def check_spans(spans: Sequence[TagSpan], n_words: int, name: str = "spans") -> None:
    """ValueError naming ``name`` unless every span lies in ``[0, n_words]``, every parent comes before its
    child and encloses it (the tags form a tree, as the document's nesting does)."""
    for k, s in enumerate(spans):
        if not 0 <= s.start <= s.end <= n_words:
            raise ValueError(f"{name}[{k}] = ({s.start}, {s.end}) is not a span of {n_words} words")
        if s.parent is not None:
            if not 0 <= s.parent < k:
                raise ValueError(f"{name}[{k}].parent must name an earlier tag, got {s.parent}")
            p = spans[s.parent]
            if not p.start <= s.start <= s.end <= p.end:
                raise ValueError(f"{name}[{k}] = ({s.start}, {s.end}) is not inside its parent ({p.start}, {p.end})")


def _scaled(i: int, n_source: int, n_target: int) -> int:
    """Source word boundary ``i`` at the same relative place among ``n_target`` words."""
    return round(i * n_target / n_source) if n_source else 0


def _raw_span(s: TagSpan, by_source: dict[int, list[int]], n_source: int, n_target: int) -> tuple[int, int]:
    """The span before the tree is repaired (see the module docstring)."""
    if s.end > s.start:
        targets = [j for i in range(s.start, s.end) for j in by_source.get(i, ())]
        if targets:
            return min(targets), max(targets) + 1
        lo = _scaled(s.start, n_source, n_target)
        hi = max(_scaled(s.end, n_source, n_target), min(lo + 1, n_target))
        return lo, hi
    before = by_source.get(s.start - 1)
    if before:
        p = max(before) + 1
        return p, p
    after = by_source.get(s.start)
    if after:
        p = min(after)
        return p, p
    p = _scaled(s.start, n_source, n_target)
    return p, p


def project_spans(
    spans: Sequence[TagSpan], links: Iterable[tuple[int, int]], n_source: int, n_target: int
) -> list[tuple[int, int]]:
    """The target span ``(start, end)`` of each tag in ``spans`` (source word spans over ``n_source``
    words) from Pharaoh ``(source word, target word)`` ``links`` into ``n_target`` target words: a valid
    tree (each inside its parent, siblings disjoint), one span per tag, in the order given."""
    check_spans(spans, n_source)
    by_source: dict[int, list[int]] = {}
    for i, j in links:
        if not (0 <= i < n_source and 0 <= j < n_target):
            raise ValueError(f"links: ({i}, {j}) is outside {n_source} source and {n_target} target words")
        by_source.setdefault(i, []).append(j)
    raw = [_raw_span(s, by_source, n_source, n_target) for s in spans]
    children: dict[int | None, list[int]] = {}
    for k, s in enumerate(spans):
        children.setdefault(s.parent, []).append(k)
    out: list[tuple[int, int]] = list(raw)

    def place(parent: int | None, lo: int, hi: int) -> None:
        kids = children.get(parent, [])
        for k in kids:
            s, e = raw[k]
            out[k] = (min(max(s, lo), hi), min(max(e, lo), hi))  # clipped into the parent
        prev = lo
        for k in sorted(kids, key=lambda k: (out[k][0], out[k][1], k)):  # siblings in target order
            s = max(out[k][0], prev)
            e = max(out[k][1], s)
            out[k] = (s, e)
            prev = e
        for k in kids:
            place(k, *out[k])

    place(None, 0, n_target)
    return out


def proportional_spans(spans: Sequence[TagSpan], n_source: int, n_target: int) -> list[tuple[int, int]]:
    """The position-proportional baseline: each tag at the same relative place in the target as in the
    source, with no alignment (:func:`project_spans` with no links)."""
    return project_spans(spans, (), n_source, n_target)
