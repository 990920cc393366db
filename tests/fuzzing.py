"""What the fuzz tests (``test_api_fuzz.py``, ``test_odd_text.py``) and ``benchmarks/fuzz.py`` share: text
strategies over all of Unicode (lone surrogates, zero-width, direction marks, controls, combining marks
included), the explorer app over tiny models, a request body per route, and the one property every answer must
have (no 5xx; an error is ``{"error": "..."}``).
"""

from __future__ import annotations

import json
from pathlib import Path

import hypothesis.strategies as st

#: characters a user's text can hold that most tests never type: lone surrogates (JSON escapes them; a command
#: line that is not UTF-8 brings U+DC80-U+DCFF), zero-width and direction marks, a byte-order mark, C0/C1
#: controls, combining marks alone, line and paragraph separators, odd spaces
ODD = [
    "\ud800", "\udbff", "\udc00", "\udcff", "\udfff",
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff",
    "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2069",
    "\x00", "\x01", "\x07", "\x1b", "\x7f", "\x85", "\x9f",
    "\u0301", "\u0308", "\u20dd", "\u0e31",
    "\u2028", "\u2029", "\u00a0", "\u3000", "\t", "\n", "\r", " ",
    "\ufffd", "\uffff", "\U0001f600", "\U0010ffff",
]  # fmt: skip

#: any character, surrogates (category Cs) included, with the odd ones and plain Spanish letters drawn often
CHARACTERS = st.one_of(
    st.characters(exclude_categories=()),
    st.sampled_from(ODD),
    st.sampled_from("abcdefghijklmnopqrstuvwxyzáéíóúñ .,"),
)


def texts(max_size: int = 24) -> st.SearchStrategy[str]:
    """Arbitrary Unicode text, lone surrogates included: odd characters alone, mixed with words, or empty."""
    return st.one_of(
        st.text(CHARACTERS, max_size=max_size),
        st.lists(st.sampled_from(ODD), min_size=1, max_size=4).map("".join),
        st.tuples(st.sampled_from(["Hola", "Dios", "luz", "y"]), st.text(CHARACTERS, max_size=6)).map(" ".join),
    )


def fuzz_app(root: Path, *, hf: bool = True):
    """``(TestClient, translation model names, self-attention model names)``: the explorer over a tiny
    Transformer translator (and, with ``hf``, tiny Hugging Face BERT, GPT-2 and Marian models), limits small
    enough that a fuzzed request is quick (a beam of at most 4, never a heavy job for the beam)."""
    from fastapi.testclient import TestClient

    from attnkit.explorer.app import ServeOptions, create_app, load_models
    from tiny import saved_tiny_transformer

    folders = [saved_tiny_transformer(root / "tiny-transformer")]
    if hf:
        from hf_tiny import saved_tiny

        folders += [saved_tiny("marian"), saved_tiny("bert"), saved_tiny("gpt2")]
    models = load_models([str(f) for f in folders])
    options = ServeOptions(
        max_beam=4, heavy_beam=4, max_text_chars=200, max_target_chars=200, max_tokens=48, max_new_tokens=3
    )
    app = create_app(models, options=options, verses=[], scenes=[])
    client = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)
    return client, list(models.translators), list(models.self_attention)


def bodies(translators: list[str], self_attention: list[str]) -> st.SearchStrategy[tuple[str, dict]]:
    """``(route, JSON body)`` for every route that takes text, each field drawn from its type's values and
    beyond (a model name that is odd text, a beam out of range), the text fields from :func:`texts`."""
    text = texts()
    name = lambda names: st.one_of(st.none(), st.sampled_from(names), texts(8))
    translate = st.fixed_dictionaries(
        {"text": text},
        optional={
            "model": name(translators),
            "beam": st.integers(-1, 5),
            "target": st.one_of(st.none(), text),
            "heads": st.booleans(),
            "layer": st.one_of(st.none(), st.integers(-1, 3)),
            "method": st.one_of(st.none(), texts(8)),
        },
    )
    markup = st.sampled_from(
        ["<p>", "</p>", "<b>", "</b>", "<i>", "<br/>", "<x/>", "</i>", "**", "`", "[", "](u)", "&amp;"]
    )
    document = st.fixed_dictionaries(
        {
            "document": st.lists(st.one_of(text, markup), max_size=6).map("".join),
            "format": st.one_of(st.sampled_from(["html", "xml", "markdown", "xliff"]), texts(6)),
        },
        optional={
            "model": name(translators),
            "beam": st.integers(-1, 5),
            "method": st.one_of(st.none(), st.sampled_from(["attention", "shift", "guided"]), texts(8)),
        },
    )
    routes = [st.tuples(st.just("/api/translate"), translate), st.tuples(st.just("/api/translate-document"), document)]
    if self_attention:
        reading = st.fixed_dictionaries(
            {"text": text}, optional={"model": name(self_attention), "layer": st.one_of(st.none(), st.integers(-1, 3))}
        )
        generating = st.fixed_dictionaries(
            {"text": text},
            optional={
                "model": name(self_attention),
                "max_new_tokens": st.one_of(st.none(), st.integers(0, 4)),
                "method": st.one_of(st.none(), st.just("attention"), texts(8)),
            },
        )
        routes += [st.tuples(st.just("/api/self-attention"), reading), st.tuples(st.just("/api/generate"), generating)]
    return st.one_of(routes)


def post(client, route: str, body: dict):
    """POST ``body`` as JSON with every non-ASCII character escaped, so that a lone surrogate travels as the JSON
    escape a browser would send (``"\\ud800"``)."""
    return client.post(route, content=json.dumps(body).encode("ascii"), headers={"Content-Type": "application/json"})


def check_answer(response) -> str | None:
    """What is wrong with an answer (None: nothing): a 5xx, a body that is not JSON, an error that is not
    ``{"error": "..."}``."""
    if response.status_code >= 500:
        return f"{response.status_code}: {response.text[:300]}"
    kind = response.headers.get("content-type", "")
    kind = kind[0] if isinstance(kind, list) and kind else kind  # Schemathesis gives each header as a list
    if str(kind).startswith("application/x-ndjson"):  # /api/flow/stream: a line each
        try:
            lines = [json.loads(x) for x in response.text.splitlines() if x.strip()]
        except ValueError:
            return f"{response.status_code}: a line that is not JSON: {response.text[:300]}"
        if not lines or lines[-1].get("event") not in ("done", "error") or lines[-1].get("status", 0) >= 500:
            return f"{response.status_code}: a stream that ends without its answer: {response.text[-300:]}"
        return None
    try:
        body = response.json()
    except ValueError:
        return f"{response.status_code}: not JSON: {response.text[:300]}"
    if response.status_code >= 400:
        if not (isinstance(body, dict) and set(body) == {"error"} and isinstance(body["error"], str)):
            return f"{response.status_code}: not an error body: {response.text[:300]}"
        if "Traceback" in body["error"]:
            return f"{response.status_code}: a traceback: {body['error'][:300]}"
    return None
