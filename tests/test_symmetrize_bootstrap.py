"""Symmetrisation of two directional alignments and bootstrap intervals of AER, each against a plain reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.alignment import AERCounts, aer_counts, invert, symmetrize
from attnkit.alignment.bootstrap import aer_interval, paired_aer_difference
from attnkit.alignment.gold import parse_gold_links

# ------------------------------------------------------------------ symmetrisation


def atools_reference(a: set, b: set, method: str) -> set:
    """fast_align's ``atools -c`` written out on a boolean grid, loop by loop (Koehn et al. 2003)."""
    width = 1 + max([i for i, _ in a | b], default=-1)
    height = 1 + max([j for _, j in a | b], default=-1)
    res = [[False] * height for _ in range(width)]
    src_aligned, tgt_aligned = [False] * width, [False] * height

    def align(i, j):
        res[i][j] = src_aligned[i] = tgt_aligned[j] = True

    def safe(i, j):
        return 0 <= i < width and 0 <= j < height and res[i][j]

    for i in range(width):
        for j in range(height):
            if (i, j) in a and (i, j) in b:
                align(i, j)
    if method == "intersection":
        return {(i, j) for i in range(width) for j in range(height) if res[i][j]}
    if method == "union":
        return a | b
    neighbours = [(1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1)]
    pending = [(i, j) for i in range(width) for j in range(height) if ((i, j) in a or (i, j) in b) and not res[i][j]]
    keep_going = bool(pending)
    while keep_going:
        keep_going = False
        added = []
        for i, j in pending:
            one_unaligned = not (src_aligned[i] and tgt_aligned[j])
            if one_unaligned and any(safe(i + di, j + dj) for di, dj in neighbours):
                align(i, j)
                added.append((i, j))
                keep_going = True
        pending = [p for p in pending if p not in added]
    if method != "grow-diag":
        for direction in (a, b):
            for i in range(width):
                for j in range(height):
                    if (i, j) in direction and not res[i][j]:
                        if method == "grow-diag-final-and":
                            ok = not src_aligned[i] and not tgt_aligned[j]
                        else:
                            ok = not (src_aligned[i] and tgt_aligned[j])
                        if ok:
                            align(i, j)
    return {(i, j) for i in range(width) for j in range(height) if res[i][j]}


METHODS = ["intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and"]


def test_symmetrisation_hand_made_cases():
    #   forward: 0-0 1-1 2-2 3-2     reverse: 0-0 1-1 2-2 2-3
    fwd = {(0, 0), (1, 1), (2, 2), (3, 2)}
    rev = {(0, 0), (1, 1), (2, 2), (2, 3)}
    assert symmetrize(fwd, rev, "intersection") == {(0, 0), (1, 1), (2, 2)}
    assert symmetrize(fwd, rev, "union") == fwd | rev
    # (3, 2): source 3 unaligned and below (2, 2); (2, 3): target 3 unaligned, right of (2, 2)
    assert symmetrize(fwd, rev, "grow-diag") == fwd | rev
    # a far link of one direction: grow-diag leaves it, final-and adds it (both words unaligned)
    fwd2, rev2 = {(0, 0), (5, 5)}, {(0, 0)}
    assert symmetrize(fwd2, rev2, "grow-diag") == {(0, 0)}
    assert symmetrize(fwd2, rev2, "grow-diag-final-and") == {(0, 0), (5, 5)}
    # a link whose source word is aligned already: final adds it, final-and does not
    fwd3, rev3 = {(0, 0), (0, 4)}, {(0, 0)}
    assert symmetrize(fwd3, rev3, "grow-diag-final") == {(0, 0), (0, 4)}
    assert symmetrize(fwd3, rev3, "grow-diag-final-and") == {(0, 0)}
    # growth through a diagonal neighbour, then a chain: (1,1) then (2,2) from (0,0)
    assert symmetrize({(0, 0), (1, 1), (2, 2)}, {(0, 0)}, "grow-diag") == {(0, 0), (1, 1), (2, 2)}
    # both words aligned already: a neighbouring union link is not grown
    assert symmetrize({(0, 0), (1, 1), (0, 1)}, {(0, 0), (1, 1)}, "grow-diag") == {(0, 0), (1, 1)}
    # a link grown in a pass counts at once: (1, 0) is grown from (0, 0), then (2, 0), whose only
    # kept neighbour is (1, 0), in the same pass (source 2 still unaligned)
    assert symmetrize({(0, 0), (1, 0), (2, 0)}, {(0, 0)}, "grow-diag") == {(0, 0), (1, 0), (2, 0)}
    assert invert({(0, 3), (2, 1)}) == {(3, 0), (1, 2)}
    with pytest.raises(ValueError, match="method must be one of"):
        symmetrize(fwd, rev, "grow")


links = st.sets(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=20)


@settings(max_examples=120, deadline=None)
@given(links, links, st.sampled_from(METHODS))
def test_symmetrisation_equals_the_grid_reference(a, b, method):
    got = symmetrize(a, b, method)
    assert got == atools_reference(a, b, method)
    assert a & b <= got <= a | b


# ------------------------------------------------------------------ gold lines


def test_gold_line_convention():
    sure, possible = parse_gold_links("0-0 1p2 3?4 5-5")
    assert sure == {(0, 0), (5, 5)} and possible == {(0, 0), (1, 2), (3, 4), (5, 5)}
    with pytest.raises(ValueError, match=r"gold line 3: '1x2' is not a link"):
        parse_gold_links("1x2", where="gold line 3")


# ------------------------------------------------------------------ bootstrap


def plain_percentile(values, q):
    """numpy's default 'linear' quantile, by hand."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


counts_st = st.lists(
    st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(1, 12), st.integers(1, 12)).map(
        lambda t: AERCounts(min(t[0], t[1], t[2], t[3]), min(t[1], t[2]), t[2], t[3])
    ),
    min_size=1,
    max_size=15,
)


@settings(max_examples=20, deadline=None)
@given(counts_st, counts_st, st.integers(0, 10_000))
def test_bootstrap_equals_a_plain_loop(a, b, seed):
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    samples = 100
    idx = np.random.default_rng(seed).integers(0, n, size=(samples, n))  # the same draws, as documented
    ref_a, ref_b = [], []
    for row in idx:
        sa = sum((a[k] for k in row), AERCounts())
        sb = sum((b[k] for k in row), AERCounts())
        ref_a.append(sa.aer)
        ref_b.append(sb.aer)
    lo, hi = aer_interval(a, samples=samples, seed=seed)
    assert lo == pytest.approx(plain_percentile(ref_a, 0.025)) and hi == pytest.approx(plain_percentile(ref_a, 0.975))
    d = paired_aer_difference(a, b, samples=samples, seed=seed)
    diffs = [x - y for x, y in zip(ref_a, ref_b)]
    assert d["low"] == pytest.approx(plain_percentile(diffs, 0.025))
    assert d["high"] == pytest.approx(plain_percentile(diffs, 0.975))
    assert d["difference"] == pytest.approx(sum(a, AERCounts()).aer - sum(b, AERCounts()).aer)
    assert d["tie"] == (d["low"] <= 0 <= d["high"])


def test_bootstrap_behaviour_and_errors():
    gold = ({(0, 0), (1, 1)}, {(0, 0), (1, 1)})
    good = [aer_counts({(0, 0), (1, 1)}, *gold)] * 30
    bad = [aer_counts({(0, 1), (1, 0)}, *gold)] * 30
    assert aer_interval(good) == (0.0, 0.0)
    same = paired_aer_difference(good, good)
    assert same["difference"] == 0.0 and same["tie"]
    far = paired_aer_difference(bad, good)
    assert far["difference"] == 1.0 and not far["tie"] and far["low"] == far["high"] == 1.0
    with pytest.raises(ValueError, match="same verses, got 30 and 2"):
        paired_aer_difference(good, good[:2])
    with pytest.raises(ValueError, match="at least one verse"):
        aer_interval([])
    with pytest.raises(ValueError, match="samples must be a positive integer"):
        aer_interval(good, samples=0)
