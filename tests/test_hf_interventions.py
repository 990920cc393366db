"""Head interventions on Hugging Face models (:mod:`attnkit.hf.head_sites` through
:func:`attnkit.attribution.interventions.intervene`): zero-ablating a head equals a copy of the model whose
output projection has that head's input columns zeroed, in float64; a head patched with its own clean
output changes nothing; a Hugging Face language model's effect is read as attnkit's is."""

from __future__ import annotations

import copy

import pytest
import torch

from attnkit.attribution.intervention_effects import lm_effect
from attnkit.attribution.interventions import HeadAblation, HeadPatch, attention_sites, intervene, record_heads
from hf_tiny import build_tiny

FAMILIES = ["gpt2", "llama", "qwen2", "gpt_neox", "bert", "distilbert", "marian", "t5"]
IDS = torch.tensor([[5, 9, 14, 20, 7, 11, 30, 8]])


def _run(model):
    kw = {"input_ids": IDS}
    if model.config.is_encoder_decoder:
        kw["decoder_input_ids"] = IDS[:, :5]
    with torch.no_grad():
        out = model(**kw)
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


def _zeroed_copy(model, site, layer, head):
    """A copy whose output projection at ``(site, layer)`` reads nothing of head ``head``."""
    twin = copy.deepcopy(model)
    s = attention_sites(twin)[site, layer]
    cols = slice(head * s.head_dim, (head + 1) * s.head_dim)
    with torch.no_grad():
        w = s.projection.weight
        if type(s.projection).__name__ == "Conv1D":  # GPT-2: weight (in, out)
            w[cols, :] = 0
        else:  # nn.Linear: weight (out, in)
            w[:, cols] = 0
    return twin


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    m, _ = build_tiny(request.param, attn_implementation="eager")
    return m.double()


def test_every_attention_has_a_site(model):
    sites = attention_sites(model)
    n_sites = 3 if model.config.is_encoder_decoder else 1
    assert len(sites) % n_sites == 0 and len(sites) >= n_sites
    for s in sites.values():
        width = s.projection.weight.shape[0 if type(s.projection).__name__ == "Conv1D" else 1]
        assert width == s.n_heads * s.head_dim  # the projection reads every head side by side


def test_zero_ablation_equals_the_projection_with_that_heads_columns_zeroed(model):
    clean = _run(model)
    for (site, layer), s in attention_sites(model).items():
        head = s.n_heads - 1
        with intervene(model, [HeadAblation(layer=layer, head=head, site=site)]):
            ablated = _run(model)
        want = _run(_zeroed_copy(model, site, layer, head))
        torch.testing.assert_close(ablated, want, atol=1e-10, rtol=0)
        assert not torch.allclose(ablated, clean)  # the head did something
    torch.testing.assert_close(_run(model), clean, atol=0, rtol=0)  # nothing left behind


def test_a_head_patched_with_its_own_clean_output_changes_nothing(model):
    clean = _run(model)
    with record_heads(model) as rec:
        _run(model)
    site, layer = next(iter(attention_sites(model)))
    with intervene(model, [HeadPatch(layer=layer, head=0, site=site, source=rec.get(site, layer, 0))]):
        torch.testing.assert_close(_run(model), clean, atol=1e-12, rtol=0)


def test_a_hugging_face_language_models_effect():
    model, _ = build_tiny("gpt2", attn_implementation="eager")
    model = model.double()
    e = lm_effect(model, IDS[0], [HeadAblation(layer=0, head=1)], target=3, foil=4)
    twin = _zeroed_copy(model, "self", 0, 1)
    with torch.no_grad():
        want = torch.log_softmax(twin(IDS).logits[0, -1], -1)[3]
    assert e.log_prob == pytest.approx(float(want), abs=1e-10) and e.log_prob != e.clean_log_prob
    with pytest.raises(TypeError, match="a Hugging Face model attnkit reads"):
        lm_effect(object(), IDS[0], [], target=3)
