"""``attnkit.service``: typed requests (checked when made), ``analyse(model, request) -> Analysis``, and the
explorer's answers built from an analysis: the same numbers as the path they replace (a reference made by the
earlier code, ``golden/service_analyse.json``), typed records across the worker boundary, layers from 1."""

from __future__ import annotations

import asyncio
import json
import pickle
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch

from attnkit.alignment.gold import load_gold
from attnkit.errors import InputError
from attnkit.explorer import worker
from attnkit.explorer.jobs import JobQueue
from attnkit.explorer.loading import ModelSpec as LoadSpec
from attnkit.explorer.options import ServeOptions
from attnkit.explorer.payload import caption_answer, translation_answer
from attnkit.explorer.routes.translate import TranslateRequest
from attnkit.service import (
    CaptionAnalysis,
    CaptionRequest,
    MethodOptions,
    Model,
    ModelKind,
    ModelSpec,
    TranslationAnalysis,
    TranslationRequest,
    analyse,
)
from attnkit.tasks.captioning import Captioner
from attnkit.tasks.translation import Translator

GOLDEN = Path(__file__).parent / "golden" / "service_analyse.json"
SOURCE = "Jesús lloró."


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def transformer() -> Model:
    return Model("transformer-es-en", ModelKind.TRANSLATOR, Translator.load("transformer-es-en"), ModelSpec("t"))


def _same(new, old, path="answer"):
    """``new`` equals ``old`` field by field, numbers within the answers' rounding (``new`` as JSON reads it).
    ``new``: the schema's object the route returns; ``old``, the earlier code's dict, is read as the route sent
    it (through the same schema class, which fills the fields the dict left to their defaults)."""
    if path == "answer":
        old = type(new).model_validate(old).model_dump(mode="json")
        new = json.loads(json.dumps(new.model_dump(mode="json")))
    if isinstance(old, dict):
        assert isinstance(new, dict) and set(new) == set(old), f"{path}: keys {set(new) ^ set(old)}"
        for k in old:
            _same(new[k], old[k], f"{path}.{k}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(new) == len(old), path
        for i, (a, b) in enumerate(zip(new, old)):
            _same(a, b, f"{path}[{i}]")
    elif path.endswith(".seconds"):  # wall-clock time: only its type
        assert isinstance(new, float), path
    elif isinstance(old, float) and not isinstance(new, bool):
        assert new == pytest.approx(old, abs=2e-5), path
    else:
        assert new == old, path


@pytest.mark.parametrize(
    "field, kwargs",
    [
        ("source", {"source": "  "}),
        ("source", {"source": 3}),
        ("beam", {"source": "x", "beam": 0}),
        ("beam", {"source": "x", "beam": True}),
        ("target", {"source": "x", "target": ""}),
        ("layer", {"source": "x", "heads": True, "layer": 0}),
        ("max_numbers", {"source": "x", "max_numbers": -1}),
        ("method", {"source": "x", "method": 7}),
    ],
)
def test_a_translation_request_is_checked_when_made(field, kwargs):
    with pytest.raises(ValueError, match=field):
        TranslationRequest(**kwargs)


def test_a_caption_request_is_checked_when_made():
    CaptionRequest(torch.zeros(1, 8, 8), options=MethodOptions(steps=4))
    with pytest.raises(ValueError, match="layer and head are for Transformer translators"):
        CaptionRequest(torch.zeros(1, 8, 8), options=MethodOptions(head=1))
    with pytest.raises(ValueError, match="steps"):
        MethodOptions(steps=0)
    for field, kwargs in [
        ("image", {"image": torch.zeros(8, 8)}),
        ("image", {"image": torch.zeros(1, 8, 9)}),
        ("image", {"image": [[0.0]]}),
        ("beam", {"image": torch.zeros(1, 8, 8), "beam": 0}),
        ("scene", {"image": torch.zeros(1, 8, 8), "scene": 3}),
    ]:
        with pytest.raises(ValueError, match=field):
            CaptionRequest(**kwargs)


def test_analyse_gives_the_numbers_of_the_earlier_path(golden, transformer):
    """Search, forced decoding, per-head maps, an attribution, a gold verse's links, a caption: the answers
    built from ``analyse`` equal the earlier code's (layers from 1 now: its layer 0 is layer 1)."""
    a = analyse(transformer, TranslationRequest(SOURCE, beam=2, heads=True, method="ATTENTION"))
    assert isinstance(a, TranslationAnalysis) and a.request.method == "attention"  # canonical, checked once
    assert a.attribution is not None and a.attention is not None and a.seconds > 0
    _same(translation_answer(a), golden["transformer"])

    layer = golden["transformer_layer"]["heads"]["layer"]  # the earlier 0-based index
    one = translation_answer(analyse(transformer, TranslationRequest(SOURCE, beam=2, heads=True, layer=layer + 1)))
    old = golden["transformer_layer"]
    assert one.heads.layer == layer + 1
    _same(one.model_copy(update={"model": "t", "heads": one.heads.model_copy(update={"layer": layer})}), old)

    verse = load_gold()[0]
    rnn = Model("r", ModelKind.TRANSLATOR, Translator.load("rnnsearch-es-en"), ModelSpec("r"))
    forced = TranslationRequest(" ".join(verse.source), target=" ".join(verse.target), method="attention")
    a = analyse(rnn, forced)
    assert a.forced and a.gold is not None
    _same(translation_answer(a), golden["rnnsearch_gold"])

    cm = Captioner.load("captioner-soft")
    image = torch.rand(1, cm.canvas, cm.canvas, generator=torch.Generator().manual_seed(0))
    c = analyse(Model("c", ModelKind.CAPTIONER, cm, ModelSpec("c")), CaptionRequest(image, method="attention"))
    assert isinstance(c, CaptionAnalysis) and c.attention.shape == (len(c.words), c.grid[0] * c.grid[1])
    _same(caption_answer(c), golden["caption"])
    # its own (greedy) caption forced: the same words, and the same α at every step
    again = analyse(Model("c", ModelKind.CAPTIONER, cm, ModelSpec("c")), CaptionRequest(image, target=c.caption))
    assert again.words == c.words and again.caption == c.caption
    torch.testing.assert_close(again.attention, c.attention, atol=1e-5, rtol=0)


def test_layers_count_from_one_in_requests_and_answers(transformer):
    a = analyse(transformer, TranslationRequest(SOURCE, beam=1, heads=True))
    cross = a.attention.maps.cross  # (L, H, T, S)
    L = cross.shape[0]
    last = translation_answer(a, heads=True, layer=L).heads
    assert last.layer == L and last.rollout is None
    torch.testing.assert_close(torch.tensor(last.cross), cross[L - 1 : L], atol=1e-4, rtol=0)
    with pytest.raises(InputError, match=f"layer must be in 1..{L}"):
        analyse(transformer, TranslationRequest(SOURCE, beam=1, heads=True, layer=L + 1))
    with pytest.raises(InputError, match=f"1..{L}"):
        translation_answer(a, heads=True, max_numbers=10)  # too large: ask for one layer at a time
    schema = TranslateRequest.model_json_schema()["properties"]["layer"]  # the HTTP API's field
    assert {"minimum": 1, "type": "integer"} in schema["anyOf"] and "1-based" in schema["description"]


def test_the_worker_receives_and_returns_typed_records(monkeypatch, transformer):
    """A heavy job crosses to the worker as ``(label, slot, request, spec)`` and comes back as an analysis
    (which pickles, as the pool sends it); the job's kind comes from the request's type and method."""
    spec = LoadSpec("transformer-es-en")
    monkeypatch.setattr(worker, "_MODELS", {"t": (spec, transformer)})
    monkeypatch.setattr(worker, "_SPECS", {"t": spec})
    monkeypatch.setattr(worker, "_PROGRESS", [0.0])
    sent = []

    class Pool:  # runs the job in this process, as pebble's pool would in a worker
        def schedule(self, fn, args, timeout):
            sent.append(args)
            future = Future()
            future.set_result(pickle.loads(pickle.dumps(fn(*args))))
            return future

    queue = JobQueue(ServeOptions(workers=1, queue=2, job_timeout=60), {"t": spec})
    monkeypatch.setattr(queue, "start", lambda: Pool())

    async def connected() -> bool:
        return False

    request = TranslationRequest(SOURCE, beam=1, method="attention")
    analysis = asyncio.run(queue.run(None, None, "t", request, connected))
    ((label, slot, got, got_spec),) = sent
    assert (label, slot, got, got_spec) == ("t", 0, request, spec)
    assert isinstance(analysis, TranslationAnalysis) and analysis.spec == spec
    assert analysis.attribution.method == "attention" and analysis.model == "t"
    assert set(queue.recent) == {"translation t attention"}
    with pytest.raises(TypeError, match="service request"):
        worker.run("t", 0, {"source": SOURCE}, spec)  # an untyped dict is refused


def test_a_generation_job_is_typed_both_ways_and_answers_as_before(monkeypatch):
    """A decoder-only model's attributed continuation crosses the worker boundary as a GenerationRequest and
    comes back as a GenerationAnalysis; its answer equals the light lane's (generate_answer), over the
    model's own continuation; an unknown method is refused by name."""
    from attnkit.explorer.self_attention import continuation_answer, generate_answer
    from attnkit.service import GenerationAnalysis, GenerationRequest, open_model
    from hf_tiny import saved_tiny

    model = open_model(str(saved_tiny("gpt2")))
    spec = model.spec
    monkeypatch.setattr(worker, "_MODELS", {"g": (spec, model)})
    monkeypatch.setattr(worker, "_SPECS", {"g": spec})
    monkeypatch.setattr(worker, "_PROGRESS", [0.0])
    request = GenerationRequest("Jesús lloró.", max_new_tokens=3, method="attention")
    analysis = pickle.loads(pickle.dumps(worker.run("g", 0, request, spec)))
    assert isinstance(analysis, GenerationAnalysis) and analysis.request == request and analysis.model == "g"
    assert analysis.attribution is analysis.attention or analysis.attribution.method == "attention"
    light = generate_answer(model.impl, "Jesús lloró.", model="g", max_new_tokens=3, method="attention")
    answer = continuation_answer(analysis)
    for a in (answer, light):  # the one field that differs between two runs: the method's own seconds
        a.attribution.seconds = 0.0
    assert answer == light
    ids, prompt_len = model.impl.generate("Jesús lloró.", max_new_tokens=3)
    assert light.written == analysis.continuation and len(light.written_pieces) == len(ids) - prompt_len
    with pytest.raises(Exception, match=r"unknown attribution method 'nope'"):
        worker.run("g", 0, GenerationRequest("Jesús lloró.", max_new_tokens=1, method="nope"), spec)
