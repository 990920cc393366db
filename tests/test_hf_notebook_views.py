"""The notebook view (``_repr_html_``) of every tiny Hugging Face family: an encoder-decoder's
:func:`attnkit.attribution.explain` result for every method the family has (Marian, BART, M2M100, T5),
a :class:`~attnkit.hf.self_attention.SelfAttentionMaps` (BERT, GPT-2, Llama) and a decoder-only model's
:func:`~attnkit.attribution.explain_generation` for every generation method (GPT-2, Llama). The
iframe's page is unescaped and its inline data (``window.ATTNKIT_DATA``) parsed: the pieces and the
matrices must be the result's own, of the right shape (the views themselves render in chromium in
tests/test_notebook.py and tests/test_hf_browser.py)."""

import html
import json

import pytest
import torch

from hf_tiny import ENC_DEC, saved_tiny

SOURCE, TARGET = "Y dijo Dios: Sea la luz.", "And God said, Let there be light."


def _data(view_html: str) -> dict:
    """The explorer data inside a notebook view: ``<iframe srcdoc="page">`` with ``window.ATTNKIT_DATA = {...}``."""
    assert view_html.startswith('<iframe class="attnkit-view" srcdoc="')
    page = html.unescape(view_html.split('srcdoc="', 1)[1].split('"', 1)[0])
    start = page.index("window.ATTNKIT_DATA = ") + len("window.ATTNKIT_DATA = ")
    return json.JSONDecoder().raw_decode(page, start)[0]


@pytest.mark.parametrize("family", ENC_DEC)
def test_an_encoder_decoders_explanations_show_themselves(family):
    from attnkit.attribution import explain, methods_for
    from attnkit.tasks.translation import Translator

    tr = Translator.load(str(saved_tiny(family)))
    methods = methods_for(tr)
    assert ("alti_plus" in methods) == (family != "t5")  # T5's RMSNorm blocks have no decomposition
    for method in methods:
        att = explain(tr, SOURCE, target=TARGET, method=method)
        (p,) = _data(att._repr_html_())["translations"]
        assert p["source_pieces"] == list(att.source) and p["target_pieces"] == list(att.target), method
        shown = torch.tensor(p["attribution"]["scores"], dtype=torch.float64)  # (T, S)
        assert shown.shape == (len(att.target), len(att.source)), method
        torch.testing.assert_close(shown, att.scores.double(), atol=1e-4, rtol=0, msg=method)
        assert p["attribution"]["method"] == method


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_self_attention_maps_show_every_layer_and_head(family):
    from attnkit.hf import load_self_attention

    sa = load_self_attention(str(saved_tiny(family)))
    maps = sa.self_attention(SOURCE)
    (p,) = _data(maps._repr_html_())["self_attention"]
    _, pieces = sa.encode(SOURCE)
    assert p["pieces"] == pieces == list(maps.pieces)
    assert (p["num_layers"], p["num_heads"], p["causal"]) == (2, 4, family != "bert")
    heads = torch.tensor([layer["heads"] for layer in p["layers"]], dtype=torch.float64)
    assert heads.shape == (2, 4, len(pieces), len(pieces))  # (L, H, N, N)
    torch.testing.assert_close(heads, maps.attention.double(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_continuations_attributions_show_themselves(family):
    from attnkit.attribution import explain_generation
    from attnkit.attribution.generation import row_methods
    from attnkit.hf import load_self_attention

    sa = load_self_attention(str(saved_tiny(family)))
    continuation = sa.generate(SOURCE, max_new_tokens=3)
    for method in row_methods():  # the views of one prediction are not rows (tests/test_lm_views.py)
        att = explain_generation(sa, SOURCE, method=method, continuation=continuation)
        data = _data(att._repr_html_())
        (p,) = data["continuations"]
        assert data["translations"] == [] and p["decoding"] is None  # a given continuation: greedy or sampled?
        assert p["written_pieces"] == list(att.target) and len(att.target) == 3, method
        assert p["context_pieces"] == list(att.source), method
        shown = torch.tensor(p["attribution"]["scores"], dtype=torch.float64)
        assert shown.shape == (3, len(att.source)), method
        torch.testing.assert_close(shown, att.scores.double(), atol=1e-4, rtol=0, msg=method)
