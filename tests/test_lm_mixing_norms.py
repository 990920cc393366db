"""Context mixing through the norms that follow an attention: the post-norm encoders (BERT, DistilBERT,
RoBERTa, XLM-R: ``m = LN(r + a)``), Gemma 2/3 and OLMo 2 (``m = r + P(a)``), and Phi-3's fused
projection, on tiny float64 models. Each is checked against the model itself, read through forward
hooks on its own modules (value projections, attention outputs, the norms' real inputs and outputs,
layer outputs), its eager attention weights and plain loops that carry each term through the norm with
its real statistics by hand (Ferrando et al. 2022); value zeroing against a rerun with a value zeroed.
Never attnkit's trace."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from attnkit.attribution.information_flow import information_flow_routes
from attnkit.attribution.lm_mixing import (
    alti,
    alti_logit,
    attention_norm,
    direct_logit_attribution,
    logit_lens,
    value_zeroed_output,
)
from attnkit.hf.lm_decomposition import trace_lm
from attnkit.hf.loading import HFModelError
from hf_tiny import build_tiny

ENCODERS = ("bert", "distilbert", "roberta", "xlm-roberta")
DECODERS = ("gemma2", "gemma3_text", "olmo2", "phi3")
REF = 1e-5  # eager attention softmaxes in float32 even in a float64 model
TEXT = "the cat sat on the mat"


def _rms(family):
    """RMSNorm modules normalise in float32 even in a float64 model: what goes through one agrees to that."""
    return 1e-6 if family in DECODERS else 1e-10


@functools.cache
def _model(family: str, eager: bool = False):
    model, tok = build_tiny(family, attn_implementation="eager" if eager else None)
    return model.double(), torch.tensor(tok(TEXT)["input_ids"])


def _layers(model):
    base = model.base_model
    return (
        base.layers
        if hasattr(base, "layers")
        else base.encoder.layer
        if hasattr(base, "encoder")
        else base.transformer.layer
    )


def _modules(family, layer):
    """``(value module, W_O module, attention-output module, post-norm or None, Gemma gain)``."""
    if family == "distilbert":
        a = layer.attention
        return a.v_lin, a.out_lin, a.out_lin, layer.sa_layer_norm
    if family in ENCODERS:
        a = layer.attention
        return a.self.value, a.output.dense, a.output.dense, a.output.LayerNorm
    a = layer.self_attn
    post = None if family == "phi3" else layer.post_attention_layernorm
    return (a.qkv_proj if family == "phi3" else a.v_proj), a.o_proj, a.o_proj, post


def _value_rows(family, out, model):
    """``(N, Hkv·Dh)`` value vectors out of the value module's output ``(N, ·)`` (a view)."""
    if family == "phi3":
        cfg = model.config
        dh = cfg.hidden_size // cfg.num_attention_heads
        return out[:, (cfg.num_attention_heads + cfg.num_key_value_heads) * dh :]
    return out


def _linear_part(family, norm, z):
    """The norm after the attention as a linear map at its real input ``z (N, D)``: ``t (N, ..., D) ->``,
    written out by hand (LayerNorm: γ(t − mean t)/σ; RMSNorm: g t / rms, Gemma's g = 1 + w)."""
    if family in ENCODERS:
        sigma = (z.var(-1, unbiased=False) + norm.eps).sqrt()

        def lin(t, i):
            return norm.weight * (t - t.mean(-1, keepdim=True)) / sigma[i]

        return lin
    rms = (z.pow(2).mean(-1) + getattr(norm, "eps", getattr(norm, "variance_epsilon", None))).sqrt()
    gain = 1.0 + norm.weight if family.startswith("gemma") else norm.weight

    def lin(t, i):
        return gain * t / rms[i]

    return lin


@functools.cache
@torch.no_grad()
def _reference(family: str):
    """Per layer, from the eager model itself: ``(α, raw terms (N, N, D) by a per-head loop, mixing terms
    through the norm by hand, the bias's and β's part (N, D), the residual, the sub-block's result m,
    the layer output)``."""
    model, ids = _model(family, eager=True)
    layers = _layers(model)
    got = {}
    hooks = []
    for i, layer in enumerate(layers):
        vmod, _, amod, post = _modules(family, layer)
        hooks.append(vmod.register_forward_hook(lambda m, a, o, i=i: got.__setitem__(("v", i), o[0])))
        hooks.append(amod.register_forward_hook(lambda m, a, o, i=i: got.__setitem__(("a", i), o[0])))
        if post is not None:
            hooks.append(post.register_forward_hook(lambda m, a, o, i=i: got.__setitem__(("z", i), (a[0][0], o[0]))))
        hooks.append(layer.register_forward_hook(lambda m, a, o, i=i: got.__setitem__(("y", i), o[0])))
    kwargs = {} if family in ENCODERS else {"use_cache": False}
    out = model(ids[None], output_attentions=True, output_hidden_states=True, **kwargs)
    for h in hooks:
        h.remove()
    rows = []
    for i, layer in enumerate(layers):
        _, omod, _, post = _modules(family, layer)
        alpha = out.attentions[i][0]  # (H, N, N)
        nh, n = alpha.shape[0], alpha.shape[1]
        w, b = omod.weight, omod.bias  # (D, H·Dh)
        dh = w.shape[1] // nh
        v = _value_rows(family, got[("v", i)], model)
        v = v.reshape(n, -1, dh)  # (N, Hkv, Dh)
        group = nh // v.shape[1]
        r = out.hidden_states[i][0]
        terms = torch.zeros(n, n, w.shape[0], dtype=torch.float64)
        for h in range(nh):
            for a in range(n):
                for c in range(n):
                    terms[a, c] += alpha[h, a, c] * (w[:, h * dh : (h + 1) * dh] @ v[c, h // group])
        bias = torch.zeros(n, w.shape[0], dtype=torch.float64) + (0 if b is None else b)
        mix = terms.clone()
        if post is None:  # Phi-3: pre-norm
            m = r + got[("a", i)]
        else:
            z, normed = got[("z", i)]
            lin = _linear_part(family, post, z)
            if family in ENCODERS:  # m = LN(r + a): the residual goes through the norm too; β is no token's
                for a in range(n):
                    mix[a, a] += r[a]
                mix = torch.stack([lin(mix[a], a) for a in range(n)])
                bias = torch.stack([lin(bias[a], a) for a in range(n)]) + post.bias
                m = normed
            else:  # m = r + P(a)
                mix = torch.stack([lin(mix[a], a) for a in range(n)])
                bias = torch.stack([lin(bias[a], a) for a in range(n)])
                m = r + normed
        if family not in ENCODERS:
            for a in range(n):
                mix[a, a] += r[a]
        rows.append((alpha, terms, mix, bias, r, m, got[("y", i)]))
    return rows


def _beta(family, p):
    """The post-norm LayerNorm's β (no token's), 0 elsewhere."""
    if family not in ENCODERS:
        return 0.0
    return _modules(family, _layers(_model(family)[0])[p.layer])[3].bias


def _parts(family):
    model, ids = _model(family)
    parts = []
    trace_lm(model, ids, parts.append)
    return parts


@pytest.mark.parametrize("family", ENCODERS + DECODERS)
def test_the_terms_through_the_norm_add_up_to_the_models_own_outputs(family):
    parts = _parts(family)
    ref = _reference(family)
    assert len(parts) == len(ref) == 2
    for p, (alpha, terms, mix, bias, r, m, y) in zip(parts, ref):
        torch.testing.assert_close(p.weights, alpha, atol=REF, rtol=0)
        torch.testing.assert_close(p.terms(), terms, atol=REF, rtol=0)
        torch.testing.assert_close(attention_norm(p), terms.norm(dim=-1), atol=REF, rtol=0)
        torch.testing.assert_close(p.mixing_terms(), mix, atol=REF, rtol=0)
        torch.testing.assert_close(p.residual, r, atol=REF, rtol=0)
        torch.testing.assert_close(p.mid, m, atol=REF, rtol=0)
        torch.testing.assert_close(p.out, y, atol=REF, rtol=0)
        n = p.mid.shape[0]
        torch.testing.assert_close(
            torch.stack([p.bias_at(i) for i in range(n)]) + _beta(family, p), bias, atol=REF, rtol=0
        )
        torch.testing.assert_close(mix.sum(1) + bias, m, atol=REF, rtol=0)  # the hand-made split is the model's m
        # attnkit's own terms (float64 α) add up to the model's own sub-block result to float64 rounding
        # (to float32 rounding where an RMSNorm normalises in float32)
        summed = p.mixing_terms().sum(1) + torch.stack([p.bias_at(i) for i in range(n)]) + _beta(family, p)
        torch.testing.assert_close(summed, p.mid, atol=_rms(family), rtol=0)


def _alti_loop(mix):
    n = mix.shape[0]
    c = torch.zeros(n, n, dtype=torch.float64)
    for a in range(n):
        total = mix[a].sum(0)
        for b in range(n):
            c[a, b] = max(0.0, float(total.abs().sum() - (total - mix[a, b]).abs().sum()))
        c[a] /= c[a].sum()
    return c


@pytest.mark.parametrize("family", ENCODERS + DECODERS)
def test_alti_equals_a_loop_through_the_norms_by_hand(family):
    model, ids = _model(family)
    rolled = torch.eye(ids.shape[0], dtype=torch.float64)
    for _, _, mix, _, _, _, _ in _reference(family):
        rolled = _alti_loop(mix) @ rolled
    got = alti(model, ids)
    torch.testing.assert_close(got, rolled, atol=REF, rtol=0)
    if family in ENCODERS:  # bidirectional: later tokens contribute to earlier ones
        assert float(got.triu(1).sum()) > 0.01
    else:
        assert torch.all(got.triu(1) == 0)


@pytest.mark.parametrize("family", ENCODERS + DECODERS)
def test_value_zeroing_equals_rerunning_the_model_with_a_value_zeroed(family):
    model, ids = _model(family)
    layer = 1
    p = _parts(family)[layer]
    block = _layers(model)[layer]
    vmod = _modules(family, block)[0]
    j = ids.shape[0] // 2
    seen = {}

    def zero(m, a, o):
        o = o.clone()
        _value_rows(family, o[0], model)[j] = 0.0
        return o

    h1 = vmod.register_forward_hook(zero)
    h2 = block.register_forward_hook(lambda m, a, o: seen.__setitem__("y", o[0]))
    with torch.no_grad():
        model(ids[None])
    h1.remove()
    h2.remove()
    torch.testing.assert_close(value_zeroed_output(p, j), seen["y"], atol=_rms(family), rtol=0)
    assert float(1.0 - F.cosine_similarity(p.out, seen["y"], dim=-1).min()) > 1e-6  # the zeroing did something


@pytest.mark.parametrize("family", DECODERS)
def test_direct_logit_attribution_and_the_lens_read_the_models_own_logits(family):
    model, ids = _model(family)
    with torch.no_grad():
        logits = model(ids[None], use_cache=False).logits[0]
    cap = getattr(model.config, "final_logit_softcapping", None)
    uncapped = cap * torch.atanh(logits / cap) if cap else logits  # Gemma 2 caps its logits at 30
    d = direct_logit_attribution(model, ids, position=-1)
    assert d.token == int(logits[-1].argmax())
    assert d.logit == pytest.approx(float(uncapped[-1, d.token]), abs=1e-9)
    assert d.total() == pytest.approx(d.logit, abs=1e-6)
    a = alti_logit(model, ids, position=3)
    assert float(a.tokens.sum()) + a.biases == pytest.approx(a.logit, abs=1e-6)
    last = logit_lens(model, ids, k=3)[-1]
    torch.testing.assert_close(
        torch.tensor(last.logits, dtype=torch.float64), logits[-1].topk(3).values, atol=1e-9, rtol=0
    )


def test_decoder_methods_refuse_an_encoder_only_model_in_one_line():
    model, ids = _model("bert")
    for call, name in (
        (direct_logit_attribution, "direct logit attribution"),
        (alti_logit, "ALTI-Logit"),
        (logit_lens, "the logit lens"),
        (information_flow_routes, "information-flow routing"),
    ):
        with pytest.raises(HFModelError, match=f"bert is an encoder-only model.*: {name} is for decoder-only") as err:
            call(model, ids)
        assert "\n" not in str(err.value)
