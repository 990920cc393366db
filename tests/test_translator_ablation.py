"""Ablating the attention of RNNsearch and of a Hugging Face encoder-decoder (:mod:`attnkit.attribution.translator_ablation`,
``/api/ablate``): RNNsearch's zeroed context and its uniform weights equal the decoder run step by step by hand
with ``c_t = 0`` or ``c_t`` the mean annotation; a Hugging Face translator's zero-ablated head equals a copy whose
output projection reads nothing of that head; the page's answers equal the library's; a CTranslate2 engine and a
malformed request are refused with a 4xx."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from attnkit.attribution.translator_ablation import (
    ablate_rnn_attention,
    forced_log_likelihood_of,
    translator_model_kind,
)
from attnkit.service import open_model
from hf_tiny import saved_tiny

fastapi_testclient = pytest.importorskip("fastapi.testclient")

SOURCE = "Y dijo Dios: Sea la luz."
REFERENCE = "And God said, Let there be light."


@pytest.fixture(scope="module")
def rnn():
    return open_model("rnnsearch-es-en").impl


def _by_hand(tr, source, reference, mode):
    """``log p(reference, eos | source)`` with the decoder's steps written out: ``s_t = GRU([E y_{t−1}; c_t],
    s_{t−1})`` with ``c_t = 0`` (zero) or the mean of the real annotations (uniform weights)."""
    m = tr.model
    cfg = m.config
    src = torch.tensor(tr.encode_sources([source], truncate=True))
    ids = tr.tokenizer.encode(reference)
    tgt_in, tgt_out = [cfg.bos_id, *ids], [*ids, cfg.eos_id]
    with torch.no_grad():
        state = m.encode(src, torch.tensor([src.shape[1]]))
        h = state.h
        annotations = state.memory.values[0]  # (S, C)
        c = torch.zeros(1, annotations.shape[-1]) if mode == "zero" else annotations.mean(0, keepdim=True)
        total = 0.0
        for y, nxt in zip(tgt_in, tgt_out):
            y_emb = m.embedding(torch.tensor([y]))  # (1, E)
            h = m.decoder_cell(torch.cat([y_emb, c], -1), h)
            logits = F.linear(torch.tanh(m.deep_output(torch.cat([h, c, y_emb], -1))), *m.output_layer())
            total += float(F.log_softmax(logits.double(), -1)[0, nxt])
    return total


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_rnnsearch_ablation_equals_the_decoder_by_hand(rnn, mode):
    assert translator_model_kind(rnn) == "rnnsearch" and rnn.model.input_feed
    clean = forced_log_likelihood_of(rnn, SOURCE, REFERENCE)
    with ablate_rnn_attention(rnn.model, mode):
        got = forced_log_likelihood_of(rnn, SOURCE, REFERENCE)
    assert got == pytest.approx(_by_hand(rnn, SOURCE, REFERENCE, mode), abs=1e-4)
    assert got < clean - 1  # the attention helps
    assert forced_log_likelihood_of(rnn, SOURCE, REFERENCE) == clean  # nothing left behind


def test_the_rnnsearch_weights_it_reports_are_the_ones_used(rnn):
    tr = rnn
    src = torch.tensor(tr.encode_sources([SOURCE], truncate=True))
    tgt = torch.tensor([[tr.model.config.bos_id, *tr.tokenizer.encode(REFERENCE)]])
    with torch.no_grad(), ablate_rnn_attention(tr.model, "mean"):
        _, w = tr.model(src, torch.tensor([src.shape[1]]), tgt, need_weights=True)  # (1, T, S)
    torch.testing.assert_close(w, torch.full_like(w, 1 / src.shape[1]))


@pytest.fixture(scope="module")
def client():
    from attnkit.explorer.app import create_app, load_models

    models = load_models(["rnnsearch-es-en", str(saved_tiny("marian"))])
    marian = next(n for n in models.translators if n != "rnnsearch-es-en")
    app = create_app(models, verses=[])
    return fastapi_testclient.TestClient(app, base_url="http://127.0.0.1"), models, marian


def _ok(c, **body) -> dict:
    r = c.post("/api/ablate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_api_ablates_rnnsearch(client, rnn, mode):
    c, _, _ = client
    head = [{"site": "cross", "layer": 1, "head": 1}]
    a = _ok(c, model="rnnsearch-es-en", source=SOURCE, reference=REFERENCE, heads=head, mode=mode)
    assert a["clean_log_likelihood"] == pytest.approx(forced_log_likelihood_of(rnn, SOURCE, REFERENCE), abs=1e-6)
    assert a["log_likelihood"] == pytest.approx(_by_hand(rnn, SOURCE, REFERENCE, mode), abs=1e-4)
    with ablate_rnn_attention(rnn.model, mode):
        want = rnn.translate([SOURCE], beam_size=1, truncate=True)[0].translation
    assert a["ablated"] == want and a["clean"] == rnn.translate([SOURCE], beam_size=1)[0].translation


def test_api_ablates_a_hugging_face_translators_head(client):
    c, models, marian = client
    tr = models.translators[marian]
    a = _ok(c, model=marian, source=SOURCE, heads=[{"site": "cross", "layer": 2, "head": 3}])
    twin = copy.deepcopy(tr)
    proj = twin.model.hf.get_decoder().layers[1].encoder_attn.out_proj  # nn.Linear (D, H·D_h)
    dh = proj.weight.shape[1] // 4
    with torch.no_grad():
        proj.weight[:, 2 * dh : 3 * dh] = 0
    assert a["log_likelihood"] == pytest.approx(forced_log_likelihood_of(twin, SOURCE, a["reference"]), abs=1e-5)
    assert a["clean_log_likelihood"] == pytest.approx(forced_log_likelihood_of(tr, SOURCE, a["reference"]), abs=1e-5)
    assert a["log_likelihood"] != a["clean_log_likelihood"]
    m = _ok(c, model=marian, source=SOURCE, heads=[{"site": "encoder", "layer": 1, "head": 1}], mode="mean")
    assert m["mode"] == "mean" and m["heads"] == [{"site": "encoder", "layer": 1, "head": 1}]


@pytest.mark.parametrize(
    "heads, words",
    [
        ([{"site": "cross", "layer": 2, "head": 1}], "ablated whole"),
        ([{"site": "encoder", "layer": 1, "head": 1}], "ablated whole"),
    ],
)
def test_api_refuses_what_rnnsearch_does_not_have(client, heads, words):
    c, _, _ = client
    r = c.post("/api/ablate", json={"model": "rnnsearch-es-en", "source": SOURCE, "heads": heads})
    assert r.status_code == 422 and words in r.json()["error"]


def test_a_ctranslate2_engine_is_refused():
    class CT2Translator:  # stands for attnkit.deploy.ct2_engine.CT2Translator: no PyTorch model, no hooks
        model = None

    with pytest.raises(TypeError, match="CTranslate2"):
        translator_model_kind(CT2Translator())
    with pytest.raises(TypeError, match="no attention"):
        translator_model_kind(object())
