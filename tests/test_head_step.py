"""``/api/head-step`` (:func:`attnkit.service.head_step`): one head at one query, step by step. The row
recomputed in float64 from the answer's q, K, the scale and the mask (softmax(q·Kᵀ·scale + M)) equals
the model's own attention row, read independently: attnkit's models' ``need_weights`` maps (the
language model, the Transformer translator's three sites), a Hugging Face model reloaded in eager mode
(``output_attentions``); Σ α_j v_j equals the head's slice of the concatenation; bad input gets a 4xx."""

import pytest
import torch

from attnkit.explorer.app import create_app, load_models
from attnkit.hf import load_self_attention
from hf_tiny import build_tiny, saved_tiny

fastapi_testclient = pytest.importorskip("fastapi.testclient")

TEXT = "In the beginning God created the heavens and the earth."
SOURCE = "Y dijo Dios: Sea la luz."
TARGET = "And God said, Let there be light."


@pytest.fixture(scope="module")
def client():
    models = load_models(["lm-4l-en", "transformer-es-en", "rnnsearch-es-en", str(saved_tiny("bert"))])
    app = create_app(models, verses=[])
    return fastapi_testclient.TestClient(app, base_url="http://127.0.0.1"), models


def _recomputed(a: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q·Kᵀ·scale + M) (or of an additive head's scores) and Σ α_j v_j, in float64."""
    mask = torch.tensor(a["mask"])
    if a["score"] == "dot":
        e = torch.tensor(a["keys"], dtype=torch.float64) @ torch.tensor(a["q"], dtype=torch.float64) * a["scale"]
    else:
        e = torch.tensor(a["scores"], dtype=torch.float64)
    w = torch.softmax(e.masked_fill(~mask, float("-inf")), 0)
    return w, w @ torch.tensor(a["values"], dtype=torch.float64)


def _post(c, **body):
    return c.post("/api/head-step", json=body)


def test_language_model_row_equals_its_own_maps(client):
    c, models = client
    lm = models.self_attention["lm-4l-en"]
    ids, pieces = lm.encode(TEXT)
    got = {}
    lm.stream(ids, lambda i, w: got.__setitem__(i, w), layers=[2])
    for head, query in ((4, 9), (1, 1), (3, len(ids))):
        r = _post(c, model="lm-4l-en", text=TEXT, layer=2, head=head, query=query)
        assert r.status_code == 200, r.text
        a = r.json()
        w, out = _recomputed(a)
        torch.testing.assert_close(w, got[2][head - 1, query - 1].double(), atol=1e-5, rtol=0)
        torch.testing.assert_close(out, torch.tensor(a["output"], dtype=torch.float64), atol=1e-5, rtol=0)
        assert a["mask"] == [j < query for j in range(len(ids))]  # causal
        dh = len(a["q"])
        assert a["columns"] == [(head - 1) * dh, head * dh] and a["width"] == 4 * dh
        assert a["positions"] == "rope" and a["key_pieces"] == pieces
        assert abs(a["scale"] - dh**-0.5) < 1e-12


def test_transformer_translator_three_sites_equal_its_own_maps(client):
    c, models = client
    tr = models.translators["transformer-es-en"]
    maps = tr.attention(SOURCE, TARGET).maps
    for site, key, query in (("encoder", "enc_self", 3), ("decoder self", "dec_self", 4), ("cross", "cross", 5)):
        r = _post(c, model="transformer-es-en", source=SOURCE, target=TARGET, site=site, layer=2, head=3, query=query)
        assert r.status_code == 200, r.text
        a = r.json()
        w, out = _recomputed(a)
        torch.testing.assert_close(w, getattr(maps, key)[1, 2, query - 1].double(), atol=1e-5, rtol=0)
        torch.testing.assert_close(out, torch.tensor(a["output"], dtype=torch.float64), atol=1e-5, rtol=0)
    # without a target: the greedy translation is forced
    r = _post(c, model="transformer-es-en", source=SOURCE, site="cross", layer=1, head=1, query=1)
    assert r.status_code == 200 and r.json()["query_pieces"]


def test_rnnsearch_additive_scores(client):
    c, models = client
    maps = models.translators["rnnsearch-es-en"].attention(SOURCE, TARGET).maps
    a = _post(c, model="rnnsearch-es-en", source=SOURCE, target=TARGET, site="cross", query=2).json()
    assert a["score"] == "additive" and a["q"] is None and "tanh" in a["formula"]
    w, out = _recomputed(a)
    torch.testing.assert_close(w, maps.alignment[1].double(), atol=1e-5, rtol=0)
    torch.testing.assert_close(out, maps.context[1].double(), atol=1e-5, rtol=0)


def test_hf_encoder_row_equals_eager_attentions(client):
    c, _ = client
    name = "tiny-bert"
    sa = load_self_attention(str(saved_tiny("bert")))
    ids, _ = sa.encode(TEXT)
    model, _ = build_tiny("bert", attn_implementation="eager")
    with torch.no_grad():
        eager = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions  # per layer (1, H, N, N)
    for layer, head, query in ((1, 2, 3), (2, 4, len(ids))):
        a = _post(c, model=name, text=TEXT, layer=layer, head=head, query=query).json()
        w, out = _recomputed(a)
        torch.testing.assert_close(w, eager[layer - 1][0, head - 1, query - 1].double(), atol=1e-5, rtol=0)
        assert all(a["mask"]) and a["positions"] == "absolute"  # bidirectional, learned positions
        torch.testing.assert_close(out, torch.tensor(a["output"], dtype=torch.float64), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"model": "lm-4l-en", "text": TEXT, "layer": 9}, 422, "layer must be in 1..4"),
        ({"model": "lm-4l-en", "text": TEXT, "head": 0}, 422, "head"),
        ({"model": "lm-4l-en", "text": TEXT, "query": 99}, 422, "query must be in 1.."),
        ({"model": "lm-4l-en", "text": TEXT, "site": "cross"}, 422, "site is 'self'"),
        ({"model": "lm-4l-en", "text": "   "}, 400, "empty"),
        ({"model": "lm-4l-en"}, 422, "give 'text'"),
        ({"model": "nope", "text": TEXT}, 404, "unknown"),
        ({"model": "lm-4l-en", "text": "word " * 3000}, 413, "characters"),
        ({"model": "transformer-es-en", "source": SOURCE, "site": "self"}, 422, "sites are encoder"),
        ({"model": "transformer-es-en", "source": SOURCE, "site": "cross", "layer": 7}, 422, "layer"),
        ({"model": "transformer-es-en", "text": SOURCE}, 422, "give 'source'"),
        ({"model": "transformer-es-en", "source": SOURCE, "target": TARGET, "query": 50}, 422, "query"),
        ({"model": "rnnsearch-es-en", "source": SOURCE, "site": "encoder"}, 422, "one attention"),
        ({"model": "lm-4l-en", "text": TEXT, "layer": "two"}, 422, "layer"),
        ({"model": "lm-4l-en", "text": TEXT, "layer": 2**70}, 422, "layer"),
        ({"model": "tiny-bert", "text": TEXT, "site": "encoder"}, 422, "site is 'self'"),
        ({"model": "lm-4l-en", "source": SOURCE}, 422, "give 'text'"),
        ({"source": SOURCE, "target": "   "}, 400, "target is empty"),
    ],
)
def test_bad_input_gets_a_4xx_with_a_message(client, body, status, says):
    r = _post(client[0], **body)
    assert r.status_code == status, r.text
    assert says in r.json()["error"]


@pytest.mark.parametrize("route", ["/api/self-attention", "/api/head-step"])
def test_a_text_of_no_readable_word_is_refused_for_attnkits_language_model(client, route):
    """attnkit's tokenizer reads these as nothing but <s> (its normaliser drops them): a 422, not a map of <s>."""
    c, _ = client
    body = {"model": "lm-4l-en", "text": "\u200b\u0007"} | (
        {"layer": 1, "head": 1, "query": 1} if "step" in route else {}
    )
    r = c.post(route, json=body)
    assert r.status_code == 422 and "no word the model can read" in r.json()["error"], r.text
