"""Information-flow routes (Ferrando & Voita 2024) on tiny decoder-only models: the importances at each
node with the residual's share sum to 1, τ = 0 keeps every edge, each edge's weight equals a float64
loop over the model's own terms, and a GPT-2 built by hand with a head that attends to the previous
token routes the prediction through that edge."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.attribution.information_flow import FlowLayer, information_flow_routes, information_flow_stream
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


def _edges(g):
    return {(e.layer, e.head, e.source, e.target): e.weight for e in g.edges}


@pytest.mark.parametrize("family", ["gpt2", "olmo2"])
def test_the_top_down_graph_is_the_dense_graph_walked_from_the_chosen_position(family):
    """The reference walks the τ = 0 graph (every position, every edge; checked against a float64 loop
    above) from the top with a plain loop, keeping edges ≥ τ; the routes must be exactly that."""
    model, ids = _model(family)
    dense = information_flow_routes(model, ids, threshold=0.0)
    tau = 0.08
    g = information_flow_routes(model, ids, threshold=tau)
    weights = _edges(dense)
    mlp = {(m.layer, m.position): m.weight for m in dense.mlp_nodes}
    expected_edges, expected_nodes, active = {}, {}, {ids.shape[0] - 1}
    for layer in range(dense.n_layers - 1, -1, -1):
        below = set(active)
        for (lay, h, j, i), w in weights.items():
            if lay == layer and i in active and w >= tau:  # the residual's edge too: only ≥ τ
                expected_edges[(lay, h, j, i)] = w
                below.add(j)
        expected_nodes.update({(layer, i): mlp[(layer, i)] for i in active if mlp[(layer, i)] >= tau})
        active = below
    got = _edges(g)
    assert got.keys() == expected_edges.keys()
    assert all(got[key] == pytest.approx(w, abs=1e-12) for key, w in expected_edges.items())
    assert {(m.layer, m.position): m.weight for m in g.mlp_nodes} == pytest.approx(expected_nodes, abs=1e-12)
    assert len(got) < len(weights)  # τ prunes


def test_a_residual_below_tau_is_no_edge_but_still_carries_its_position_down():
    """The docstring's rule: only edges of at least τ are kept, the residual's included; a position whose
    residual share is below τ is still walked at the layer below (its share kept in ``residual_shares``)."""
    model, ids = _model("gpt2")
    dense = information_flow_routes(model, ids, threshold=0.0)
    n = ids.shape[0]
    last = dense.n_layers - 1
    tau = dense.residual_shares[(last, n - 1)] + 1e-9  # the predicting position's residual falls just below τ
    g = information_flow_routes(model, ids, threshold=tau)
    assert all(e.weight >= tau for e in g.edges)
    assert (last, None, n - 1, n - 1) not in _edges(g)
    assert g.residual_shares[(last, n - 1)] == pytest.approx(dense.residual_shares[(last, n - 1)], abs=1e-12)
    assert (last - 1, n - 1) in g.residual_shares  # still reached one layer down


def test_chunked_importances_equal_the_unchunked(monkeypatch):
    import attnkit.attribution.information_flow as flow

    model, ids = _model("gemma2")  # RMSNorm after the attention: each term goes through its linear part
    whole = _edges(information_flow_routes(model, ids, threshold=0.0))
    monkeypatch.setattr(flow, "_CHUNK", 3 * 32)  # a few keys of one target at a time
    chunked = _edges(information_flow_routes(model, ids, threshold=0.0))
    assert chunked.keys() == whole.keys()
    assert all(chunked[k] == pytest.approx(w, abs=1e-12) for k, w in whole.items())


@torch.no_grad()
def test_edge_weights_through_a_norm_after_the_attention_equal_a_loop():
    """OLMo 2 (m = r + P(a)): each head's term reaches the residual through P's linear part, g ⊙ t / rms(a_i)."""
    model, ids = _model("olmo2")
    n = ids.shape[0]
    g = information_flow_routes(model, ids, threshold=0.0)
    block = model.model.layers[1]
    seen = {}
    hooks = [
        block.self_attn.v_proj.register_forward_hook(lambda m, a, o: seen.__setitem__("v", o[0])),
        block.post_attention_layernorm.register_forward_hook(lambda m, a, o: seen.__setitem__("a", (a[0][0], o[0]))),
    ]
    eager, _ = build_tiny("olmo2", attn_implementation="eager")
    eager = eager.double()
    out = model(ids[None], output_hidden_states=True, use_cache=False)
    for h in hooks:
        h.remove()
    alpha = eager(ids[None], output_attentions=True, use_cache=False).attentions[1][0]  # (H, N, N), same weights
    r = out.hidden_states[1][0]
    a, normed = seen["a"]
    i = n - 1
    rms = (a[i].pow(2).mean() + block.post_attention_layernorm.variance_epsilon).sqrt()
    gain = block.post_attention_layernorm.weight
    w_o = block.self_attn.o_proj.weight  # (D, H·Dh)
    dh = w_o.shape[1] // alpha.shape[0]
    v = seen["v"].view(n, -1, dh)  # (N, Hkv, Dh)
    group = alpha.shape[0] // v.shape[1]
    mid = r[i] + normed[i]
    terms = {
        (h, j): gain * (alpha[h, i, j] * (w_o[:, h * dh : (h + 1) * dh] @ v[j, h // group])) / rms
        for h in range(alpha.shape[0])
        for j in range(i + 1)
    }

    def prox(t):
        return max(0.0, float(mid.abs().sum() - (mid - t).abs().sum()))

    z = sum(prox(t) for t in terms.values()) + prox(r[i])
    got = {(e.head, e.source): e.weight for e in g.edges if e.layer == 1 and e.target == i}
    for key, t in terms.items():
        assert got[key] == pytest.approx(prox(t) / z, abs=1e-5)  # eager α is softmaxed in float32
    assert got[(None, i)] == pytest.approx(prox(r[i]) / z, abs=1e-5)


def test_a_block_the_replay_does_not_reproduce_is_refused():
    from attnkit.hf.loading import HFModelError

    model, ids = _model("llama")
    model.model.layers[0].register_forward_hook(lambda m, a, o: o + 0.5)  # something the replay does not know
    with pytest.raises(HFModelError, match=r"replaying layer 1 .* does not give its output") as err:
        information_flow_routes(model, ids)
    assert "\n" not in str(err.value)


def test_the_stream_gives_each_layer_before_the_next_is_replayed_and_collects_to_the_graph(monkeypatch):
    """The stream hands over the last layer's part after one replay (a page draws it while the rest runs),
    then one part per layer, top-down; its parts' edges and nodes, in order, are the graph's."""
    from attnkit.hf.lm_tracer import HFBlockTracer

    model, ids = _model("gpt2")
    replayed = []
    real = HFBlockTracer.layer_rows
    monkeypatch.setattr(
        HFBlockTracer, "layer_rows", lambda self, rec, i, keys: replayed.append(i) or real(self, rec, i, keys)
    )
    stream = information_flow_stream(model, ids, threshold=0.02)
    assert replayed == []  # nothing runs before the first part is asked for
    first = next(stream)
    layers = model.config.num_hidden_layers  # GPT2Config names it so as well
    assert isinstance(first, FlowLayer) and first.layer == layers - 1 and replayed == [layers - 1]
    *parts, graph = [first, *stream]
    assert [p.layer for p in parts] == list(range(layers - 1, -1, -1)) and replayed == [p.layer for p in parts]
    assert [e for p in parts for e in p.edges] == graph.edges
    assert [m for p in parts for m in p.mlp_nodes] == graph.mlp_nodes
    assert any(e.head is not None for e in graph.edges)


@torch.no_grad()
def _dense_routes(model, ids, tau):
    """The routes computed densely, as before the row replay: every layer replayed whole (its full
    ``(H, N, N)`` map, :func:`replay_layer`), every position's importances from a plain loop over heads
    and keys in float64, then the top-down walk from the last position keeping edges ≥ τ."""
    from attnkit.hf.lm_decomposition import record_lm, replay_layer

    rec = record_lm(model, ids)
    n = ids.shape[0]
    edges, nodes, active = {}, {}, {n - 1}
    for layer in range(rec.n_layers - 1, -1, -1):
        p = replay_layer(rec, layer)
        below = set(active)
        for i in sorted(active):

            def prox(t, s=p.mid[i]):
                return max(0.0, float(s.abs().sum() - (s - t).abs().sum()))

            terms = {}
            for h in range(p.weights.shape[0]):
                for j in range(i + 1):
                    t = p.weights[h, i, j] * (p.head_values[h, j] @ p.w_o[h])
                    if p.scale is not None:
                        t = (t - t.mean() if p.center else t) * p.scale[i]
                    terms[(h, j)] = (t, float(p.weights[h, i, j]))
            z = sum(prox(t) for t, _ in terms.values()) + prox(p.residual[i])
            for (h, j), (t, a) in terms.items():
                if prox(t) / z >= tau and a > 0:
                    edges[(layer, h, j, i)] = prox(t) / z
                    below.add(j)
            if prox(p.residual[i]) / z >= tau:  # the position itself stays on the graph (below = active)
                edges[(layer, None, i, i)] = prox(p.residual[i]) / z
            m, o = p.mid[i], p.out[i]
            rm = [max(0.0, float(o.abs().sum() - (o - t).abs().sum())) for t in (m, o - m)]
            if rm[1] / sum(rm) >= tau:
                nodes[(layer, i)] = rm[1] / sum(rm)
        active = below
    return edges, nodes, int(rec.trace.logits[n - 1].argmax())


@pytest.mark.parametrize(
    ("family", "attn", "tau"),
    [("gpt2", None, 0.005), ("llama", None, 0.0), ("gpt_neox", None, 0.005), ("mistral", "eager", 0.005)],
)
def test_the_row_replay_equals_the_dense_computation(family, attn, tau, monkeypatch):
    """GPT-2, Llama 3's grouped-query attention, GPT-NeoX's parallel block and Mistral's sliding window
    (under eager attention: the map is taken whole, its rows read): the routes from the reached rows only,
    in chunks of a few rows, equal the dense computation's (edges, weights, MLP nodes, the predicted token)."""
    import attnkit.attribution.information_flow as flow

    model, tok = build_tiny(family, attn_implementation=attn)
    model = model.double()
    ids = torch.tensor(tok(TEXT)["input_ids"])
    edges, nodes, token = _dense_routes(model, ids, tau)
    monkeypatch.setattr(flow, "_ROWS", 4 * 3 * ids.shape[0])  # about 3 rows of α per chunk
    g = information_flow_routes(model, ids, threshold=tau)
    assert g.token == token
    got = _edges(g)
    assert got.keys() == edges.keys() and len({i for (_, _, _, i) in got}) > 3  # the walk reached several rows
    assert all(got[key] == pytest.approx(w, abs=1e-9) for key, w in edges.items())
    assert {(m.layer, m.position): m.weight for m in g.mlp_nodes} == pytest.approx(nodes, abs=1e-9)


@pytest.mark.parametrize("family", ["gpt2", "gemma2"])
def test_the_recording_keeps_the_chosen_positions_logits_only_and_they_are_the_models(family):
    """Gemma 2 soft-caps its final logits: the one row kept is still the model's own output there."""
    from attnkit.hf.lm_decomposition import record_lm

    model, ids = _model(family)
    with torch.no_grad():
        full = model(ids[None], use_cache=False).logits[0]  # (N, V)
    rec = record_lm(model, ids, logits_at=3)
    assert rec.trace.logits is None and rec.position_logits.shape == full[3].shape
    torch.testing.assert_close(rec.position_logits, full[3], atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="logits_at"):
        record_lm(model, ids, logits_at=ids.shape[0])


def test_a_model_whose_attention_bypasses_the_interface_is_refused_in_one_line():
    """The row replay takes its queries and keys at the attention interface: a module that never calls it
    (a remote-code model) is refused, never walked with weights that were not the model's."""
    from attnkit.hf.capture import UntraceableModelError
    from hf_tiny import bypass_interface

    model, ids = _model("llama")
    bypass_interface(model)
    with pytest.raises(UntraceableModelError, match="do not call transformers' attention interface") as err:
        information_flow_routes(model, ids)
    assert "\n" not in str(err.value)
