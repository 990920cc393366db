"""Attention flow (:mod:`attnkit.attribution.attention_flow`) against a plain max-flow written here (Edmonds–Karp
on a dense float64 capacity matrix, breadth-first augmenting paths), the one-layer case by hand, and every
front end that reads the registry."""

from __future__ import annotations

import json
from collections import deque

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.attribution.attention_flow import flow_matrix, residual_attention


def _edmonds_karp(cap: list[list[float]], s: int, t: int) -> float:
    """The maximum flow from ``s`` to ``t`` of a dense capacity matrix (float64), augmenting along shortest paths."""
    n = len(cap)
    res = [row[:] for row in cap]
    total = 0.0
    while True:
        parent = [-1] * n
        parent[s] = s
        queue = deque([s])
        while queue and parent[t] < 0:
            u = queue.popleft()
            for v in range(n):
                if parent[v] < 0 and res[u][v] > 1e-15:
                    parent[v] = u
                    queue.append(v)
        if parent[t] < 0:
            return total
        push, v = float("inf"), t
        while v != s:
            push, v = min(push, res[parent[v]][v]), parent[v]
        v = t
        while v != s:
            u = parent[v]
            res[u][v] -= push
            res[v][u] += push
            v = u
        total += push


def _reference(attention: torch.Tensor) -> torch.Tensor:
    """``(N, N)``: every (top position, input token) flow by :func:`_edmonds_karp` over the layered graph."""
    hat = residual_attention(attention.double())
    layers, n = hat.shape[0], hat.shape[-1]
    size = (layers + 1) * n
    cap = [[0.0] * size for _ in range(size)]
    for layer in range(layers):
        for i in range(n):
            for j in range(n):
                cap[layer * n + j][(layer + 1) * n + i] = float(hat[layer, i, j])
    return torch.tensor(
        [[_edmonds_karp(cap, j, layers * n + i) for j in range(n)] for i in range(n)], dtype=torch.float64
    )


def _causal_attention(layers: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(layers, n, n, generator=g, dtype=torch.float64) * 2
    logits = logits.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    return logits.softmax(-1)  # (L, N, N), rows sum to 1, zero above the diagonal


@settings(max_examples=12, deadline=None)
@given(layers=st.integers(1, 3), n=st.integers(2, 5), seed=st.integers(0, 10_000))
def test_the_flow_equals_a_plain_max_flow(layers, n, seed):
    attention = _causal_attention(layers, n, seed)
    torch.testing.assert_close(flow_matrix(attention), _reference(attention), atol=1e-7, rtol=0)


def test_one_layers_flow_is_the_edge_itself_and_every_flow_lies_in_0_1():
    attention = _causal_attention(1, 6, 3)
    torch.testing.assert_close(flow_matrix(attention), residual_attention(attention)[0], atol=1e-8, rtol=0)
    deep = flow_matrix(_causal_attention(4, 6, 4))
    assert float(deep.min()) >= 0.0 and float(deep.max()) <= 1.0 + 1e-9
    assert float(torch.triu(deep, 1).abs().max()) == 0.0  # a causal model: no flow from later tokens


def test_a_bidirectional_stack_and_bad_shapes():
    g = torch.Generator().manual_seed(0)
    attention = torch.randn(2, 4, 4, generator=g, dtype=torch.float64).softmax(-1)  # an encoder: every key
    torch.testing.assert_close(flow_matrix(attention), _reference(attention), atol=1e-7, rtol=0)
    with pytest.raises(ValueError, match="attention must be"):
        flow_matrix(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="rows must be positions"):
        flow_matrix(attention, rows=[4])


def test_every_front_end_has_it_from_the_registry(capsys):
    """The CLI, the method lists of the explorer and the docs' table take attention flow from its registry entry."""
    from attnkit.attribution.generation import row_methods
    from attnkit.cli import main
    from attnkit.explorer.routes.self_attention import HEAVY_METHODS

    assert "attention_flow" in row_methods() and "attention_flow" in HEAVY_METHODS
    capsys.readouterr()
    text = "In the beginning God created the heaven and the earth."
    main(["explain", "--model", "lm-4l-en", "--text", text, "--method", "attention_flow", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "attention_flow"
    scores = torch.tensor(out["scores"])
    assert scores.shape[0] == len(out["target"]) and torch.allclose(scores.sum(-1), torch.ones(len(scores)), atol=1e-4)
    capsys.readouterr()
    assert main(["explain", "--model", "lm-4l-en", "--text", text, "--method", "attention_flow", "--layer", "2"]) == 2
    assert "composes every layer and head" in capsys.readouterr().err


def _reference_readout(attention: torch.Tensor, readout: torch.Tensor) -> torch.Tensor:
    """``(T, N)``: a translator's flows by :func:`_edmonds_karp` over the encoder's layered graph and one
    more layer of edges, from the top to each target, of capacity ``readout[t, j]``."""
    hat = residual_attention(attention.double())
    layers, n, targets = hat.shape[0], hat.shape[-1], readout.shape[0]
    size = (layers + 1) * n + targets
    cap = [[0.0] * size for _ in range(size)]
    for layer in range(layers):
        for i in range(n):
            for j in range(n):
                cap[layer * n + j][(layer + 1) * n + i] = float(hat[layer, i, j])
    for t in range(targets):
        for j in range(n):
            cap[layers * n + j][(layers + 1) * n + t] = float(readout[t, j])
    sinks = (layers + 1) * n
    return torch.tensor(
        [[_edmonds_karp(cap, j, sinks + t) for j in range(n)] for t in range(targets)], dtype=torch.float64
    )


@settings(max_examples=10, deadline=None)
@given(layers=st.integers(1, 3), n=st.integers(2, 5), targets=st.integers(1, 4), seed=st.integers(0, 10_000))
def test_a_translators_flow_equals_a_plain_max_flow(layers, n, targets, seed):
    g = torch.Generator().manual_seed(seed)
    encoder = (torch.randn(layers, n, n, generator=g, dtype=torch.float64) * 2).softmax(-1)  # every key
    cross = (torch.randn(targets, n, generator=g, dtype=torch.float64) * 2).softmax(-1)
    flows = flow_matrix(encoder, readout=cross)
    torch.testing.assert_close(flows, _reference_readout(encoder, cross), atol=1e-7, rtol=0)
    torch.testing.assert_close(flow_matrix(encoder, [targets - 1], readout=cross), flows[-1:], atol=0, rtol=0)


def test_one_encoder_layers_flow_by_hand():
    """One encoder layer: the paths from source j to target t are j -> k -> t, one per k, disjoint, so the flow
    is sum_k min(Â[k, j], C[t, k])."""
    g = torch.Generator().manual_seed(5)
    encoder = torch.randn(1, 5, 5, generator=g, dtype=torch.float64).softmax(-1)
    cross = torch.randn(3, 5, generator=g, dtype=torch.float64).softmax(-1)
    hat = residual_attention(encoder)[0]  # (5, 5): [k, j]
    by_hand = torch.minimum(hat[None, :, :], cross[:, :, None]).sum(1)  # (3, 5): sum over k
    torch.testing.assert_close(flow_matrix(encoder, readout=cross), by_hand, atol=1e-8, rtol=0)
    with pytest.raises(ValueError, match="readout must be"):
        flow_matrix(encoder, readout=cross[:, :4])


def test_a_translators_rows_are_the_flow_of_its_own_maps(capsys):
    """attnkit's Transformer: explain(..., "attention_flow") is the flow of the model's own encoder maps and
    last cross-attention, heads averaged; the CLI has it; an RNN is refused naming what it lacks."""
    from attnkit.attribution import explain, methods_for
    from attnkit.attribution.forced import forced_translation
    from attnkit.cli import main
    from attnkit.tasks.translation import Translator

    tr = Translator.load("transformer-es-en")
    source, target = "Jesús lloró.", "Jesus wept."
    att = explain(tr, source, target=target, method="attention_flow")
    pair = forced_translation(tr, source, target)
    with torch.no_grad():
        maps = tr.model.attention_maps(pair.src[None], torch.tensor([len(pair.src)]), pair.tgt_in[None])
    want = flow_matrix(maps.enc_self[0].double().mean(1), readout=maps.cross[0, -1].double().mean(0))
    torch.testing.assert_close(att.scores.double(), want / want.sum(-1, keepdim=True), atol=1e-5, rtol=0)
    layer1 = explain(tr, source, target=target, method="attention_flow", layer=1)
    assert not torch.allclose(layer1.scores, att.scores)  # the cross-attention of layer 1 read instead
    assert "attention_flow" in methods_for(tr) and "attention_flow" not in methods_for(
        Translator.load("rnnsearch-es-en")
    )
    capsys.readouterr()
    assert main(["explain", "--model", "rnnsearch-es-en", "--method", "attention_flow", source]) == 2
    assert "needs a Transformer (its encoder's self-attention layers are composed)" in capsys.readouterr().err
    assert main(["explain", "--model", "transformer-es-en", "--method", "attention_flow", "--json", source]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "attention_flow" and len(out["scores"][0]) == len(out["source"])
