"""Gradient-weighted attention relevance (:mod:`attnkit.attribution.attention_relevance`): the composition rule
against a hand computation on two layers, the gradients against finite differences of the model's own score,
and the method through every front end."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.attribution.attention_relevance import compose


def test_the_rule_on_two_layers_by_hand():
    """Two layers, two heads, three tokens: Ā_l = mean_h max(0, G ⊙ A), R = (I + Ā_2)(I + Ā_1), written out."""
    a1 = torch.tensor([[[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]], [[1, 0, 0], [0.9, 0.1, 0], [0.6, 0.2, 0.2]]])
    g1 = torch.tensor([[[0.0, 0, 0], [1.0, -2.0, 0], [0.5, 1.0, -1.0]], [[0, 0, 0], [2.0, 1.0, 0], [-1.0, 3.0, 1.0]]])
    a2 = torch.tensor([[[1.0, 0, 0], [0.3, 0.7, 0], [0.1, 0.1, 0.8]], [[1, 0, 0], [0.6, 0.4, 0], [0.4, 0.4, 0.2]]])
    g2 = torch.tensor([[[0.0, 0, 0], [0.0, 1.0, 0], [2.0, 0.0, 1.0]], [[0, 0, 0], [-1.0, 1.0, 0], [1.0, 1.0, -4.0]]])
    bar1 = [[0.0, 0, 0], [(0.5 + 1.8) / 2, (0 + 0.1) / 2, 0], [(0.1 + 0) / 2, (0.3 + 0.6) / 2, (0 + 0.2) / 2]]
    bar2 = [[0.0, 0, 0], [(0 + 0) / 2, (0.7 + 0.4) / 2, 0], [(0.2 + 0.4) / 2, (0 + 0.4) / 2, (0.8 + 0) / 2]]
    eye = torch.eye(3, dtype=torch.float64)
    expected = (eye + torch.tensor(bar2, dtype=torch.float64)) @ (eye + torch.tensor(bar1, dtype=torch.float64))
    torch.testing.assert_close(compose([a1, a2], [g1, g2]), expected)


@pytest.fixture(scope="module")
def lm():
    from attnkit.service import open_model

    return open_model("lm-4l-en")


def test_the_gradients_are_the_models_own_by_finite_differences(lm):
    """∂ log p / ∂A at one entry of one layer: the score with that weight nudged (the block's output recomputed from
    the nudged weights by a hook) against the gradient the method takes."""
    from attnkit.attention.causal_self_attention import repeat_kv

    sa = lm.impl
    ids = [1, *sa.tokenizer.encode("In the beginning God")]
    logits, maps = sa.attention_with_grad(ids)
    target = int(logits[-1].argmax())
    grads = torch.autograd.grad(torch.log_softmax(logits[-1].double(), -1)[target], maps)
    layer, h, i, j = 1, 2, len(ids) - 1, 1
    attn = sa.model.layers[layer].self_attn
    eps = 1e-3

    def score(delta: float) -> float:
        real = attn._attend

        def nudged(q, k, v, past, need_weights):  # the weights nudged, the context recomputed from them
            _, w = real(q, k, v, past, True)
            w2 = w.clone()
            w2[0, h, i, j] += delta
            return w2 @ repeat_kv(v, attn.groups), w2

        attn._attend = nudged
        try:
            with torch.no_grad():
                z = sa.model(torch.tensor([ids]), need_weights=True).logits[0, -1].double()
        finally:
            del attn._attend
        return float(torch.log_softmax(z, -1)[target])

    numeric = (score(eps) - score(-eps)) / (2 * eps)
    assert float(grads[layer][0, h, i, j]) == pytest.approx(numeric, rel=2e-2, abs=1e-4)


def test_through_the_cli_and_the_registry(lm, capsys):
    from attnkit.attribution.generation import row_methods
    from attnkit.cli import main
    from attnkit.method_registry import REGISTRY

    assert "attention_relevance" in row_methods() and REGISTRY["attention_relevance"].needs_gradients
    text = "In the beginning God created the heaven and the earth."
    capsys.readouterr()
    main(["explain", "--model", "lm-4l-en", "--text", text, "--method", "attention_relevance", "--json"])
    out = json.loads(capsys.readouterr().out)
    scores = torch.tensor(out["scores"])
    assert out["method"] == "attention_relevance" and scores.shape[0] == len(out["target"])
    assert float(torch.triu(scores, 1).abs().max()) == 0.0  # nothing from a later token
