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


# ---------------------------------------------------------------- the front ends: service and CLI, native vs export

TEXT = "In the beginning God created the heaven and the earth."


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    """``(native Model, Model of its Hugging Face export, checkpoint folder, export folder)``: an attnkit language
    model opened as itself (kind language-model, analysed natively) and its ``attnkit export --format huggingface``."""
    from attnkit.deploy.hf_export import export_huggingface
    from attnkit.service import ModelKind, open_model
    from test_hf_lm_export import save_lm

    root = tmp_path_factory.mktemp("native")
    ckpt = save_lm(root / "lm", tiny_lm(5, shape="llama", n_kv_heads=2))
    hf = export_huggingface(ckpt, root / "hf")
    native, twin = open_model(str(ckpt)), open_model(str(hf))
    assert native.kind is ModelKind.LANGUAGE_MODEL and twin.kind is ModelKind.SELF_ATTENTION
    return native, twin, ckpt, hf


@pytest.mark.parametrize(
    "method",
    [
        "attention",
        "rollout",
        "attention_norm",
        "value_zeroing",
        "alti",
        "alti_logit",
        "attention_flow",
        "attention_relevance",
        "saliency",
        "input_x_gradient",
    ],
)
def test_every_row_method_on_the_native_model_equals_its_export(opened, method):
    from attnkit.service import GenerationRequest, analyse

    native, twin, *_ = opened
    if method in ("saliency", "input_x_gradient"):
        pytest.importorskip("captum")
    req = GenerationRequest(TEXT, mode="forced", method=method)
    a, b = analyse(native, req).attribution, analyse(twin, req).attribution
    assert a.source[1:] == b.source[1:] and a.target == b.target and len(a.target) > 5  # <s>: "▁<s>" in HF's spelling
    torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=1e-5)
    if a.raw is not None:
        torch.testing.assert_close(a.raw, b.raw, atol=1e-5, rtol=1e-5)
    assert a.extra["step_scores"]["probability"] == pytest.approx(b.extra["step_scores"]["probability"], abs=1e-5)


def test_greedy_continuation_contrast_and_sampling_natively(opened):
    from attnkit.errors import InputError
    from attnkit.service import GenerationRequest, analyse

    native, twin, *_ = opened
    greedy = GenerationRequest("In the beginning", max_new_tokens=6, method="alti")
    a, b = analyse(native, greedy), analyse(twin, greedy)
    assert a.continuation == b.continuation and a.attribution.target == b.attribution.target
    torch.testing.assert_close(a.attribution.scores, b.attribution.scores, atol=1e-5, rtol=1e-5)
    contrast = GenerationRequest(TEXT, mode="forced", method="saliency", contrast="▁the")
    pytest.importorskip("captum")
    c, d = analyse(native, contrast).attribution, analyse(twin, contrast).attribution
    assert c.extra["contrast"] == d.extra["contrast"]
    torch.testing.assert_close(c.scores, d.scores, atol=1e-5, rtol=1e-5)
    sample = GenerationRequest("In the beginning", max_new_tokens=8, mode="sample", seed=3, temperature=1.5)
    s1, s2 = analyse(native, sample), analyse(native, sample)
    assert s1.continuation == s2.continuation and s1.seed == 3  # the same seed, the same text
    with pytest.raises(InputError, match="not one token"):
        analyse(native, GenerationRequest(TEXT, mode="forced", method="saliency", contrast="heaven and earth"))


@pytest.mark.parametrize("method", ["alti_logit", "value_zeroing", "logit_lens", "direct_logit", "routes"])
def test_the_cli_explains_an_attnkit_language_model_as_its_export(opened, capsys, method):
    """``attnkit explain --model LM --text … --method M --json``: the native model prints what its export prints."""
    import json

    from attnkit.cli import main

    _, _, ckpt, hf = opened
    outs = []
    for folder in (ckpt, hf):
        capsys.readouterr()
        assert main(["explain", "--model", str(folder), "--text", TEXT, "--method", method, "--json"]) in (0, None)
        outs.append(json.loads(capsys.readouterr().out))
    mine, theirs = outs
    for key in ("scores", "raw"):
        if mine.get(key) is not None:
            torch.testing.assert_close(torch.tensor(mine[key]), torch.tensor(theirs[key]), atol=2e-5, rtol=0)
    if method == "logit_lens":
        assert [r["top"] for r in mine["lens"]] == [r["top"] for r in theirs["lens"]]
    if method == "direct_logit":
        assert mine["direct_logit"]["logit"] == pytest.approx(theirs["direct_logit"]["logit"], abs=1e-4)
    if method == "routes":
        assert len(mine["graph"]["edges"]) == len(theirs["graph"]["edges"]) > 0


def test_evaluate_explanations_scores_the_native_model_as_its_export(opened):
    """Deletion and insertion areas of an attnkit language model, scored natively, equal its export's (the same
    tokens removed, the same log-probabilities); the randomised-model check runs (its random draw differs: the
    two hold their parameters in another order)."""
    from attnkit.attribution.lm_faithfulness import evaluate_lm_explanations

    native, twin, *_ = opened
    texts = ["In the beginning God created the heaven.", "Jesus wept."]
    kwargs = dict(methods=["attention", "alti_logit"], sanity_texts=1)
    mine, theirs = (
        evaluate_lm_explanations(native.impl, texts, **kwargs),
        evaluate_lm_explanations(twin.impl, texts, **kwargs),
    )
    for method in ("attention", "alti_logit"):
        assert -1.0 <= mine["methods"][method]["sanity_spearman"] <= 1.0
        for key in ("deletion_area", "insertion_area"):
            assert mine["methods"][method][key] == pytest.approx(theirs["methods"][method][key], abs=1e-5), (
                method,
                key,
            )
    assert mine["random_deletion_area"] == pytest.approx(theirs["random_deletion_area"], abs=1e-5)
