"""The QK decomposition (:mod:`attnkit.attribution.qk_decomposition`): its terms add up to the scores the model
computed (float32, both shapes, grouped-query, with and without MLPs) and the scores' softmax is the map of the
model's own forward; in float64 every term equals a hand computation from the weights (the whole forward pass
and the linearised norm written out here); on the shipped ``attention-only-2l-en`` the induction head's score
on the token after the earlier copy comes from the previous-token head's output at that key."""

from __future__ import annotations

import math
import re

import pytest
import torch

from attnkit.attribution.qk_decomposition import qk_decomposition
from attnkit.models.language_model import LanguageModel, LanguageModelConfig

CASES = {
    "gpt2": {"shape": "gpt2"},
    "gpt2-attention-only": {"shape": "gpt2", "attention_only": True},
    "llama-gqa": {"shape": "llama", "n_kv_heads": 2},
    "llama-attention-only": {"shape": "llama", "attention_only": True},
}


def tiny_lm(seed: int = 0, **overrides) -> LanguageModel:
    """A random 3-layer LanguageModel (d_model 32, 4 heads), eval mode, weights ×3, norms' γ and β perturbed."""
    torch.manual_seed(seed)
    cfg = {"vocab_size": 100, "d_model": 32, "n_layers": 3, "n_heads": 4, "max_len": 32, **overrides}
    model = LanguageModel(LanguageModelConfig(**cfg)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" in name or name.startswith("norm"):
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
            else:
                p.mul_(3.0)
    return model


def _ids(n: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(4, 100, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("case", CASES)
def test_terms_add_up_to_the_models_scores_and_softmax_to_its_map(case):
    model = tiny_lm(**CASES[case])
    ids = _ids()
    maps = model(ids[None], need_weights=True).attention  # per layer (1, H, N, N)
    for layer, head, query in ((0, 1, 7), (2, 3, 11), (1, 0, 0)):
        d = qk_decomposition(model, ids, layer, head, query)
        assert d.terms.shape == (query + 1, len(d.parts), len(d.parts))
        assert d.terms.dtype == torch.float32
        torch.testing.assert_close(d.terms.sum((1, 2)), d.scores, atol=1e-5, rtol=1e-6)
        torch.testing.assert_close(d.scores.softmax(-1), maps[layer][0, head, query, : query + 1], atol=1e-6, rtol=0)
        torch.testing.assert_close(d.weights, maps[layer][0, head, query, : query + 1], atol=1e-6, rtol=0)
        torch.testing.assert_close(d.by_key_part().sum(1), d.scores, atol=1e-5, rtol=1e-6)
        torch.testing.assert_close(d.by_query_part().sum(1), d.scores, atol=1e-5, rtol=1e-6)
        torch.testing.assert_close(d.key_contrast().sum(1), d.scores - d.scores.mean(), atol=1e-5, rtol=1e-6)
    names = qk_decomposition(model, ids, 2, 0, 5).parts
    heads = [f"L{layer}H{h}" for layer in (1, 2) for h in range(1, 5)]
    mlps = [] if model.config.attention_only else ["MLP1", "MLP2"]
    gpt2 = model.config.shape == "gpt2"
    assert sorted(names) == sorted(["embedding"] + ["position"] * gpt2 + heads + mlps + ["bias"] * gpt2)


def _norm(norm, x):
    """The norm by hand: LayerNorm ``γ (x − μ)/√(σ² + ε) + β``, RMSNorm ``g x / √(mean x² + ε)``."""
    if isinstance(norm, torch.nn.LayerNorm):
        mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        return norm.weight * (x - mu) / torch.sqrt(var + norm.eps) + norm.bias
    return norm.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps)


def _rope(t, theta, head_dim):
    """RoPE by hand on a float64 ``t (..., N, Dh)``: angles ``p θ^(−2i/Dh)`` from the model's float32 inverse
    frequencies (made so, as in transformers; ``.double()`` carries them to float64, as here), dimension ``i``
    paired with ``i + Dh/2``."""
    n = t.shape[-2]
    inv = (1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)).double()
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv  # (N, Dh/2)
    ang = torch.cat((ang, ang), -1)
    cos, sin = ang.cos(), ang.sin()
    half = head_dim // 2
    rot = torch.cat((-t[..., half:], t[..., :half]), -1)
    return t * cos + rot * sin


def _hand_terms(model: LanguageModel, ids, layer: int, head: int, query: int):
    """``(names, terms (K, P, P))`` from the weights alone, float64, every step written out."""
    cfg = model.config
    nh, dh, hkv = cfg.n_heads, cfg.d_model // cfg.n_heads, cfg.kv_heads
    ids = ids[: query + 1]
    n = len(ids)
    names, parts = ["embedding"], [model.embed_tokens.weight[ids]]
    if cfg.shape == "gpt2":
        names.append("position")
        parts.append(model.embed_positions.weight[:n])
    bias = torch.zeros(n, cfg.d_model, dtype=torch.float64)
    causal = torch.ones(n, n, dtype=torch.bool).tril()

    def qkv(block, u):
        a = block.self_attn

        def proj(lin, heads):
            out = u @ lin.weight.T + (0 if lin.bias is None else lin.bias)
            return out.view(n, heads, dh).transpose(0, 1)  # (heads, N, Dh)

        q, k, v = proj(a.q_proj, nh), proj(a.k_proj, hkv), proj(a.v_proj, hkv)
        if cfg.shape == "llama":
            q, k = _rope(q, cfg.rope_theta, dh), _rope(k, cfg.rope_theta, dh)
        return q, k, v

    for i in range(layer):
        block = model.layers[i]
        x = sum(parts) + bias
        q, k, v = qkv(block, _norm(block.input_layernorm, x))
        w_o = block.self_attn.o_proj.weight
        for h in range(nh):
            g = h // (nh // hkv)
            s = (q[h] @ k[g].T / math.sqrt(dh)).masked_fill(~causal, -math.inf)
            names.append(f"L{i + 1}H{h + 1}")
            parts.append(s.softmax(-1) @ v[g] @ w_o[:, h * dh : (h + 1) * dh].T)  # (N, D)
        if block.self_attn.o_proj.bias is not None:
            bias = bias + block.self_attn.o_proj.bias
        if block.mlp is not None:
            mid = x + sum(parts[-nh:]) + (0 if block.self_attn.o_proj.bias is None else block.self_attn.o_proj.bias)
            names.append(f"MLP{i + 1}")
            parts.append(block.mlp(_norm(block.post_attention_layernorm, mid)))
    norm = model.layers[layer].input_layernorm
    if cfg.shape == "gpt2":
        names.append("bias")
        parts.append(bias)
    x = sum(parts)
    if isinstance(norm, torch.nn.LayerNorm):
        scale = norm.weight / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + norm.eps)
        lin = [scale * (p - p.mean(-1, keepdim=True)) for p in parts]
        lin[-1] = lin[-1] + norm.bias
    else:
        lin = [norm.weight * p / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps) for p in parts]
    a = model.layers[layer].self_attn
    g = head // (nh // hkv)
    w_q, w_k = a.q_proj.weight[head * dh : (head + 1) * dh], a.k_proj.weight[g * dh : (g + 1) * dh]
    qs = [p @ w_q.T for p in lin]  # P × (N, Dh)
    ks = [p @ w_k.T for p in lin]
    if a.q_proj.bias is not None:
        qs[-1] = qs[-1] + a.q_proj.bias[head * dh : (head + 1) * dh]
        ks[-1] = ks[-1] + a.k_proj.bias[g * dh : (g + 1) * dh]
    if cfg.shape == "llama":
        qs = [_rope(t, cfg.rope_theta, dh) for t in qs]
        ks = [_rope(t, cfg.rope_theta, dh) for t in ks]
    terms = torch.empty(n, len(parts), len(parts), dtype=torch.float64)
    for ai, qa in enumerate(qs):
        for bi, kb in enumerate(ks):
            terms[:, ai, bi] = (kb * qa[query]).sum(-1) / math.sqrt(dh)
    return names, terms


@pytest.mark.parametrize("case", ["gpt2", "llama-gqa"])
def test_terms_equal_a_float64_hand_computation(case):
    model = tiny_lm(seed=3, **CASES[case]).double()
    ids = _ids(10, seed=4)
    with torch.no_grad():
        for layer, head, query in ((2, 2, 9), (1, 3, 6)):
            d = qk_decomposition(model, ids, layer, head, query)
            names, terms = _hand_terms(model, ids, layer, head, query)
            assert d.parts == names and d.terms.dtype == torch.float64
            torch.testing.assert_close(d.terms, terms, atol=1e-10, rtol=0)
            torch.testing.assert_close(terms.sum((1, 2)), d.scores, atol=1e-10, rtol=0)


def test_shipped_induction_head_attends_because_of_the_previous_token_head_at_the_key():
    """``attention-only-2l-en``: at queries of the second copy of repeated random tokens, the best induction
    head attends to the token after the earlier copy, and the previous-token head's output at that key (the key
    side, summed over the query parts) gives most of that key's score and of its lead over the mean key."""
    from attnkit.models.induction import induction_scores, repeated_random_tokens
    from attnkit.service import open_model

    model = open_model("attention-only-2l-en").impl.model
    scores = induction_scores(model)
    layer, head, _ = scores.best_induction_head()  # 1-based
    prev = max(range(model.config.n_heads), key=lambda h: scores.previous_token[0][h]) + 1
    length = 20
    ids = repeated_random_tokens(model.config.vocab_size, length, 1, generator=torch.Generator().manual_seed(0))[0]
    for t in (3, 10, 17):
        d = qk_decomposition(model, ids, layer - 1, head - 1, length + t)
        key = t + 1  # the token after the earlier copy of the query's token
        assert int(d.weights.argmax()) == key
        part = d.parts.index(f"L1H{prev}")
        by, lead = d.by_key_part()[key], d.key_contrast()[key]
        assert float(by[part]) > 0.5 * float(d.scores[key])
        assert int(by.argmax()) == part and int(lead.argmax()) == part
        assert float(lead[part]) > 0.5 * float(d.scores[key] - d.scores.mean())


def test_bad_arguments_are_refused_naming_them():
    model = tiny_lm(n_layers=2)
    ids = _ids(6)
    for kwargs, word in (
        ({"layer": 2, "head": 0, "query": 3}, "layer must be an int in 0..1"),
        ({"layer": 0, "head": 4, "query": 3}, "head must be an int in 0..3"),
        ({"layer": 0, "head": 0, "query": 6}, "query must be an int in 0..5"),
        ({"layer": True, "head": 0, "query": 3}, "layer"),
    ):
        with pytest.raises(ValueError, match=re.escape(word)):
            qk_decomposition(model, ids, **kwargs)
    with pytest.raises(ValueError, match="ids must be"):
        qk_decomposition(model, ids[None].repeat(2, 1), 0, 0, 1)
    with pytest.raises(TypeError, match="model must be an attnkit LanguageModel"):
        qk_decomposition(torch.nn.Linear(2, 2), ids, 0, 0, 1)
    d = qk_decomposition(model, ids[None], 1, 0, 4)
    with pytest.raises(ValueError, match=re.escape("key must be a position in 0..4")):
        d.top_terms(5)
    top = d.top_terms(4, 3)
    assert len(top) == 3 and top[0][2] == float(d.terms[4].max()) and top[0][2] >= top[2][2]
    assert d.to_dict()["layer"] == 2 and len(d.to_dict()["by_key_part"]) == 5
