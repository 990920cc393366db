"""attnkit's language model traced natively (:class:`attnkit.models.language_model_trace.LanguageModelTracer`):
every decomposition read from its own blocks equals the same decomposition of its stock ``transformers`` twin
(:func:`attnkit.deploy.hf_lm_export.hf_language_model`, the model ``attnkit export --format huggingface``
writes), which the Hugging Face tracer reads through ``transformers``' own attention: two independent paths
to the same numbers. Tiny random models in both shapes (GQA, attention-only, tied and untied), their weights
scaled up and their norms moved off ``γ = 1`` so that every part shows."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnkit.attribution.information_flow import information_flow_routes
from attnkit.attribution.lm_methods import head_details, layer_maps, lens_at, mixing_rows
from attnkit.attribution.lm_mixing import alti_logit, direct_logit_attribution, logit_lens
from attnkit.attribution.tracers import block_tracer
from test_hf_lm_export import CONFIGS, tiny_lm
from tiny import es_en_tokenizer

TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module", params=list(CONFIGS))
def pair(request):
    """``(attnkit model, its transformers twin, ids)`` per configuration."""
    from attnkit.deploy.hf_lm_export import hf_language_model

    overrides, _ = CONFIGS[request.param]
    model = tiny_lm(7, **overrides)
    twin = hf_language_model(model, es_en_tokenizer())
    ids = torch.randint(4, 8000, (12,), generator=torch.Generator().manual_seed(1))
    ids[0] = 1  # <s>
    return model, twin, ids


def test_the_native_tracer_is_attnkits_own(pair):
    from attnkit.hf.lm_tracer import HFBlockTracer
    from attnkit.models.language_model_trace import LanguageModelTracer

    model, twin, _ = pair
    assert isinstance(block_tracer(model), LanguageModelTracer) and isinstance(block_tracer(twin), HFBlockTracer)
    assert block_tracer(model).n_layers == block_tracer(twin).n_layers == model.config.n_layers


@pytest.mark.parametrize("method", ["attention_norm", "value_zeroing", "alti"])
def test_every_layers_mixing_map_equals_the_twins(pair, method):
    model, twin, ids = pair
    mine, theirs = layer_maps(model, ids.tolist(), method), layer_maps(twin, ids.tolist(), method)
    assert mine.shape == (model.config.n_layers, 12, 12)
    torch.testing.assert_close(mine, theirs, **TOL)


@pytest.mark.parametrize("method", ["attention_norm", "value_zeroing", "alti", "alti_logit"])
def test_the_rows_of_every_mixing_method_equal_the_twins(pair, method):
    model, twin, ids = pair
    (s1, r1), (s2, r2) = mixing_rows(model, ids.tolist(), 5, method), mixing_rows(twin, ids.tolist(), 5, method)
    torch.testing.assert_close(s1, s2, **TOL)
    assert (r1 is None) == (r2 is None)
    if r1 is not None:
        torch.testing.assert_close(r1, r2, **TOL)


def test_direct_logit_attribution_and_alti_logit_equal_the_twins_and_add_up(pair):
    model, twin, ids = pair
    a, b = direct_logit_attribution(model, ids), direct_logit_attribution(twin, ids)
    assert a.token == b.token
    torch.testing.assert_close(a.heads, b.heads, **TOL)
    torch.testing.assert_close(a.mlps, b.mlps, **TOL)
    assert a.logit == pytest.approx(b.logit, abs=1e-4) and a.total() == pytest.approx(a.logit, abs=1e-3)
    with torch.no_grad():
        own = float(model(ids[None]).logits[0, -1, a.token])  # the model's own logit, computed apart
    assert a.logit == pytest.approx(own, abs=1e-5)
    x, y = alti_logit(model, ids, position=6), alti_logit(twin, ids, position=6)
    torch.testing.assert_close(x.tokens, y.tokens, **TOL)
    assert float(x.tokens[7:].abs().sum()) == 0.0  # a causal model: no later token contributes


def test_the_logit_lens_and_head_details_equal_the_twins(pair):
    model, twin, ids = pair
    for r1, r2 in zip(logit_lens(model, ids, position=4, k=3), logit_lens(twin, ids, position=4, k=3), strict=True):
        assert r1.top == r2.top and r1.rank == r2.rank
        assert r1.logits == pytest.approx(r2.logits, abs=1e-4)
    assert {p: [r.top for r in rows] for p, rows in lens_at(model, ids.tolist(), [3, 9], k=2).items()} == {
        p: [r.top for r in rows] for p, rows in lens_at(twin, ids.tolist(), [3, 9], k=2).items()
    }
    d1, d2 = head_details(model, ids.tolist(), {1: {5}}), head_details(twin, ids.tolist(), {1: {5}})
    torch.testing.assert_close(d1[(1, 5)]["rows"], d2[(1, 5)]["rows"], **TOL)
    assert torch.equal(d1[(1, 5)]["promotes"], d2[(1, 5)]["promotes"])


def test_the_information_flow_routes_equal_the_twins(pair):
    model, twin, ids = pair
    g1, g2 = information_flow_routes(model, ids, threshold=0.02), information_flow_routes(twin, ids, threshold=0.02)
    assert g1.token == g2.token and len(g1.edges) > 0
    key = lambda e: (e.layer, -1 if e.head is None else e.head, e.source, e.target)
    assert sorted(map(key, g1.edges)) == sorted(map(key, g2.edges))
    w2 = {key(e): e.weight for e in g2.edges}
    assert all(e.weight == pytest.approx(w2[key(e)], abs=1e-5) for e in g1.edges)


def test_the_hooks_are_gone_after_a_call_and_after_a_refusal(pair, monkeypatch):
    """Hook points live for one call: none stays on the model, also when a replay is refused."""
    from attnkit.errors import TraceError
    from attnkit.models import language_model_trace as native

    model, _, ids = pair
    layer_maps(model, ids.tolist(), "alti")
    assert all(not layer._forward_hooks for layer in model.layers)
    real = native.block_layout

    def wrong(block):  # a layout whose MLP is off by one: the replay no longer gives the block's output
        lay = real(block)
        rest = lay.rest
        lay.rest = lambda m, r: rest(m, r) + 1.0
        return lay

    monkeypatch.setattr(native, "block_layout", wrong)
    with pytest.raises(TraceError, match=r"replaying layer 1 of this attnkit .* does not give its output"):
        layer_maps(model, ids.tolist(), "alti")
    assert all(not layer._forward_hooks for layer in model.layers)
