"""Information-flow routes (Ferrando & Voita 2024) on tiny decoder-only models: the importances at each
node with the residual's share sum to 1, τ = 0 keeps every edge, each edge's weight equals a float64
loop over the model's own terms, and a GPT-2 built by hand with a head that attends to the previous
token routes the prediction through that edge."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.attribution.information_flow import information_flow_routes
from hf_tiny import build_tiny

TEXT = "the cat sat on the mat"


def _model(family):
    model, tok = build_tiny(family)
    return model.double(), torch.tensor(tok(TEXT)["input_ids"])


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_tau_zero_keeps_every_edge_and_each_nodes_importances_sum_to_one(family):
    model, ids = _model(family)
    n = ids.shape[0]
    g = information_flow_routes(model, ids, threshold=0.0)
    heads = g.n_heads
    for layer in range(g.n_layers):
        targets = {e.target for e in g.edges if e.layer == layer}
        # top-down: the last layer's only node is the chosen position; with τ = 0 it reaches every earlier one
        assert targets == ({n - 1} if layer == g.n_layers - 1 else set(range(n)))
        for i in targets:
            into = [e for e in g.edges if e.layer == layer and e.target == i]
            attn = [e for e in into if e.head is not None]
            # every head and every earlier-or-same key (causal), plus the residual
            assert {(e.head, e.source) for e in attn} == {(h, j) for h in range(heads) for j in range(i + 1)}
            assert sum(e.weight for e in into) == pytest.approx(1.0, abs=1e-12)
    assert len(g.mlp_nodes) == n + 1
    assert g.lens[-1].rank == 1 and g.lens[-1].top[0] == g.token
    out = json.loads(json.dumps(g.to_dict()))
    assert out["position"] == n and min(e["layer"] for e in out["edges"]) == 1
    assert min(e["head"] for e in out["edges"] if e["head"] is not None) == 1


@torch.no_grad()
def test_edge_weights_equal_a_float64_loop_over_the_terms():
    model, ids = _model("gpt2")
    n = ids.shape[0]
    g = information_flow_routes(model, ids, threshold=0.0)
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    block = model.transformer.h[1]
    x = out.hidden_states[1][0]  # layer 2's input
    u = block.ln_1(x)
    d, nh = 32, 4
    v = block.attn.c_attn(u)[:, 2 * d :].view(n, nh, 8)
    w = block.attn.c_proj.weight  # (H·Dh, D)
    i = n - 1
    terms = {}
    # the model's own attention weights from an eager copy of the same seed
    eager, _ = build_tiny("gpt2", attn_implementation="eager")
    with torch.no_grad():
        a = eager.double()(ids[None], output_attentions=True).attentions[1][0]  # (H, N, N)
    for h in range(nh):
        for j in range(i + 1):
            terms[(h, j)] = a[h, i, j] * (v[j, h] @ w[h * 8 : (h + 1) * 8])
    mid = x[i] + sum(terms.values()) + block.attn.c_proj.bias

    def prox(t):
        return max(0.0, float(mid.abs().sum() - (mid - t).abs().sum()))

    z = sum(prox(t) for t in terms.values()) + prox(x[i])
    got = {(e.head, e.source): e.weight for e in g.edges if e.layer == 1 and e.target == i}
    for key, t in terms.items():
        assert got[key] == pytest.approx(prox(t) / z, abs=1e-5)  # eager α is softmaxed in float32
    assert got[(None, i)] == pytest.approx(prox(x[i]) / z, abs=1e-5)


def _previous_token_gpt2():
    """One layer; positions one-hot (×10) in dims 0..7, tokens tiny; head 1's query at i matches the key
    at i − 1; its values read the position dims and its output writes them ×50 to dims 16..23; the other
    heads and the MLP write nothing."""
    model, tok = build_tiny("gpt2")
    cfg = model.config
    model = type(model)(type(cfg)(**{**cfg.to_dict(), "n_layer": 1})).double().eval()
    d = 32
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.transformer.wte.weight.normal_(0, 0.01)
        model.transformer.wpe.weight[:8, :8] = 10 * torch.eye(8, dtype=torch.float64)
        for ln in (model.transformer.h[0].ln_1, model.transformer.h[0].ln_2, model.transformer.ln_f):
            ln.weight.fill_(1.0)
        w = model.transformer.h[0].attn.c_attn.weight  # (D, 3D): q | k | v, head 1 = columns 0..7 of each
        for a in range(1, 8):
            w[a, a - 1] = 5.0  # q_i points at position i − 1
        w[:8, d : d + 8] = 5 * torch.eye(8, dtype=torch.float64)  # k_j = position j
        w[:8, 2 * d : 2 * d + 8] = torch.eye(8, dtype=torch.float64)  # v_j = position j
        model.transformer.h[0].attn.c_proj.weight[:8, 16:24] = 50 * torch.eye(8, dtype=torch.float64)
        model.lm_head.weight.normal_(0, 1.0)
    return model, torch.tensor(tok(TEXT)["input_ids"][:8])


def test_a_previous_token_head_routes_the_prediction_through_its_edge():
    model, ids = _previous_token_gpt2()
    n = ids.shape[0]
    g = information_flow_routes(model, ids, threshold=0.2)
    attn = [e for e in g.edges if e.head is not None]
    assert attn and all(e.head == 0 for e in attn)
    best = max(attn, key=lambda e: e.weight)
    assert (best.layer, best.head, best.source, best.target) == (0, 0, n - 2, n - 1)
    assert best.weight > 0.5
    assert g.mlp_nodes == []  # the MLP writes nothing


def test_bad_arguments_name_themselves():
    model, ids = _model("gpt2")
    with pytest.raises(ValueError, match="threshold"):
        information_flow_routes(model, ids, threshold=2)
    with pytest.raises(ValueError, match="position"):
        information_flow_routes(model, ids, position=50)
    with pytest.raises(ValueError, match="pieces"):
        information_flow_routes(model, ids, pieces=["a"])
