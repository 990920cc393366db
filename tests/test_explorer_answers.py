"""The explorer's routes answer the schema's own objects (:mod:`attnkit.explorer.schema`), each field defined
once: every route's answer class (and every class inside it) refuses a field it does not define
(``extra="forbid"``); each answer, as sent, validates against its class; and its numbers are the model's own,
read from an eager forward of the same tokens (attention and step scores by hand: softmax, entropy), or from
the typed analysis the builder was given, not from the builder."""

from __future__ import annotations

import base64
import io

import pytest
import torch
from pydantic import BaseModel

from attnkit.explorer import schema
from attnkit.hf import load_self_attention
from hf_tiny import build_tiny, saved_tiny

TEXT = "Jesús lloró."


@pytest.fixture(scope="module")
def app_client():
    from fastapi.testclient import TestClient

    from attnkit.explorer.app import create_app, load_models
    from attnkit.explorer.options import ServeOptions

    models = load_models([str(saved_tiny("bert")), str(saved_tiny("gpt2")), "rnnsearch-es-en", "captioner-soft"])
    app = create_app(models, verses=[], options=ServeOptions(max_new_tokens=5))
    with TestClient(app, base_url="http://127.0.0.1:8000") as c:
        yield c


def _eager(ids: list[int]):
    """The tiny GPT-2's own forward (eager attention): ``(attentions (L, H, n, n), logits (n, V))`` in float64."""
    model, _ = build_tiny("gpt2", attn_implementation="eager")
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    return torch.stack(out.attentions)[:, 0].double(), out.logits[0].double()


def test_every_answer_class_refuses_fields_it_does_not_define():
    from fastapi.routing import APIRoute

    from attnkit.explorer.routes import ROUTERS

    answers = {
        r.path: r.response_model
        for router in ROUTERS
        for r in router.routes
        if isinstance(r, APIRoute) and r.response_model is not None
    }
    assert answers["/api/generate"] is schema.Continuation and answers["/api/translate"] is schema.Translation
    for path in ("/api/models", "/api/caption", "/api/self-attention", "/api/repeated"):
        assert path in answers
    for path, model in answers.items():
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue  # e.g. dict answers (/api/limits) name no class
        assert issubclass(model, schema._Strict), path
        js = model.model_json_schema()
        for name, part in [(model.__name__, js), *js.get("$defs", {}).items()]:
            if "properties" in part:
                assert part.get("additionalProperties") is False, f"{path}: {name}"


def test_generate_answers_a_continuation_with_the_models_own_attention(app_client):
    r = app_client.post("/api/generate", json={"text": TEXT, "model": "tiny-gpt2", "max_new_tokens": 3})
    assert r.status_code == 200, r.text
    sent = r.json()
    c = schema.Continuation.model_validate(sent)  # strict: no field the class does not define
    assert set(sent) == set(schema.Continuation.model_fields)  # the translation stand-in's fields are gone
    sa = load_self_attention(str(saved_tiny("gpt2")))
    ids, p = sa.generate(TEXT, max_new_tokens=3)
    n = len(ids)
    assert (c.context, c.written) == (TEXT, sa.tokenizer.decode(ids[p:]))
    assert c.context_pieces == sa.pieces_of(ids[:-1]) and c.written_pieces == sa.pieces_of(ids[p:])
    assert c.decoding == schema.Decoding(mode="greedy", seed=None) and c.has_attention
    att, logits = _eager(ids)
    # row t: the last layer's head mean at position p - 1 + t, which predicted written token t (causal: zeros after)
    want = att[-1].mean(0)[p - 1 : n - 1, : n - 1]  # (T, S)
    torch.testing.assert_close(torch.tensor(c.attention, dtype=torch.float64), want, atol=1e-4, rtol=0)
    probs = torch.softmax(logits[p - 1 : n - 1], dim=-1)  # (T, V)
    written = torch.tensor(ids[p:])
    got = torch.tensor(c.step_scores.probability, dtype=torch.float64)
    torch.testing.assert_close(got, probs[torch.arange(n - p), written], atol=1e-4, rtol=0)
    entropy = -(probs * probs.clamp_min(1e-300).log()).sum(-1)  # H_t = −Σ_v p_v log p_v
    torch.testing.assert_close(torch.tensor(c.step_scores.entropy, dtype=torch.float64), entropy, atol=1e-4, rtol=0)


def test_a_forced_text_is_a_continuation_of_its_first_token(app_client):
    r = app_client.post("/api/generate", json={"text": TEXT, "model": "tiny-gpt2", "mode": "forced"})
    assert r.status_code == 200, r.text
    c = schema.Continuation.model_validate(r.json())
    sa = load_self_attention(str(saved_tiny("gpt2")))
    ids, _ = sa.encode(TEXT)
    n = len(ids)
    assert c.decoding.mode == "forced" and c.context == TEXT
    assert c.context_pieces == sa.pieces_of(ids[:-1]) and c.written_pieces == sa.pieces_of(ids[1:])
    att, _ = _eager(ids)
    want = att[-1].mean(0)[: n - 1, : n - 1]  # every position predicts the next token
    torch.testing.assert_close(torch.tensor(c.attention, dtype=torch.float64), want, atol=1e-4, rtol=0)


def test_the_self_attention_and_repeated_answers_are_the_models_own_maps(app_client):
    from attnkit.service import RepeatedRequest, analyse, open_model

    r = app_client.post("/api/self-attention", json={"text": TEXT, "model": "tiny-gpt2", "layer": 2})
    one = schema.SelfAttention.model_validate(r.json())
    sa = load_self_attention(str(saved_tiny("gpt2")))
    ids, pieces = sa.encode(TEXT)
    att, _ = _eager(ids)
    assert one.pieces == pieces and [x.layer for x in one.layers] == [2] and one.head_mean is None
    torch.testing.assert_close(torch.tensor(one.layers[0].heads, dtype=torch.float64), att[1], atol=1e-4, rtol=0)

    r = app_client.post("/api/repeated", json={"model": "tiny-gpt2", "length": 4, "seed": 3})
    rep = schema.SelfAttention.model_validate(r.json())
    analysis = analyse(open_model(str(saved_tiny("gpt2"))), RepeatedRequest(4, seed=3))
    att, _ = _eager(analysis.ids)
    shown = torch.tensor([x.heads for x in rep.layers], dtype=torch.float64)  # (L, H, 8, 8)
    torch.testing.assert_close(shown, att, atol=1e-4, rtol=0)
    assert rep.repeated.stripe == analysis.stripe() and rep.repeated.length == 4
    assert (rep.repeated.best.layer, rep.repeated.best.head) == analysis.best[:2]


def test_translate_caption_and_models_answers_validate_and_hold_the_analyses_numbers(app_client):
    from PIL import Image

    from attnkit.explorer.routes.caption import decode_image
    from attnkit.service import CaptionRequest, Model, ModelKind, ModelSpec, analyse
    from attnkit.tasks.captioning import Captioner
    from attnkit.tasks.translation import Translator

    models = schema.ModelList.model_validate(app_client.get("/api/models").json()).models
    assert {m.name: m.task for m in models} == {
        "tiny-bert": "self-attention",
        "tiny-gpt2": "self-attention",
        "rnnsearch-es-en": "translation",
        "captioner-soft": "captioning",
    }

    r = app_client.post("/api/translate", json={"text": TEXT, "model": "rnnsearch-es-en", "beam": 1})
    sent = r.json()
    t = schema.Translation.model_validate(sent)
    assert "decoding" not in sent and "step_scores" not in sent  # a continuation's, not a translation's
    tr = Translator.load("rnnsearch-es-en")
    ref = tr.translate([TEXT], beam_size=1)[0]
    own = tr.attention(TEXT, ref["tokens"])  # the model's own forced pass over its translation
    assert t.translation == ref["translation"] and t.target_pieces == own.target_pieces and t.steps is not None
    torch.testing.assert_close(torch.tensor(t.attention), own.maps.alignment.float(), atol=1e-4, rtol=0)

    png = io.BytesIO()
    Image.fromarray((torch.arange(400).reshape(20, 20) % 251).numpy().astype("uint8"), "L").save(png, "PNG")
    body = {"image": base64.b64encode(png.getvalue()).decode(), "model": "captioner-soft", "beam": 1}
    r = app_client.post("/api/caption", json=body)
    assert r.status_code == 200, r.text
    cap = schema.Caption.model_validate(r.json())
    cm = Captioner.load("captioner-soft")
    image = decode_image(png.getvalue(), cm.canvas, 10**6)
    a = analyse(Model("c", ModelKind.CAPTIONER, cm, ModelSpec("c")), CaptionRequest(image))
    h, w = a.grid
    assert cap.words == a.words and cap.grid == (h, w)
    shown = torch.tensor(cap.attention)  # (T, h, w)
    torch.testing.assert_close(shown, a.attention.reshape(len(a.words), h, w).float(), atol=1e-4, rtol=0)
