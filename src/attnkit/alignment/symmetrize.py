"""Combining two directional word alignments into one (Och & Ney 2003; Koehn et al. 2003).

A directional aligner links each target word to (at most) one source word, so its links miss the
one-to-many links of the other direction. With ``forward`` and ``reverse`` links both written as
``(source word, target word)`` pairs (the reverse direction already inverted, as fast_align's
``-r`` and eflomal's reverse output are):

- **intersection** ``F ∩ R``: precise, sparse;
- **union** ``F ∪ R``: dense, less precise;
- **grow-diag** starts from the intersection and, pass after pass until nothing changes, adds every
  union link ``(i, j)`` that has an already-kept neighbour (the 8 cells around it, diagonals
  included) while ``i`` or ``j`` is still unaligned;
- **grow-diag-final** then adds each remaining ``F`` link, then each ``R`` link, whose ``i`` or
  ``j`` is unaligned;
- **grow-diag-final-and** (the usual choice) adds them only when **both** ``i`` and ``j`` are
  unaligned.

Candidates are visited in ``(i, j)`` order within a pass, as in fast_align's ``atools -c`` and
Moses' ``symal``; the order matters, because each added link changes which words are aligned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["SYMMETRIZATIONS", "grow_diag", "grow_diag_final", "grow_diag_final_and", "invert", "symmetrize"]

Link = tuple[int, int]

_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def invert(links: Iterable[Link]) -> set[Link]:
    """``(i, j)`` → ``(j, i)``: the links of the other direction's word order."""
    return {(j, i) for i, j in links}


class _Grower:
    """The kept links and which words they align, grown by the steps of the module docstring."""

    def __init__(self, forward: set[Link], reverse: set[Link]):
        self.links: set[Link] = set()
        self.src: set[int] = set()
        self.tgt: set[int] = set()
        for link in forward & reverse:
            self.add(link)

    def add(self, link: Link) -> None:
        self.links.add(link)
        self.src.add(link[0])
        self.tgt.add(link[1])

    def one_unaligned(self, i: int, j: int) -> bool:
        return i not in self.src or j not in self.tgt

    def both_unaligned(self, i: int, j: int) -> bool:
        return i not in self.src and j not in self.tgt

    def grow_diag(self, union: set[Link]) -> None:
        pending = sorted(union - self.links)
        while True:
            added = False
            for i, j in pending:  # a link added here counts for the later candidates of the same pass
                if self.one_unaligned(i, j) and any((i + di, j + dj) in self.links for di, dj in _NEIGHBOURS):
                    self.add((i, j))
                    added = True
            if not added:
                return
            pending = [link for link in pending if link not in self.links]

    def final(self, direction: set[Link], keep: Callable[[int, int], bool]) -> None:
        for link in sorted(direction - self.links):
            if keep(*link):
                self.add(link)


def _check(forward, reverse) -> tuple[set[Link], set[Link]]:
    out = []
    for name, links in (("forward", forward), ("reverse", reverse)):
        links = set(links)
        bad = [x for x in links if not (isinstance(x, tuple) and len(x) == 2)]
        if bad:
            raise TypeError(f"{name} links must be (source word, target word) pairs, got {bad[0]!r}")
        out.append({(int(i), int(j)) for i, j in links})
    return out[0], out[1]


def grow_diag(forward: Iterable[Link], reverse: Iterable[Link]) -> set[Link]:
    """The intersection grown with neighbouring union links (see the module docstring)."""
    f, r = _check(forward, reverse)
    g = _Grower(f, r)
    g.grow_diag(f | r)
    return g.links


def grow_diag_final(forward: Iterable[Link], reverse: Iterable[Link]) -> set[Link]:
    """grow-diag, then the directional links with one word still unaligned."""
    f, r = _check(forward, reverse)
    g = _Grower(f, r)
    g.grow_diag(f | r)
    g.final(f, g.one_unaligned)
    g.final(r, g.one_unaligned)
    return g.links


def grow_diag_final_and(forward: Iterable[Link], reverse: Iterable[Link]) -> set[Link]:
    """grow-diag, then the directional links whose two words are both still unaligned."""
    f, r = _check(forward, reverse)
    g = _Grower(f, r)
    g.grow_diag(f | r)
    g.final(f, g.both_unaligned)
    g.final(r, g.both_unaligned)
    return g.links


SYMMETRIZATIONS: dict[str, Callable[[Iterable[Link], Iterable[Link]], set[Link]]] = {
    "intersection": lambda f, r: set.__and__(*_check(f, r)),
    "union": lambda f, r: set.__or__(*_check(f, r)),
    "grow-diag": grow_diag,
    "grow-diag-final": grow_diag_final,
    "grow-diag-final-and": grow_diag_final_and,
}


def symmetrize(forward: Iterable[Link], reverse: Iterable[Link], method: str = "grow-diag-final-and") -> set[Link]:
    """One of :data:`SYMMETRIZATIONS` by name."""
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"method must be one of {', '.join(SYMMETRIZATIONS)}, got {method!r}")
    return SYMMETRIZATIONS[method](forward, reverse)
