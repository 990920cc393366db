"""The fused additive score: gradcheck in float64, and outputs and gradients equal to the broadcast form."""

from unittest import mock

import hypothesis.strategies as st
import torch
from hypothesis import given, settings

from attnkit import attend
from attnkit.attention import additive_fused
from attnkit.attention.additive_fused import AdditiveScores, additive_scores, block_plan
from attnkit.attention.scores import Additive, additive_prepared


def _broadcast(a, b, v):
    return torch.tanh(a.unsqueeze(2) + b.unsqueeze(1)) @ v  # what autograd would keep: (B, Nq, Nk, A)


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(3, 6, 5, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(additive_scores, (a, b, v))


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 5), Nq=st.integers(1, 7), Nk=st.integers(1, 9), A=st.integers(1, 12), seed=st.integers(0, 999))
def test_equals_the_broadcast_form_in_value_and_gradient(B, Nq, Nk, A, seed):
    g = torch.Generator().manual_seed(seed)
    base = [torch.randn(B, Nq, A, generator=g), torch.randn(B, Nk, A, generator=g), torch.randn(A, generator=g)]
    x1 = [t.clone().requires_grad_() for t in base]
    x2 = [t.clone().requires_grad_() for t in base]
    x3 = [t.clone().requires_grad_() for t in base]  # the one-query path's sigmoid-form broadcast
    w = torch.randn(B, Nq, Nk, generator=g)
    e1, e2, e3 = additive_scores(*x1), _broadcast(*x2), additive_fused.broadcast_scores(*x3)
    torch.testing.assert_close(e1, e2, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(e3, e2, rtol=1e-5, atol=1e-5)
    for e in (e1, e2, e3):
        (e * w).sum().backward()
    for p, q, r in zip(x1, x2, x3):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(r.grad, q.grad, rtol=1e-4, atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 6), Nq=st.integers(1, 9), Nk=st.integers(1, 9), A=st.integers(1, 8), elems=st.integers(1, 400))
def test_block_plan_covers_every_cell_once_within_the_budget(B, Nq, Nk, A, elems):
    seen = torch.zeros(B, Nq, dtype=torch.long)
    for b0, b1, q0, q1 in block_plan(B, Nq, Nk, A, elems):
        seen[b0:b1, q0:q1] += 1
        assert (b1 - b0) * (q1 - q0) * Nk * A <= max(elems, Nk * A)  # one query row is the least a block holds
        assert b1 - b0 == 1 or (q0, q1) == (0, Nq)  # several items only whole: their score rows stay contiguous
    assert bool((seen == 1).all())


@settings(max_examples=20, deadline=None)
@given(
    B=st.integers(1, 4),
    Nq=st.integers(1, 7),
    Nk=st.integers(1, 6),
    A=st.integers(1, 6),
    elems=st.integers(1, 200),
    seed=st.integers(0, 999),
)
def test_small_blocks_give_the_same_values_and_gradients(B, Nq, Nk, A, elems, seed):
    """Query rows split over blocks (gradients of b summed over them), several items per block, one row per block."""
    g = torch.Generator().manual_seed(seed)
    x = [
        torch.randn(B, Nq, A, dtype=torch.float64, generator=g),
        torch.randn(B, Nk, A, dtype=torch.float64, generator=g),
        torch.randn(A, dtype=torch.float64, generator=g),
    ]
    w = torch.randn(B, Nq, Nk, dtype=torch.float64, generator=g)
    x1 = [t.clone().requires_grad_() for t in x]
    x2 = [t.clone().requires_grad_() for t in x]
    with mock.patch.object(additive_fused, "BLOCK_ELEMS", elems):
        e1 = additive_scores(*x1)
        (e1 * w).sum().backward()
        with torch.no_grad():
            e0 = additive_prepared(x[0], x[1], x[2])  # the path without autograd: the same blocks
    e2 = _broadcast(*x2)
    (e2 * w).sum().backward()
    torch.testing.assert_close(e1, e2)
    torch.testing.assert_close(e0, e2)
    for p, q in zip(x1, x2):
        torch.testing.assert_close(p.grad, q.grad)


def test_attention_with_the_additive_score_uses_it_and_keeps_masks_and_gradients():
    torch.manual_seed(0)
    score = Additive(6, 5, 8)
    q, k, v = torch.randn(2, 4, 6, requires_grad=True), torch.randn(2, 7, 5), torch.randn(2, 7, 3)
    mask = torch.ones(2, 4, 7, dtype=torch.bool)
    mask[1, 3] = False  # a row with nothing to attend: zeros, finite gradient
    called = []
    orig = AdditiveScores.forward

    def spy(ctx, *args):
        called.append(True)
        return orig(ctx, *args)

    AdditiveScores.forward = staticmethod(spy)
    try:
        ctx, w = attend(q, k, v, score=score, mask=mask)
    finally:
        AdditiveScores.forward = staticmethod(orig)
    assert called and float(w[1, 3].detach().abs().sum()) == 0.0
    ctx.sum().backward()
    assert torch.isfinite(q.grad).all()
    ref = torch.softmax(
        (torch.tanh(score.w_query(q).unsqueeze(2) + score.w_key(k).unsqueeze(1)) @ score.v).masked_fill(
            ~mask, float("-inf")
        ),
        -1,
    ).nan_to_num(0.0)
    torch.testing.assert_close(w, ref, rtol=1e-5, atol=1e-6)
