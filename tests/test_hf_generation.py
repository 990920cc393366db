"""A decoder-only Hugging Face model's continuation and its attributions (attnkit.attribution.generation):
greedy equals the model's own generate, the gradient methods equal a float64 autograd loop over one
generated token at a time (integrated gradients: a float64 Riemann sum of 512 points), and attention and
rollout are the eager implementation's output_attentions rows of the predicting positions."""

import copy

import pytest
import torch

from attnkit.alignment import attention_rollout
from attnkit.attribution import UnknownMethodError, explain_generation
from attnkit.hf import HFModelError, load_self_attention
from hf_tiny import EOS, PAD, build_tiny, saved_tiny

pytest.importorskip("captum")
PROMPT = "Jesús lloró."
NEW = 4


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def decoder(request):
    sa = load_self_attention(str(saved_tiny(request.param)))
    return request.param, sa, sa.generate(PROMPT, max_new_tokens=NEW)


def _reference_grads(sa, ids, prompt_len):
    """Per generated token t, in float64 and one token at a time: (x, ∂ log p(ids[P+t]) / ∂x), x the input
    embeddings of ids[:-1] (autograd through a float64 copy of the model)."""
    model = copy.deepcopy(sa.model).double()
    x = model.get_input_embeddings()(torch.tensor(ids[:-1])).detach()  # (n-1, E)
    grads = []
    for t in range(len(ids) - prompt_len):
        xi = x.clone().requires_grad_(True)
        logits = model(inputs_embeds=xi[None], use_cache=False).logits[0]  # (n-1, V)
        lp = torch.log_softmax(logits, -1)[prompt_len - 1 + t, ids[prompt_len + t]]
        (g,) = torch.autograd.grad(lp, xi)
        grads.append(g)
    return x, torch.stack(grads)  # (n-1, E), (G, n-1, E)


def test_greedy_continuation_equals_generate(decoder):
    family, _, (ids, prompt_len) = decoder
    model, tok = build_tiny(family)
    prompt = torch.tensor([tok(PROMPT)["input_ids"]])
    with torch.no_grad():
        expected = model.generate(
            prompt, max_new_tokens=NEW, do_sample=False, num_beams=1, eos_token_id=EOS, pad_token_id=PAD
        )[0].tolist()
    assert prompt_len == prompt.shape[1] and ids == expected


@pytest.mark.parametrize("method", ["saliency", "input_x_gradient"])
def test_gradient_methods_equal_a_float64_loop(decoder, method):
    _, sa, continuation = decoder
    ids, prompt_len = continuation
    att = explain_generation(sa, PROMPT, method=method, continuation=continuation, batch=2)
    x, g = _reference_grads(sa, ids, prompt_len)
    per_feature = g.abs() if method == "saliency" else x * g  # (G, n-1, E)
    scores = per_feature.norm(dim=-1)
    expected = scores / scores.sum(-1, keepdim=True)
    assert att.scores.shape == (len(ids) - prompt_len, len(ids) - 1)
    torch.testing.assert_close(att.scores.double(), expected, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(att.raw.double(), per_feature.sum(-1), atol=2e-5, rtol=1e-4)
    for t in range(len(ids) - prompt_len):  # a causal model reads nothing after the predicting position
        assert float(att.scores[t, prompt_len + t :].abs().sum()) == 0.0
    assert att.target == sa.pieces_of(ids[prompt_len:]) and att.source == sa.pieces_of(ids[:-1])


def test_integrated_gradients_equal_a_float64_riemann_sum():
    sa = load_self_attention(str(saved_tiny("gpt2")))
    continuation = sa.generate(PROMPT, max_new_tokens=3)
    ids, prompt_len = continuation
    att = explain_generation(sa, PROMPT, method="integrated_gradients", continuation=continuation, steps=64)
    model = copy.deepcopy(sa.model).double()
    x = model.get_input_embeddings()(torch.tensor(ids[:-1])).detach()  # (n-1, E)
    alphas = (torch.arange(512, dtype=torch.float64) + 0.5) / 512  # midpoints: the reference's own quadrature
    for t in range(len(ids) - prompt_len):
        path = (alphas[:, None, None] * x).requires_grad_(True)  # (512, n-1, E): baseline 0 → x
        logits = model(inputs_embeds=path, use_cache=False).logits  # (512, n-1, V)
        lp = torch.log_softmax(logits, -1)[:, prompt_len - 1 + t, ids[prompt_len + t]]
        (g,) = torch.autograd.grad(lp.sum(), path)
        raw = (x * g.mean(0)).sum(-1)  # (n-1,)
        torch.testing.assert_close(att.raw[t].double(), raw, atol=2e-3, rtol=2e-3)
        with torch.no_grad():
            ends = torch.log_softmax(model(inputs_embeds=torch.stack([x, torch.zeros_like(x)])).logits, -1)
        gap = float(ends[0, prompt_len - 1 + t, ids[prompt_len + t]] - ends[1, prompt_len - 1 + t, ids[prompt_len + t]])
        assert abs(float(att.raw[t].sum()) - gap) <= 0.02 * max(abs(gap), 0.1)  # completeness


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_attention_and_rollout_are_eager_rows(family):
    sa = load_self_attention(str(saved_tiny(family)))
    continuation = sa.generate(PROMPT, max_new_tokens=NEW)
    ids, prompt_len = continuation
    eager, _ = build_tiny(family, attn_implementation="eager")
    with torch.no_grad():
        maps = torch.stack(eager(input_ids=torch.tensor([ids[:-1]]), output_attentions=True).attentions)[:, 0]
    rows = torch.arange(len(ids) - prompt_len) + prompt_len - 1  # the positions that predicted each token
    att = explain_generation(sa, PROMPT, method="attention", continuation=continuation)
    torch.testing.assert_close(att.scores, maps[-1].mean(0)[rows].float(), atol=1e-5, rtol=0)
    one = explain_generation(sa, PROMPT, method="attention", continuation=continuation, layer=1, head=2)
    torch.testing.assert_close(one.scores, maps[0, 1][rows].float(), atol=1e-5, rtol=0)
    roll = explain_generation(sa, PROMPT, method="rollout", continuation=continuation)
    torch.testing.assert_close(roll.scores, attention_rollout(maps.float())[rows], atol=1e-5, rtol=0)


def test_bad_requests_name_the_argument():
    gpt2 = load_self_attention(str(saved_tiny("gpt2")))
    bert = load_self_attention(str(saved_tiny("bert")))
    assert gpt2.can_generate and not bert.can_generate
    with pytest.raises(HFModelError, match="does not write"):
        bert.generate(PROMPT)
    with pytest.raises(ValueError, match="max_new_tokens"):
        gpt2.generate(PROMPT, max_new_tokens=0)
    long = " ".join(["Dios"] * 300)  # more tokens than the tiny models' 256 positions
    with pytest.raises(ValueError, match="256 positions"):
        gpt2.generate(long, max_new_tokens=2)
    with pytest.raises(ValueError, match="256 positions"):
        bert.self_attention(long)
    # every translator method has a language-model form now (alti_plus is a language model's ALTI): an unknown
    # name is refused, listing the decoder-only methods
    with pytest.raises(UnknownMethodError, match=r"unknown attribution method 'shap'.*alti_logit"):
        explain_generation(gpt2, PROMPT, method="shap", max_new_tokens=2)
    with pytest.raises(ValueError, match="layer"):
        explain_generation(gpt2, PROMPT, method="attention", max_new_tokens=2, layer=3)
    with pytest.raises(ValueError, match="steps"):
        explain_generation(gpt2, PROMPT, method="rollout", max_new_tokens=2, steps=8)


def test_notebook_views_embed_every_layer_and_the_continuation():
    import json
    import re

    gpt2 = load_self_attention(str(saved_tiny("gpt2")))
    maps = gpt2.self_attention(PROMPT)
    page = maps._repr_html_()
    assert page.startswith("<iframe")
    from attnkit.explorer.notebook import self_attention_view

    data = self_attention_view(maps).data["self_attention"][0]
    assert data["num_layers"] == 2 and len(data["layers"]) == 2 and len(data["layers"][1]["heads"]) == 4
    torch.testing.assert_close(torch.tensor(data["layers"][1]["heads"]), maps.attention[1], atol=5e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(data["rollout"]), maps.rollout(), atol=5e-5, rtol=0)
    att = explain_generation(gpt2, PROMPT, method="saliency", max_new_tokens=3)
    html = att._repr_html_()
    found = re.search(r"window\.ATTNKIT_DATA = (\{.*?\});\n", __import__("html").unescape(html))
    payload = json.loads(found.group(1))["continuations"][0]
    assert payload["written_pieces"] == att.target and payload["attribution"]["method"] == "saliency"


def _float64_lm(family):
    from attnkit.hf.self_attention import SelfAttentionModel

    model, tok = build_tiny(family)
    return SelfAttentionModel(model.double(), tok, source=f"tiny-{family}-float64")


def _per_token_grads(sa, x, ids, prompt_len, points):
    """Per attributed token t and per input row of ``points (p, n-1, E)``: ∂ log p(ids[P+t]) / ∂row, one
    forward and one backward per token and point (float64): ``(G, p, n-1, E)``."""
    out = []
    for t in range(len(ids) - prompt_len):
        rows = []
        for point in points:
            xi = point.clone().requires_grad_(True)
            lp = torch.log_softmax(sa.model(inputs_embeds=xi[None], use_cache=False).logits[0], -1)
            (g,) = torch.autograd.grad(lp[prompt_len - 1 + t, ids[prompt_len + t]], xi)
            rows.append(g)
        out.append(torch.stack(rows))
    return torch.stack(out)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_shared_forward_equals_a_per_token_loop(family):
    """The shared-forward engine (one forward pass per group of tokens, one backward per token over its
    graph) gives every token's own gradient: equal to a forward and a backward per token, float64, to 1e-6;
    two groups of tokens (each to its own last position); the step scores read off the same pass."""
    sa = _float64_lm(family)
    text = "En el principio creó Dios los cielos y la tierra. Y la tierra estaba desordenada y vacía"
    ids, _ = sa.encode(text)
    assert 33 <= len(ids) <= 48  # 2 · SPLIT_MIN_GROUP tokens and more: two groups, two forward passes
    x = sa.embed(torch.tensor(ids[:-1])).detach()  # (n-1, E)
    g = _per_token_grads(sa, x, ids, 1, x[None])[:, 0]  # (G, n-1, E)
    calls = []
    handle = sa.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        sal = explain_generation(sa, text, method="saliency", forced=True)
    finally:
        handle.remove()
    assert len(calls) == 2  # the shared forward: one pass per group, not one per token, none for the step scores
    acts = {type(m).__name__ for m in sa.model.modules()}  # fused_gelu put the model's own GELU back
    assert "GELUTanh" not in acts and (family != "gpt2" or "NewGELUActivation" in acts)
    torch.testing.assert_close(
        sal.raw.double(), g.abs().sum(-1), atol=1e-6, rtol=1e-6
    )  # float32 in the Attribution: 6e-8 relative
    ixg = explain_generation(sa, text, method="input_x_gradient", forced=True)
    torch.testing.assert_close(
        ixg.raw.double(), (x * g).sum(-1), atol=1e-6, rtol=1e-6
    )  # float32 in the Attribution: 6e-8 relative
    from attnkit.attribution.generation import step_scores

    assert sal.extra["step_scores"] == step_scores(sa, ids, 1)  # the step scores' own pass: the same numbers


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_shared_integrated_gradients_equal_a_per_token_quadrature(family):
    """Integrated gradients on the shared forward, its points batched 3 to a pass: each token's
    Gauss-Legendre sum of per-token float64 gradients at the same points, to 1e-6; contrastive too."""
    import numpy as np

    sa = _float64_lm(family)
    ids, _ = sa.encode("Jesús lloró. Y dijeron los judíos")
    prompt_len = len(ids) - 3
    x = sa.embed(torch.tensor(ids[:-1])).detach()  # (n-1, E)
    nodes, weights = np.polynomial.legendre.leggauss(4)
    alphas = torch.tensor((nodes + 1) / 2, dtype=torch.float64)
    g = _per_token_grads(sa, x, ids, prompt_len, alphas[:, None, None] * x)  # (G, 4, n-1, E)
    expected = (x * (g * torch.tensor(weights / 2)[None, :, None, None]).sum(1)).sum(-1)  # (G, n-1)
    att = explain_generation(sa, "", method="integrated_gradients", continuation=(ids, prompt_len), steps=4, batch=3)
    torch.testing.assert_close(
        att.raw.double(), expected, atol=1e-6, rtol=1e-6
    )  # float32 in the Attribution: 6e-8 relative
