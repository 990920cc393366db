"""attend() and the score functions against plain-loop float64 references."""

import math

import hypothesis.strategies as st
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from attnkit import attend, attend_hard, causal_mask, padding_mask
from attnkit.attention import scores as score_fns
from attnkit.attention.masks import check_mask, from_torch_mha_mask, to_torch_mha_mask

D64 = torch.float64


# ---- plain-loop references ------------------------------------------------------------------
def ref_score(name, q, k, params=None):
    """e[b, i, j] computed one pair at a time, in float64."""
    B, Nq, _ = q.shape
    Nk = k.shape[1]
    e = torch.zeros(B, Nq, Nk, dtype=D64)
    for b in range(B):
        for i in range(Nq):
            for j in range(Nk):
                s, h = q[b, i].double(), k[b, j].double()
                if name == "dot":
                    e[b, i, j] = (s * h).sum()
                elif name == "scaled_dot":
                    e[b, i, j] = (s * h).sum() / math.sqrt(s.numel())
                elif name == "bilinear":
                    e[b, i, j] = s @ params["weight"].double() @ h
                elif name == "additive":
                    x = params["w_query"].double() @ s + params["w_key"].double() @ h
                    if params.get("bias") is not None:
                        x = x + params["bias"].double()
                    e[b, i, j] = params["v"].double() @ torch.tanh(x)
    return e


def ref_attend(e, v, mask=None):
    """Softmax over allowed keys then Σ_j α_ij v_j, a row at a time."""
    B, Nq, Nk = e.shape
    w = torch.zeros(B, Nq, Nk, dtype=D64)
    c = torch.zeros(B, Nq, v.shape[-1], dtype=D64)
    for b in range(B):
        for i in range(Nq):
            allowed = [
                j
                for j in range(Nk)
                if mask is None or bool(mask[b if mask.shape[0] > 1 else 0, i if mask.shape[1] > 1 else 0, j])
            ]
            if not allowed:
                continue
            m = max(float(e[b, i, j]) for j in allowed)
            z = sum(math.exp(float(e[b, i, j]) - m) for j in allowed)
            for j in allowed:
                w[b, i, j] = math.exp(float(e[b, i, j]) - m) / z
                c[b, i] += w[b, i, j] * v[b, j].double()
    return c, w


def make(B=2, Nq=3, Nk=5, Dq=4, Dk=4, Dv=3, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, Nq, Dq, generator=g, dtype=dtype),
        torch.randn(B, Nk, Dk, generator=g, dtype=dtype),
        torch.randn(B, Nk, Dv, generator=g, dtype=dtype),
    )


def params_for(name, Dq, Dk, A=6, seed=1, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    if name == "bilinear":
        return {"weight": torch.randn(Dq, Dk, generator=g, dtype=dtype)}
    if name == "additive":
        return {
            "w_query": torch.randn(A, Dq, generator=g, dtype=dtype),
            "w_key": torch.randn(A, Dk, generator=g, dtype=dtype),
            "v": torch.randn(A, generator=g, dtype=dtype),
            "bias": torch.randn(A, generator=g, dtype=dtype),
        }
    return None


# ---- scores and soft attention ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["dot", "scaled_dot", "bilinear", "additive"])
def test_scores_match_loop_reference(name):
    Dk = 4 if name in ("dot", "scaled_dot") else 5
    q, k, _ = make(Dk=Dk)
    p = params_for(name, 4, Dk)
    fn = {
        "dot": lambda: score_fns.dot(q, k),
        "scaled_dot": lambda: score_fns.scaled_dot(q, k),
        "bilinear": lambda: score_fns.bilinear(q, k, p["weight"]),
        "additive": lambda: score_fns.additive(q, k, p["w_query"], p["w_key"], p["v"], p["bias"]),
    }[name]
    torch.testing.assert_close(fn().double(), ref_score(name, q, k, p), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["dot", "scaled_dot", "bilinear", "general", "additive", "bahdanau", "concat", "mlp"])
@pytest.mark.parametrize("with_mask", [False, True])
def test_attend_matches_loop_reference(name, with_mask):
    canon = score_fns.canonical_score_name(name)
    Dk = 4 if canon in ("dot", "scaled_dot") else 5
    q, k, v = make(Dk=Dk)
    p = params_for(canon, 4, Dk)
    mask = None
    if with_mask:
        mask = padding_mask(torch.tensor([5, 2])).unsqueeze(1).expand(2, 3, 5).clone()
        mask[1, 2] = False  # a query with nothing to attend
    ctx, w = attend(q, k, v, score=name, mask=mask, score_params=p)
    rc, rw = ref_attend(ref_score(canon, q, k, p), v, mask)
    torch.testing.assert_close(w.double(), rw, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ctx.double(), rc, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls", ["Bilinear", "Additive"])
def test_score_modules_equal_functional_forms(cls):
    q, k, v = make(Dk=5)
    mod = score_fns.Bilinear(4, 5) if cls == "Bilinear" else score_fns.Additive(4, 5, 6)
    if cls == "Bilinear":
        ref = score_fns.bilinear(q, k, mod.weight)
    else:
        ref = score_fns.additive(q, k, mod.w_query.weight, mod.w_key.weight, mod.v, mod.w_key.bias)
    torch.testing.assert_close(mod(q, k), ref)
    torch.testing.assert_close(mod.score_prepared(q, mod.prepare_keys(k)), ref)
    ctx, _ = attend(q, k, v, score=mod)
    torch.testing.assert_close(ctx, torch.softmax(ref, -1) @ v)


def test_additive_inplace_path_equals_autograd_path():
    q, k = torch.randn(3, 70, 16), torch.randn(3, 90, 16)
    v = torch.randn(16)
    with torch.no_grad():
        fast = score_fns.additive_prepared(q, k, v)
    slow = torch.tanh(q.unsqueeze(2) + k.unsqueeze(1)) @ v
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
    qg = q.clone().requires_grad_()
    torch.testing.assert_close(score_fns.additive_prepared(qg, k, v), slow, rtol=1e-5, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(q_batch=st.lists(st.integers(0, 3), max_size=3), k_batch=st.lists(st.integers(0, 3), max_size=3))
def test_additive_batch_shapes_broadcast_like_torch(q_batch, k_batch):
    """Batch dimensions of the projected queries and keys broadcast by NumPy's rules (torch.broadcast_shapes)."""
    q, k, v = torch.randn(*q_batch, 2, 4), torch.randn(*k_batch, 3, 4), torch.randn(4)
    try:
        want = torch.broadcast_shapes(tuple(q_batch), tuple(k_batch))
    except RuntimeError:
        with pytest.raises(ValueError, match="do not broadcast"):
            score_fns.additive_prepared(q, k, v)
        return
    with torch.no_grad():
        got = score_fns.additive_prepared(q, k, v)
    assert got.shape == (*want, 2, 3)
    ref = torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3)) @ v  # broadcasting (..., 2, 1, 4) + (..., 1, 3, 4)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("score", ["dot", "scaled_dot"])
@pytest.mark.parametrize("masked", [False, True])
def test_fast_path_equals_sdpa_and_weighted_path(score, masked):
    q, k, v = make(B=2, Nq=7, Nk=9, Dq=8, Dk=8, Dv=5)
    mask = causal_mask(7, 9) if masked else None
    scale = 1.0 if score == "dot" else None
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    fast, none = attend(q, k, v, score=score, mask=mask, need_weights=False)
    slow, w = attend(q, k, v, score=score, mask=mask, need_weights=True)
    assert none is None and w is not None
    torch.testing.assert_close(fast, ref)
    torch.testing.assert_close(slow, ref, rtol=1e-5, atol=1e-6)


def test_heads_as_batch_dims_and_unbatched_inputs():
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
    ctx, w = attend(q, k, v)
    assert ctx.shape == (2, 3, 4, 5) and w.shape == (2, 3, 4, 6)
    torch.testing.assert_close(ctx, F.scaled_dot_product_attention(q, k, v))
    c1, w1 = attend(q[0, 0], k[0, 0], v[0, 0])
    torch.testing.assert_close(c1, ctx[0, 0])
    assert w1.shape == (4, 6)


# ---- masks ------------------------------------------------------------------------------------
def test_fully_masked_rows_give_zeros_and_finite_gradients():
    for need_weights in (True, False):
        q, k, v = (t.double().requires_grad_() for t in make())
        mask = torch.ones(2, 3, 5, dtype=torch.bool)
        mask[0, 1] = False
        mask[1] = False
        ctx, w = attend(q, k, v, mask=mask, need_weights=need_weights)
        assert torch.all(ctx[0, 1] == 0) and torch.all(ctx[1] == 0)
        if w is not None:
            assert torch.all(w[0, 1] == 0) and torch.all(w[1] == 0)
        (ctx.sum() + (w.sum() if w is not None else 0)).backward()
        for t in (q, k, v):
            assert torch.isfinite(t.grad).all()


def test_padding_and_causal_masks():
    assert padding_mask(torch.tensor([2, 0, 3]), 4).tolist() == [
        [True, True, False, False],
        [False] * 4,
        [True, True, True, False],
    ]
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal_mask(1, 3).tolist() == [[True, True, True]]  # last query of a cached prefix
    m = padding_mask(torch.tensor([1, 2]), 3)
    torch_m = to_torch_mha_mask(m)
    assert torch.equal(torch_m, ~m) and torch.equal(from_torch_mha_mask(torch_m), m)
    fm = torch.zeros(2, 3).masked_fill(~m, float("-inf"))
    assert torch.equal(from_torch_mha_mask(fm), m)


def test_causal_mask_stops_influence_of_later_keys():
    q, k, v = make(B=1, Nq=6, Nk=6, Dq=4, Dk=4, Dv=3)
    ctx, _ = attend(q, k, v, mask=causal_mask(6))
    k2, v2 = k.clone(), v.clone()
    k2[:, 4:] += 10.0
    v2[:, 4:] -= 7.0
    ctx2, _ = attend(q, k2, v2, mask=causal_mask(6))
    torch.testing.assert_close(ctx[:, :4], ctx2[:, :4])
    assert not torch.allclose(ctx[:, 4:], ctx2[:, 4:])


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(1, 3),
    Nq=st.integers(1, 5),
    Nk=st.integers(1, 7),
    D=st.integers(1, 6),
    score=st.sampled_from(["dot", "scaled_dot", "bilinear", "additive"]),
    seed=st.integers(0, 10_000),
)
def test_property_weights_sum_to_one_and_masked_keys_get_zero(B, Nq, Nk, D, score, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(B, Nq, D, generator=g), torch.randn(B, Nk, D, generator=g), torch.randn(B, Nk, 2, generator=g)
    mask = torch.rand(B, Nq, Nk, generator=g) < 0.6
    ctx, w = attend(q, k, v, score=score, mask=mask, score_params=params_for(score, D, D))
    assert torch.all(w[~mask] == 0)
    rows = mask.any(-1)
    torch.testing.assert_close(w.sum(-1)[rows], torch.ones(int(rows.sum())))
    assert torch.all(w.sum(-1)[~rows] == 0) and torch.all(ctx[~rows] == 0)
    assert torch.isfinite(ctx).all()


@settings(max_examples=30, deadline=None)
@given(
    Nq=st.integers(1, 40),
    Nk=st.integers(1, 30),
    chunk=st.integers(1, 16),
    score=st.sampled_from(["scaled_dot", "bilinear", "additive"]),
    seed=st.integers(0, 10_000),
)
def test_property_chunked_path_equals_direct(Nq, Nk, chunk, score, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(2, Nq, 6, generator=g), torch.randn(2, Nk, 6, generator=g), torch.randn(2, Nk, 3, generator=g)
    mask = torch.rand(2, Nq, Nk, generator=g) < 0.7
    p = params_for(score, 6, 6)
    direct = attend(q, k, v, score=score, mask=mask, score_params=p)
    chunked = attend(q, k, v, score=score, mask=mask, score_params=p, chunk_size=chunk)
    torch.testing.assert_close(chunked.context, direct.context)
    torch.testing.assert_close(chunked.weights, direct.weights)


# ---- hard attention ---------------------------------------------------------------------------
@pytest.mark.parametrize("score", ["dot", "additive"])
def test_hard_argmax_picks_value_of_best_allowed_key(score):
    q, k, v = make(Dk=4)
    p = params_for(score, 4, 4)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 0, :] = False
    mask[0, 0, 3] = True  # only key 3 allowed
    mask[1, 2] = False  # nothing allowed
    ctx, w = attend(q, k, v, score=score, hard="argmax", mask=mask, score_params=p)
    e = ref_score(score_fns.canonical_score_name(score), q, k, p)
    for b in range(2):
        for i in range(3):
            allowed = [j for j in range(5) if mask[b, i, j]]
            if not allowed:
                assert torch.all(ctx[b, i] == 0) and torch.all(w[b, i] == 0)
                continue
            best = max(allowed, key=lambda j: float(e[b, i, j]))
            assert w[b, i].tolist() == [1.0 if j == best else 0.0 for j in range(5)]
            torch.testing.assert_close(ctx[b, i], v[b, best])


def test_hard_sample_distribution_and_log_prob():
    torch.manual_seed(0)
    q, k, v = make(B=1, Nq=1, Nk=4, Dq=3, Dk=3, Dv=2)
    mask = torch.tensor([[[True, True, False, True]]])
    g = torch.Generator().manual_seed(123)
    counts = torch.zeros(4)
    for _ in range(4000):
        r = attend_hard(q, k, v, mode="sample", mask=mask, generator=g)
        j = int(r.index[0, 0])
        counts[j] += 1
        torch.testing.assert_close(r.context[0, 0], v[0, j])
        torch.testing.assert_close(r.log_prob[0, 0], torch.log(r.probs[0, 0, j]))
    probs = attend(q, k, v, mask=mask).weights[0, 0]
    assert counts[2] == 0
    torch.testing.assert_close(counts / counts.sum(), probs, atol=0.03, rtol=0)


def test_hard_argmax_through_both_entry_points_and_one_return_type():
    torch.manual_seed(0)
    q, k, v = make(B=2, Nq=3, Nk=5, Dq=4, Dk=4, Dv=2)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[1, 2] = False  # a query with nothing to attend
    soft = attend(q, k, v, mask=mask)
    arg = attend(q, k, v, mask=mask, hard="argmax")
    h = attend_hard(q, k, v, mask=mask, mode="argmax")
    assert type(soft) is type(arg)  # attend has one return type
    torch.testing.assert_close(h.context, arg.context)
    torch.testing.assert_close(h.weights, arg.weights)
    torch.testing.assert_close(h.probs, soft.weights)  # the distribution the choice came from
    torch.testing.assert_close(h.expected, soft.context)  # and the soft (expected) context
    assert torch.equal(h.index[0], soft.weights[0].argmax(-1))
    assert float(h.context[1, 2].abs().sum()) == 0.0 and float(h.log_prob[1, 2]) == 0.0
    with pytest.raises(ValueError, match="use attend_hard"):
        attend(q, k, v, hard="sample")


def test_hard_sample_log_prob_gradient_is_score_function():
    # d/dθ E[f(l)] = E[f(l) ∇ log p(l)] — check the estimator's mean against the exact gradient.
    torch.manual_seed(0)
    q = torch.randn(1, 1, 3, dtype=D64, requires_grad=True)
    k, v = torch.randn(1, 5, 3, dtype=D64), torch.randn(1, 5, 2, dtype=D64)
    f = torch.randn(5, dtype=D64)  # a "loss" per location
    exact = torch.autograd.grad((attend(q, k, v).weights[0, 0] * f).sum(), q)[0]
    g = torch.Generator().manual_seed(7)
    n = 20000
    r = attend_hard(q.expand(n, 1, 3), k.expand(n, 5, 3), v.expand(n, 5, 2), mode="sample", generator=g)
    est = torch.autograd.grad((f[r.index[:, 0]] * r.log_prob[:, 0]).mean(), q)[0]
    torch.testing.assert_close(est, exact, atol=0.05, rtol=0.1)


# ---- gradients --------------------------------------------------------------------------------
@pytest.mark.parametrize("score", ["dot", "scaled_dot", "bilinear", "additive"])
def test_gradcheck_float64(score):
    q, k, v = make(B=1, Nq=2, Nk=3, Dq=3, Dk=3, Dv=2, dtype=D64)
    p = {n: t.requires_grad_() for n, t in (params_for(score, 3, 3, A=4, dtype=D64) or {}).items()}
    mask = torch.tensor([[[True, True, False], [False, False, False]]])
    names = list(p)

    def fn(q, k, v, *ps):
        return attend(q, k, v, score=score, mask=mask, score_params=dict(zip(names, ps)) or None)

    inputs = (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), *p.values())
    assert torch.autograd.gradcheck(fn, inputs)


# ---- errors -----------------------------------------------------------------------------------
def test_errors_name_the_argument_and_shapes():
    q, k, v = make()
    with pytest.raises(ValueError, match=r"unknown score 'cosine'"):
        attend(q, k, v, score="cosine")
    with pytest.raises(ValueError, match=r"key and value .*\(2, 5, 4\).*\(2, 4, 3\)"):
        attend(q, k, v[:, :4])
    with pytest.raises(ValueError, match=r"query and key must have the same batch"):
        attend(q, k[:1], v[:1])
    with pytest.raises(ValueError, match=r"query feature size 4.*key feature size 5"):
        attend(q, torch.randn(2, 5, 5), v, score="dot")
    with pytest.raises(ValueError, match=r"same rank"):
        attend(q, k[0], v[0])
    with pytest.raises(ValueError, match=r"mask of shape \(2, 4, 5\) does not broadcast.*\(2, 3, 5\)"):
        attend(q, k, v, mask=torch.ones(2, 4, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"mask must have dtype torch.bool"):
        attend(q, k, v, mask=torch.ones(2, 3, 5))
    with pytest.raises(ValueError, match=r"score_params"):
        attend(q, k, v, score="additive")
    with pytest.raises(ValueError, match=r"hard must be one of"):
        attend(q, k, v, hard="gumbel")
    with pytest.raises(TypeError, match=r"query must be a floating-point"):
        attend(q.long(), k, v)
    with pytest.raises(ValueError, match=r"w_query must be \(A, Dq=4\)"):
        score_fns.additive(q, k, torch.randn(6, 3), torch.randn(6, 4), torch.randn(6))
    with pytest.raises(ValueError, match=r"lengths must be 1-D"):
        padding_mask(torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"nk >= nq"):
        causal_mask(4, 2)
    with pytest.raises(TypeError, match=r"mask must be a torch.Tensor"):
        check_mask([[True]], (1, 1, 1))
