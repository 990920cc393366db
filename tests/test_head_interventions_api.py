"""``/api/ablate``, ``/api/patching`` and ``/api/head-why`` (the page's head interventions) against the library
and independent references: a translator's answer equals :func:`translation_effect`'s; a language model's ablated
continuation and forced log-likelihood equal a copy of the model with the head's columns of ``o_proj`` zeroed
(what zero ablation is), its next-token numbers :func:`lm_effect`'s; the patching answer equals ``attnkit heads
--patching``'s JSON; the roles equal :func:`language_model_roles`' and the QK parts :func:`qk_decomposition`'s;
bad input gets a 4xx naming what is wrong."""

import copy

import pytest
import torch
import torch.nn.functional as F

from attnkit.attribution.head_roles import language_model_roles
from attnkit.attribution.intervention_effects import lm_effect, translation_effect
from attnkit.attribution.interventions import HeadAblation, head_mean, record_heads
from attnkit.attribution.qk_decomposition import qk_decomposition
from attnkit.explorer.app import create_app, load_models
from attnkit.explorer.head_work import ROLE_TEXTS
from hf_tiny import saved_tiny

fastapi_testclient = pytest.importorskip("fastapi.testclient")

LM = "attention-only-2l-en"
SOURCE = "Y dijo Dios: Sea la luz."
TEXT = "The cat sat on the mat. The cat sat"


@pytest.fixture(scope="module")
def client():
    models = load_models([LM, "transformer-es-en", "rnnsearch-es-en", str(saved_tiny("gpt2"))])
    gpt2 = next(name for name in models.self_attention if name != LM)
    app = create_app(models, verses=[])
    return fastapi_testclient.TestClient(app, base_url="http://127.0.0.1"), models, gpt2


def _ok(c, route, **body) -> dict:
    r = c.post(route, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_ablating_a_translator_head_equals_translation_effect(client):
    c, models, _ = client
    tr = models.translators["transformer-es-en"]
    a = _ok(
        c, "/api/ablate", model="transformer-es-en", source=SOURCE, heads=[{"site": "cross", "layer": 2, "head": 1}]
    )
    clean = tr.translate([SOURCE], beam_size=1)[0].translation
    e = translation_effect(tr, SOURCE, clean, [HeadAblation(1, 0, site="cross")], beam=1)
    assert (a["clean"], a["ablated"], a["reference"]) == (clean, e.translation, clean)
    assert a["clean"] != a["ablated"]  # this head changes the verse's greedy translation (docs/howto)
    assert a["clean_log_likelihood"] == pytest.approx(e.clean_log_likelihood, abs=1e-6)
    assert a["log_likelihood_change"] == pytest.approx(e.log_likelihood_change, abs=1e-6)
    # several heads at once, a given reference, beam 2: the same call
    ref = "And God said, Let there be light."
    heads = [{"site": "encoder", "layer": 2, "head": 3}, {"site": "decoder self", "layer": 3, "head": 2}]
    a = _ok(c, "/api/ablate", model="transformer-es-en", source=SOURCE, reference=ref, heads=heads, beam=2)
    e = translation_effect(tr, SOURCE, ref, [HeadAblation(1, 2, site="encoder"), HeadAblation(2, 1)], beam=2)
    assert (a["ablated"], a["reference_given"]) == (e.translation, True)
    assert a["log_likelihood"] == pytest.approx(e.log_likelihood, abs=1e-6)


def test_ablating_a_language_model_head_equals_zeroed_output_columns(client):
    c, models, _ = client
    sa = models.self_attention[LM]
    a = _ok(c, "/api/ablate", model=LM, text=TEXT, heads=[{"layer": 2, "head": 2}], max_new_tokens=8, top_k=3)
    # the reference: a copy whose o_proj columns of layer 2, head 2 are zero (what zeroing the head's output is)
    cut = copy.deepcopy(sa)
    attn = cut.model.layers[1].self_attn
    with torch.no_grad():
        attn.o_proj.weight[:, attn.head_dim : 2 * attn.head_dim] = 0
    clean_ids, n = sa.generate(TEXT, max_new_tokens=8)
    cut_ids, _ = cut.generate(TEXT, max_new_tokens=8)
    strip = lambda ids: sa.decode_plain([i for i in ids[n:] if i != sa.eos_id])
    assert (a["clean"], a["ablated"]) == (strip(clean_ids), strip(cut_ids))
    full = torch.tensor([clean_ids])
    for model, key in ((sa.model, "clean_log_likelihood"), (cut.model, "log_likelihood")):
        with torch.no_grad():
            lp = F.log_softmax(model(full).logits[0].double(), -1)  # (N + C, V)
        want = sum(float(lp[t - 1, clean_ids[t]]) for t in range(n, len(clean_ids)))
        assert a[key] == pytest.approx(want, abs=1e-4)
        top = lp[n - 1].topk(3)
        shown = a["clean_top"] if key.startswith("clean") else a["top"]
        assert [t["id"] for t in shown] == top.indices.tolist()
    ids = torch.tensor(sa.encode(TEXT)[0])
    e = lm_effect(sa, ids, [HeadAblation(1, 1)], target=a["next_token"]["id"])
    assert a["log_prob_change"] == pytest.approx(e.log_prob_change, abs=1e-9)
    # mean ablation: the head's mean output over this text's positions
    a = _ok(c, "/api/ablate", model=LM, text=TEXT, heads=[{"layer": 2, "head": 2}], mode="mean")
    with torch.no_grad(), record_heads(sa.model) as rec:
        sa.model(ids[None])
    mean = head_mean(rec.get("self", 1, 1))
    e = lm_effect(sa, ids, [HeadAblation(1, 1, mode="mean", reference=mean)], target=a["next_token"]["id"])
    assert a["log_prob"] == pytest.approx(e.log_prob, abs=1e-9)


def test_a_hugging_face_language_models_heads_are_ablated_too(client):
    c, models, gpt2 = client
    sa = models.self_attention[gpt2]
    a = _ok(c, "/api/ablate", model=gpt2, text="hello world", heads=[{"layer": 1, "head": 1}], max_new_tokens=2)
    e = lm_effect(sa, torch.tensor(sa.encode("hello world")[0]), [HeadAblation(0, 0)], target=a["next_token"]["id"])
    assert a["log_prob"] == pytest.approx(e.log_prob, abs=1e-9)


def test_patching_equals_attnkit_heads_patching(client):
    from attnkit.cli.heads_patching import patching_report
    from attnkit.service import open_model

    c, _, _ = client
    a = _ok(c, "/api/patching", model=LM, length=12, seed=3)
    want = patching_report(open_model(LM), 12, 3, "noise")
    assert (a["target"], a["induction_head"]) == (want["target"], want["induction_head"])
    heads = lambda cells: [(x["layer"], x["head"]) for x in cells]
    values = lambda cells: [v for x in cells for v in (x["score"], x["effect"])]
    for got, ref in [(a["heads"]["cells"], want["heads"]["cells"])] + [
        (a["paths"][via]["senders"], want["paths"][via]["senders"]) for via in "qkv"
    ]:
        assert heads(got) == heads(ref) and values(got) == pytest.approx(values(ref), abs=1e-9)
    top = max(a["heads"]["cells"], key=lambda x: x["effect"])
    assert (top["layer"], top["head"]) == (1, 1)  # the previous-token head the induction heads read


def test_head_why_equals_roles_and_qk_decomposition(client):
    c, models, gpt2 = client
    sa = models.self_attention[LM]
    a = _ok(c, "/api/head-why", model=LM, text=TEXT, layer=2, head=2, query=14)
    roles = language_model_roles(sa, list(ROLE_TEXTS)).get("lm", 2, 2)
    assert a["roles"] == pytest.approx(roles.scores, abs=1e-12)
    assert a["strongest"] == roles.strongest() == "induction"
    ids, pieces = sa.encode(TEXT)
    d = qk_decomposition(sa.model, torch.tensor(ids), 1, 1, 13)
    key = int(d.weights.argmax())
    assert (a["qk"]["key"], a["qk"]["key_piece"]) == (key + 1, pieces[key])
    assert [p["value"] for p in a["qk"]["parts"]] == pytest.approx(d.by_key_part()[key].tolist(), abs=1e-6)
    assert sum(p["value"] for p in a["qk"]["parts"]) == pytest.approx(a["qk"]["score"], abs=1e-3)
    # a Hugging Face model: its roles, no QK decomposition (it reads attnkit's own weights)
    a = _ok(c, "/api/head-why", model=gpt2, text="hello world", layer=1, head=1)
    assert a["qk"] is None and "attnkit's own" in a["note"] and a["roles"]


@pytest.mark.parametrize(
    "route, body, status, words",
    [
        ("/api/ablate", {"model": LM, "text": TEXT, "heads": [{"layer": 3, "head": 1}]}, 422, "layer must be in 1..2"),
        ("/api/ablate", {"model": LM, "text": TEXT, "heads": [{"layer": 1, "head": 9}]}, 422, "head must be in 1..4"),
        ("/api/ablate", {"model": LM, "text": TEXT, "heads": []}, 422, "heads"),
        (
            "/api/ablate",
            {"model": LM, "text": TEXT, "heads": [{"site": "cross", "layer": 1, "head": 1}]},
            422,
            "'self'",
        ),
        ("/api/ablate", {"model": LM, "heads": [{"layer": 1, "head": 1}]}, 422, "give 'text'"),
        ("/api/ablate", {"model": LM, "text": "  ", "heads": [{"layer": 1, "head": 1}]}, 400, "empty"),
        (
            "/api/ablate",
            {"model": LM, "text": TEXT, "heads": [{"layer": 1, "head": 1}], "max_new_tokens": 999},
            413,
            "",
        ),
        ("/api/ablate", {"model": LM, "text": "x" * 5000, "heads": [{"layer": 1, "head": 1}]}, 413, "characters"),
        (
            "/api/ablate",
            {"model": "transformer-es-en", "source": SOURCE, "heads": [{"site": "self", "layer": 1, "head": 1}]},
            422,
            "encoder, decoder self or cross",
        ),
        (
            "/api/ablate",
            {
                "model": "transformer-es-en",
                "source": SOURCE,
                "heads": [{"site": "cross", "layer": 1, "head": 1}],
                "beam": 99,
            },
            413,
            "--heavy-beam",
        ),
        (
            "/api/ablate",
            {"model": "rnnsearch-es-en", "source": SOURCE, "heads": [{"site": "cross", "layer": 1, "head": 2}]},
            422,
            "its one attention is ablated whole",
        ),
        ("/api/ablate", {"model": "nope", "text": TEXT, "heads": [{"layer": 1, "head": 1}]}, 404, "unknown"),
        ("/api/patching", {"model": LM, "length": 100}, 413, "at most 64"),
        ("/api/patching", {"model": LM, "length": 1}, 422, "length"),
        ("/api/patching", {"model": LM, "direction": "sideways"}, 422, "direction"),
        ("/api/head-why", {"model": LM, "text": TEXT, "layer": 3, "head": 1}, 422, "layer must be in 1..2"),
        ("/api/head-why", {"model": LM, "text": TEXT, "layer": 1, "head": 1, "query": 99}, 422, "query must be"),
    ],
)
def test_bad_input_gets_a_4xx_saying_what(client, route, body, status, words):
    c, _, _ = client
    r = c.post(route, json=body)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]


def test_patching_takes_a_hugging_face_decoder_only_model(client):
    """A Hugging Face GPT-2 is patched as attnkit's own models are (tests/test_hf_patching_api.py checks the numbers)."""
    c, models, gpt2 = client
    r = c.post("/api/patching", json={"model": gpt2, "length": 4})
    assert r.status_code == 200, r.text
    hf = models.self_attention[gpt2].model
    assert len(r.json()["heads"]["cells"]) == hf.config.n_layer * hf.config.n_head
