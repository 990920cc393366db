"""Context mixing, direct logit attribution and the logit lens on tiny decoder-only Hugging Face models
(GPT-2; Llama with grouped-query heads and RoPE; Qwen 3 with query/key norms; Gemma's (1 + w) RMSNorm
and multi-query attention; GPT-NeoX's parallel blocks), in float64, each checked against a reference
that reads the model itself: its eager attention weights (``output_attentions``), its value
projections and layer outputs through forward hooks, plain per-token/per-head loops, and the model
rerun with one value zeroed; never attnkit's trace."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.nn.functional as F

from attnkit.attribution.cosine import cosine_distance
from attnkit.attribution.lm_mixing import (
    alti,
    alti_logit,
    attention_norm,
    direct_logit_attribution,
    logit_lens,
    value_zeroed_output,
    value_zeroing,
)
from attnkit.hf.lm_decomposition import trace_lm
from attnkit.hf.loading import HFModelError
from hf_tiny import build_tiny

FAMILIES = ("gpt2", "llama", "qwen3", "gemma", "gpt_neox")
# the eager references' softmax runs in float32 even in a float64 model (transformers' eager attention), so what
# is read through their α agrees to float32 rounding; the replay itself is checked to float64 rounding against the
# model's own (sdpa, float64) layer outputs
REF = 1e-5  # float32 rounding of α times values of norm up to ~30
TIGHT = 1e-10
TEXT = "the cat sat on the mat"


@functools.cache
def _model(family: str, eager: bool = False):
    model, tok = build_tiny(family, attn_implementation="eager" if eager else None)
    return model.double(), torch.tensor(tok(TEXT)["input_ids"])


def _layers(model):
    base = model.base_model
    return base.layers if hasattr(base, "layers") else base.h


def _value_module(family, layer):
    """The module whose output holds the value vectors, and how to read ``(N, Hkv, Dh)`` from it."""
    if family == "gpt2":
        d, h = layer.attn.embed_dim, layer.attn.num_heads
        return layer.attn.c_attn, slice(2 * d, 3 * d), h
    if family == "gpt_neox":
        return layer.attention.query_key_value, None, layer.attention.config.num_attention_heads
    return layer.self_attn.v_proj, slice(None), None


def _values(family, out, layer):
    """``(N, Hkv, Dh)`` value vectors from the value module's output ``out (N, ·)``."""
    _, cols, nh = _value_module(family, layer)
    if family == "gpt_neox":
        dh = layer.attention.head_size
        return out.view(out.shape[0], nh, 3 * dh)[..., 2 * dh :]
    v = out[:, cols]
    dh = v.shape[-1] // nh if nh else layer.self_attn.head_dim
    return v.reshape(v.shape[0], -1, dh)


def _out_proj(family, layer):
    """``(W (D, H·Dh), b)`` with ``attention output = W ctx + b``."""
    if family == "gpt2":
        return layer.attn.c_proj.weight.T, layer.attn.c_proj.bias
    if family == "gpt_neox":
        return layer.attention.dense.weight, layer.attention.dense.bias
    return layer.self_attn.o_proj.weight, layer.self_attn.o_proj.bias


@functools.cache
@torch.no_grad()
def _reference(family: str):
    """Per layer, from the eager model itself: ``(α (H, N, N), terms (N, N, D) by a per-head loop,
    residual (N, D), attention output (N, D), layer output (N, D))``; and the logits."""
    model, ids = _model(family, eager=True)
    layers = _layers(model)
    got = {}
    hooks = []
    for i, layer in enumerate(layers):
        mod, _, _ = _value_module(family, layer)
        hooks.append(mod.register_forward_hook(lambda m, a, o, i=i: got.__setitem__(("v", i), o[0])))
        attn = layer.attn if family == "gpt2" else layer.attention if family == "gpt_neox" else layer.self_attn
        hooks.append(attn.register_forward_hook(lambda m, a, o, i=i: got.__setitem__(("a", i), o[0][0])))
        hooks.append(layer.register_forward_hook(lambda m, a, o, i=i: got.__setitem__(("y", i), o[0])))
    with torch.no_grad():
        out = model(ids[None], output_attentions=True, output_hidden_states=True, use_cache=False)
    for h in hooks:
        h.remove()
    rows = []
    for i, layer in enumerate(layers):
        alpha = out.attentions[i][0]  # (H, N, N)
        v = _values(family, got[("v", i)], layer)  # (N, Hkv, Dh)
        w, _ = _out_proj(family, layer)
        nh, n = alpha.shape[0], alpha.shape[1]
        group = nh // v.shape[1]
        dh = v.shape[-1]
        terms = torch.zeros(n, n, w.shape[0], dtype=torch.float64)
        for h in range(nh):
            w_h = w[:, h * dh : (h + 1) * dh]  # (D, Dh)
            for a in range(n):
                for b in range(n):
                    terms[a, b] += alpha[h, a, b] * (w_h @ v[b, h // group])
        rows.append((alpha, terms, out.hidden_states[i][0], got[("a", i)], got[("y", i)]))
    return rows, out.logits[0]


def _parts(family):
    model, ids = _model(family)
    parts = []
    trace = trace_lm(model, ids, parts.append)
    return parts, trace


@pytest.mark.parametrize("family", FAMILIES)
def test_the_terms_add_up_to_the_models_own_attention_and_layer_outputs(family):
    parts, trace = _parts(family)
    ref, logits = _reference(family)
    assert len(parts) == len(ref) == 2
    for p, (alpha, terms, resid, attn_out, y) in zip(parts, ref):
        torch.testing.assert_close(p.weights, alpha, atol=REF, rtol=0)
        torch.testing.assert_close(p.terms(), terms, atol=REF, rtol=0)
        torch.testing.assert_close(p.attention_output(), attn_out, atol=REF, rtol=0)
        torch.testing.assert_close(p.residual, resid, atol=REF, rtol=0)
        torch.testing.assert_close(p.out, y, atol=REF, rtol=0)
    torch.testing.assert_close(trace.logits, logits, atol=REF, rtol=0)
    model, ids = _model(family)
    with torch.no_grad():
        own = model(ids[None], output_hidden_states=True, use_cache=False)
    for p in parts:  # the model's own float64 pass: the replayed layers' inputs and outputs to float64 rounding
        torch.testing.assert_close(p.residual, own.hidden_states[p.layer][0], atol=TIGHT, rtol=0)
    torch.testing.assert_close(parts[0].out, own.hidden_states[1][0], atol=TIGHT, rtol=0)
    torch.testing.assert_close(trace.logits, own.logits[0], atol=TIGHT, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_norm_is_the_norm_of_the_models_terms(family):
    parts, _ = _parts(family)
    ref, _ = _reference(family)
    for p, (_, terms, _, _, _) in zip(parts, ref):
        expected = torch.tensor(
            [[float(terms[a, b].norm()) for b in range(terms.shape[1])] for a in range(terms.shape[0])]
        )
        torch.testing.assert_close(attention_norm(p), expected.double(), atol=REF, rtol=0)


def _alti_loop(terms, resid):
    """ALTI's ``(N, N)`` contributions of one layer by a per-token loop."""
    n = terms.shape[0]
    c = torch.zeros(n, n, dtype=torch.float64)
    for a in range(n):
        t = [terms[a, b] + (resid[a] if a == b else 0) for b in range(n)]
        total = sum(t)
        for b in range(n):
            c[a, b] = max(0.0, float(total.abs().sum() - (total - t[b]).abs().sum()))
        c[a] /= c[a].sum()
    return c


@pytest.mark.parametrize("family", FAMILIES)
def test_alti_equals_a_loop_over_the_models_blocks(family):
    model, ids = _model(family)
    ref, _ = _reference(family)
    n = ids.shape[0]
    rolled = torch.eye(n, dtype=torch.float64)
    for _, terms, resid, _, _ in ref:
        rolled = _alti_loop(terms, resid) @ rolled
    got = alti(model, ids)
    torch.testing.assert_close(got, rolled, atol=REF, rtol=0)
    torch.testing.assert_close(got.sum(-1), torch.ones(n, dtype=torch.float64))
    assert torch.all(got.triu(1) == 0)  # causal: nothing flows from a later token


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layer", [0, 1])
def test_value_zeroing_equals_rerunning_the_model_with_a_value_zeroed(family, layer):
    model, ids = _model(family)
    parts, _ = _parts(family)
    p = parts[layer]
    block = _layers(model)[layer]
    mod, _, _ = _value_module(family, block)
    scores = value_zeroing(p)
    for j in (0, ids.shape[0] // 2):
        seen: dict = {}

        def zero(m, a, o, j=j):
            o = o.clone()
            v = _values(family, o[0], block)  # a view of o's values
            v[j] = 0.0
            return o

        h1 = mod.register_forward_hook(zero)
        h2 = block.register_forward_hook(lambda m, a, o, seen=seen: seen.__setitem__("y", o[0]))
        with torch.no_grad():
            model(ids[None], use_cache=False)
        h1.remove()
        h2.remove()
        torch.testing.assert_close(value_zeroed_output(p, j), seen["y"], atol=TIGHT, rtol=0)
        expected = 1.0 - F.cosine_similarity(p.out, seen["y"], dim=-1)
        torch.testing.assert_close(scores[:, j], expected.clamp_min(0.0), atol=TIGHT, rtol=0)
    assert torch.all(scores[:, -1][:-1] < 1e-12)  # a later token's value reaches no earlier position


@pytest.mark.parametrize("family", FAMILIES)
def test_direct_logit_attribution_sums_to_the_models_logit(family):
    model, ids = _model(family)
    with torch.no_grad():
        logits = model(ids[None], use_cache=False).logits[0]  # the model's own, float64
    for position, token in ((-1, None), (2, 7)):
        d = direct_logit_attribution(model, ids, position=position, token=token)
        expected_token = int(logits[position].argmax()) if token is None else token
        assert d.token == expected_token
        assert d.logit == pytest.approx(float(logits[position, expected_token]), abs=TIGHT)
        # RMSNorm modules normalise in float32 even in a float64 model: their logits carry float32 rounding
        tol = 1e-9 if family in ("gpt2", "gpt_neox") else 1e-6
        assert d.total() == pytest.approx(d.logit, abs=tol)
        assert d.heads.shape == (2, 4)
        out = d.to_dict()
        assert [row["layer"] for row in out["layers"]] == [1, 2] and out["position"] == d.position + 1


@torch.no_grad()
def test_direct_logit_attribution_of_a_head_is_its_terms_through_the_linearised_norm():
    """GPT-2: LayerNorm linearised at the real final residual, by hand from the reference's terms."""
    model, ids = _model("gpt2")
    ref, _ = _reference("gpt2")
    d = direct_logit_attribution(model, ids, position=-1)
    ln = model.transformer.ln_f
    with torch.no_grad():
        x = ref[-1][4][-1]  # the last layer's output at the last position: ln_f's input
        sigma = (x.var(unbiased=False) + ln.eps).sqrt()
        w_u = model.lm_head.weight[d.token]
        alpha, _, _, _, _ = ref[1]
        block = _layers(model)[1]
        v = _values("gpt2", block.attn.c_attn(block.ln_1(ref[1][2])), block)  # (N, H, Dh)
        w, _ = _out_proj("gpt2", block)
        h = 3
        term = sum(alpha[h, -1, j] * (w[:, h * 8 : (h + 1) * 8] @ v[j, h]) for j in range(ids.shape[0]))
        expected = float(((term - term.mean()) * ln.weight / sigma) @ w_u)  # float32-softmax α: REF
    assert float(d.heads[1, h]) == pytest.approx(expected, abs=REF)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_logit_lens_ends_at_the_models_own_prediction(family):
    model, ids = _model(family)
    with torch.no_grad():
        logits = model(ids[None], use_cache=False).logits[0]  # the model's own, float64
    rows = logit_lens(model, ids, k=3)
    assert [r.layer for r in rows] == [0, 1, 2]
    last = rows[-1]
    assert last.rank == 1 and last.top[0] == int(logits[-1].argmax())
    torch.testing.assert_close(
        torch.tensor(last.logits, dtype=torch.float64), logits[-1].topk(3).values, atol=1e-9, rtol=0
    )
    for r in rows:  # the rank is where the prediction's logit sorts in that layer's own logits
        assert r.rank >= 1 and (r.rank == 1) == (r.top[0] == last.top[0])


def test_trace_hands_over_one_layer_at_a_time():
    model, ids = _model("llama")
    seen = []
    trace_lm(model, ids, lambda p: seen.append((p.layer, p.weights.shape)))
    assert seen == [(0, (4, ids.shape[0], ids.shape[0])), (1, (4, ids.shape[0], ids.shape[0]))]


def test_families_not_traced_are_refused_in_one_line():
    model, tok = build_tiny("bart")  # an encoder-decoder: not a block stack trace_lm reads
    with pytest.raises(HFModelError, match="not defined for bart models") as err:
        alti(model, torch.tensor(tok(TEXT)["input_ids"]))
    assert "\n" not in str(err.value)


def test_a_block_that_is_not_what_the_trace_assumes_is_refused():
    model, tok = build_tiny("llama")
    # a block that adds something of its own after the sub-blocks the replay knows (as a remote-code model might)
    model.model.layers[0].register_forward_hook(lambda m, a, o: o + 0.5)
    with pytest.raises(HFModelError, match=r"replaying layer 1 .* does not give its output") as err:
        alti(model, torch.tensor(tok(TEXT)["input_ids"]))
    assert "\n" not in str(err.value)


def test_bad_arguments_name_themselves():
    model, ids = _model("gpt2")
    with pytest.raises(ValueError, match="input_ids"):
        alti(model, ids[None])
    with pytest.raises(ValueError, match="position"):
        direct_logit_attribution(model, ids, position=99)
    with pytest.raises(ValueError, match="token"):
        direct_logit_attribution(model, ids, token=10**9)
    with pytest.raises(ValueError, match="k must"):
        logit_lens(model, ids, k=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_alti_logit_sums_to_the_logit(family):
    model, ids = _model(family)
    with torch.no_grad():
        logits = model(ids[None], use_cache=False).logits[0]
    a = alti_logit(model, ids, position=3)
    assert a.logit == pytest.approx(float(logits[3, a.token]), abs=TIGHT)
    tol = 1e-9 if family in ("gpt2", "gpt_neox") else 1e-6  # RMSNorm modules normalise in float32
    assert float(a.tokens.sum()) + a.biases == pytest.approx(a.logit, abs=tol)
    assert torch.all(a.tokens[4:] == 0)  # causal: later tokens give nothing


@torch.no_grad()
def test_alti_logit_equals_a_loop_over_the_models_blocks():
    """GPT-2, by hand: the embedding, each layer's terms sent through the rollout below, each MLP's update."""
    model, ids = _model("gpt2")
    ref, _ = _reference("gpt2")
    n = ids.shape[0]
    pos = n - 1
    got = alti_logit(model, ids, position=pos)
    x_final = ref[-1][4][pos]
    ln = model.transformer.ln_f
    sigma = (x_final.var(unbiased=False) + ln.eps).sqrt()
    w_u = model.lm_head.weight[got.token]

    def logit(t):
        return float(((t - t.mean()) * ln.weight / sigma) @ w_u)

    expected = [0.0] * n
    expected[pos] += logit(ref[0][2][pos])
    rolled = torch.eye(n, dtype=torch.float64)
    for _, terms, resid, attn_out, y in ref:
        for src in range(n):
            for j in range(n):
                expected[j] += float(rolled[src, j]) * logit(terms[pos, src])
        rolled = _alti_loop(terms, resid) @ rolled
        m = y[pos] - (resid[pos] + attn_out[pos])
        for j in range(n):
            expected[j] += float(rolled[pos, j]) * logit(m)
    torch.testing.assert_close(got.tokens, torch.tensor(expected, dtype=torch.float64), atol=REF, rtol=0)


VZ_TEXT = "In the beginning God created the heaven and the earth, and the earth was without form"


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@torch.no_grad()
def test_value_zeroing_in_float32_keeps_its_digits(family):
    """In float32, ``1 − cos`` loses the digits of a small distance (future tokens scored up to ~1e-7,
    normalised rows 5e-5 off); the half squared distance of the unit vectors keeps them: the future tokens
    of a causal model score exactly 0 and the rows match the float64 model's to ~1e-6."""
    model, tok = build_tiny(family)
    ids = torch.tensor(tok(VZ_TEXT)["input_ids"])
    p32: list = []
    trace_lm(copy.deepcopy(model).float(), ids, p32.append)
    p64: list = []
    trace_lm(copy.deepcopy(model).double(), ids, p64.append)
    n = ids.shape[0]
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for a, b in zip(p32, p64, strict=True):
        got = value_zeroing(a)
        assert got.dtype == torch.float32
        assert torch.all(got[future] == 0.0)
        ref = torch.stack([1.0 - F.cosine_similarity(b.out, value_zeroed_output(b, j), dim=-1) for j in range(n)], 1)
        assert ref.max() > 0.1  # not vacuous
        torch.testing.assert_close(got.double(), ref, atol=1e-6, rtol=0)
        rows, ref_rows = got.double() / got.double().sum(-1, keepdim=True), ref / ref.sum(-1, keepdim=True)
        torch.testing.assert_close(rows, ref_rows, atol=5e-6, rtol=0)


def test_cosine_distance_of_close_vectors_matches_float64():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 32, generator=g, dtype=torch.float64)
    b = a + 1e-4 * torch.randn(64, 32, generator=g, dtype=torch.float64)
    ref = 1.0 - F.cosine_similarity(a, b, dim=-1)  # float64: exact enough
    got = cosine_distance(a.float(), b.float())
    assert torch.all(cosine_distance(a.float(), a.float()) == 0.0)
    torch.testing.assert_close(got.double(), ref, atol=0, rtol=1e-2)  # relative, at distances ~1e-9
    assert (1.0 - F.cosine_similarity(a.float(), b.float(), dim=-1)).double().sub(ref).abs().max() > 1e-8
