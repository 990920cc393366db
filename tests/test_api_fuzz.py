"""The explorer's API never answers 5xx and every refusal is ``{"error": "..."}``, proven by fuzzers: requests
generated from its own OpenAPI schema (Schemathesis) and request bodies whose text fields are arbitrary Unicode
(lone surrogates, zero-width, direction marks, controls: :mod:`fuzzing`), over tiny models. ``benchmarks/fuzz.py``
runs the same with thousands of examples."""

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from fuzzing import bodies, check_answer, fuzz_app, post

schemathesis = pytest.importorskip("schemathesis")
FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return fuzz_app(tmp_path_factory.mktemp("fuzz"))


def test_odd_text_gets_its_422_with_what_is_wrong(app):
    client, translators, readers = app
    tr = translators[0]
    cases = [
        (
            "/api/translate",
            {"text": "\ud800", "model": tr, "beam": 1},
            "text is not valid Unicode: lone surrogate U+D800 at position 0",
        ),
        (
            "/api/translate",
            {"text": "Hola", "target": "a\udcff", "model": tr, "beam": 1},
            "target is not valid Unicode",
        ),
        ("/api/translate", {"text": "Hola", "model": "\ud800"}, "model is not valid Unicode"),
        ("/api/self-attention", {"text": "x\udfff"}, "lone surrogate U+DFFF at position 1"),
        ("/api/generate", {"text": "\ud800"}, "not valid Unicode"),
    ]
    for text in ["\u200b", "\ufeff", "\x01\x02\x7f", "\u200f\u200e", "\u200b\u200c\ufeff"]:
        # attnkit's sentencepiece normaliser (nmt_nfkc) drops them all: nothing left to read
        cases += [
            ("/api/translate", {"text": text, "model": tr, "beam": b}, "the text has no word the") for b in (1, 4)
        ]
        cases += [
            ("/api/translate", {"text": "Hola", "target": text, "model": tr, "beam": 1}, "the target has no word")
        ]
    for route, body, words in cases:
        r = post(client, route, body)
        assert r.status_code == 422, (route, body, r.text)
        assert r.json() == {"error": r.json()["error"]} and words in r.json()["error"], (route, body, r.text)
    # a Hugging Face tokenizer may read some of them as a piece (an answer), or as nothing (the same 422)
    for text in ["\u200b", "\ufeff", "\x01\x02\x7f", "\u200f\u200e"]:
        for route, name in [("/api/translate", translators[1]), *[("/api/self-attention", n) for n in readers]]:
            r = post(client, route, {"text": text, "model": name} | ({"beam": 1} if "translate" in route else {}))
            assert r.status_code == 200 or (r.status_code == 422 and "no word the model can read" in r.text), r.text


@pytest.mark.parametrize("text", ["Hola \u0301\u0308", "\u202eHola\u202c", "ما هذا", "Dios\u200b luz", "\U0001f600"])
def test_combining_marks_rtl_and_emoji_are_text_like_any_other(app, text):
    client, translators, readers = app
    for name in translators:
        assert post(client, "/api/translate", {"text": text, "model": name, "beam": 1}).status_code == 200
    for name in readers:
        assert post(client, "/api/self-attention", {"text": text, "model": name}).status_code == 200


@FUZZ
@given(data=st.data())
def test_any_unicode_in_any_text_field_is_an_answer_or_a_4xx(app, data):
    client, translators, readers = app
    route, body = data.draw(bodies(translators, readers))
    problem = check_answer(post(client, route, body))
    assert problem is None, (route, body, problem)


@pytest.fixture(scope="module")
def openapi(app):
    client = app[0]
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app, headers={"Host": "127.0.0.1"})
    return st.one_of([op.ok().as_strategy() for op in schema.get_all_operations()])


@FUZZ
@given(data=st.data())
def test_requests_generated_from_the_openapi_schema_never_get_a_5xx(openapi, data):
    case = data.draw(openapi)
    problem = check_answer(case.call(base_url="http://127.0.0.1"))
    assert problem is None, (case.method, case.path, case.query, case.body, problem)
