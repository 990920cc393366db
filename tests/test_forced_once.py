"""One translation request, one record: the source tokenised once and the model forced once.

A page request (``POST /api/translate`` through FastAPI's TestClient, its heavy job run in this process on the
served model, the request pickled as the worker would get it) and the Python API's ``explain`` are counted
with wrappers around the real calls: the tokenizer's ``encode``, the search (``translate_ids``), the model's
teacher-forced pass (``attention_maps``), the decompositions' trace (``trace_transformer``) and the last
decoder layer's feed-forward outside the search (which value zeroing reruns, batched over the source pieces). The answers are
compared bit for bit with the numbers the code before the record gave, computed here as it computed them:
the maps by the translator's own ``attention``, the scores by the methods' formulas over a fresh pass or a
fresh trace.
"""

import pickle
from collections import Counter

import pytest
import torch

import attnkit.attribution.trace as trace_module
from attnkit.attribution import decomposition, explain
from attnkit.attribution.result import normalise_rows
from attnkit.data.tokenizer import Tokenizer
from attnkit.errors import InputError
from attnkit.explorer.app import create_app, load_models
from attnkit.explorer.state import served
from attnkit.service import ModelKind, TranslationRequest, analyse
from tiny import saved_tiny_transformer

fastapi_testclient = pytest.importorskip("fastapi.testclient")
SOURCE = "Y dijo Dios: Sea la luz: y fué la luz."
TARGET = "And God said, Let there be light."
DECOMPOSED = ("alti_plus", "value_zeroing")


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The explorer over one tiny saved Transformer, its heavy jobs run in this process (``analyses`` keeps
    each job's analysis)."""
    folder = saved_tiny_transformer(tmp_path_factory.mktemp("tiny") / "tiny")
    models = load_models([str(folder)])
    name = next(iter(models.translators))
    application = create_app(models, verses=[])
    analyses = []

    async def in_process(slot, label, request, disconnected, spec=None, stream=None):
        request = pickle.loads(pickle.dumps(request))  # as a worker process receives it
        analyses.append(analyse(served(label, ModelKind.TRANSLATOR, models.translators[label], spec), request))
        return analyses[-1]

    application.state.explorer.jobs._execute = in_process
    client = fastapi_testclient.TestClient(application, base_url="http://127.0.0.1")
    return client, models.translators[name], name, analyses


@pytest.fixture
def counts(app, monkeypatch):
    """The calls made while a test runs, by kind (see the module docstring)."""
    tr = app[1]
    seen = Counter()
    searching = [False]  # the search's decoder steps are not counted as feed-forward reruns

    def counted(kind, fn):
        def call(*args, **kwargs):
            if kind == "last feed-forward" and searching[0]:
                return fn(*args, **kwargs)
            seen[kind] += 1
            searching[0] = kind == "searches"
            try:
                return fn(*args, **kwargs)
            finally:
                searching[0] = False

        return call

    encode = Tokenizer.encode

    def counted_encode(self, text, *args, **kwargs):
        seen["target encodes" if text.strip() == TARGET else "source encodes"] += 1
        return encode(self, text, *args, **kwargs)

    monkeypatch.setattr(Tokenizer, "encode", counted_encode)
    monkeypatch.setattr(tr, "translate_ids", counted("searches", tr.translate_ids))
    monkeypatch.setattr(tr.model, "attention_maps", counted("forced passes", tr.model.attention_maps))
    monkeypatch.setattr(trace_module, "trace_transformer", counted("traces", trace_module.trace_transformer))
    last = tr.model.decoder.layers[-1]
    monkeypatch.setattr(last, "_ff", counted("last feed-forward", last._ff))
    return seen


def _expected(method, target, *, view=True, source_len=0):
    """What one request must call: the source tokenised once, the target (given) once, a search only
    without a target, one forced pass for the view's maps (``view``; without a view, only attention's), a
    trace only for a decomposition; the last decoder layer's feed-forward runs in the forced pass, twice in the
    trace (the model's own pass, whose layer inputs and outputs the replay starts from and is checked against,
    then the replay), and once more for each of the ``source_len`` source pieces in value zeroing's reruns
    (one zeroed piece a run, as the language models' value zeroing runs)."""
    decomposed = method in DECOMPOSED
    forced = int(view or not decomposed)
    return Counter(
        {
            "source encodes": 1,
            "target encodes": int(target is not None),
            "searches": int(target is None),
            "forced passes": forced,
            "traces": int(decomposed),
            "last feed-forward": forced + 2 * int(decomposed) + source_len * int(method == "value_zeroing"),
        }
    )


def _reference_scores(model, method, src, tgt_in):
    """The method's scores as the code before the record computed them: its formula over a fresh pass (the
    last layer's cross-attention, head mean) or a fresh trace, rows clamped and normalised as ``explain``
    does."""
    if method == "attention":
        maps = model.attention_maps(src[None], torch.tensor([len(src)]), tgt_in[None])
        rows = maps.cross[0, -1].float().mean(0)  # (T, S)
    else:
        trace = trace_module.trace_transformer(model, src, tgt_in)
        rows = decomposition.alti_plus(trace)[0] if method == "alti_plus" else decomposition.value_zeroing(trace)
    return normalise_rows(rows.detach().float().cpu().clamp_min(0.0))


@pytest.mark.parametrize("target", [None, TARGET], ids=["searched", "forced"])
@pytest.mark.parametrize("method", ["attention", "alti_plus", "value_zeroing"])
def test_a_page_request_tokenises_once_and_forces_once(app, counts, method, target):
    client, tr, name, analyses = app
    body = {"text": SOURCE, "model": name, "beam": 2, "method": method, **({"target": target} if target else {})}
    r = client.post("/api/translate", json=body)
    assert r.status_code == 200, r.text
    analysis = analyses[-1]
    assert counts == _expected(method, target, source_len=len(analysis.source_pieces))
    counts.clear()  # the references below are counted no more
    tokens = tr.tokenizer.encode(target) if target else tr.translate([SOURCE], beam_size=2)[0]["tokens"]
    before = tr.attention(SOURCE, tokens)  # the maps' own pass, as the view was made before
    for field in ("alignment", "enc_self", "dec_self", "cross"):
        assert torch.equal(getattr(analysis.attention.maps, field), getattr(before.maps, field)), field
    assert analysis.source_pieces == before.source_pieces and analysis.target_pieces == before.target_pieces
    src = torch.tensor(tr.encode_sources([SOURCE])[0])
    tgt = torch.tensor(tokens)
    tgt_in = torch.cat([tgt.new_tensor([tr.tokenizer.bos_id]), tgt[:-1]])
    assert torch.equal(analysis.attribution.scores, _reference_scores(tr.model, method, src, tgt_in))
    assert r.json()["attribution"]["method"] == method


@pytest.mark.parametrize("target", [None, TARGET], ids=["searched", "forced"])
def test_a_plain_page_request_tokenises_once(app, counts, target):
    """No method: the fast lane's request, alone in its batch, reads the route's ids too."""
    client, _, name, _ = app
    r = client.post("/api/translate", json={"text": SOURCE, "model": name, "beam": 2, "target": target})
    assert r.status_code == 200, r.text
    assert counts == _expected(None, target)


@pytest.mark.parametrize("target", [None, TARGET], ids=["searched", "forced"])
@pytest.mark.parametrize("method", ["attention", "alti_plus", "value_zeroing"])
def test_explain_tokenises_once_and_forces_once(app, counts, method, target):
    """The Python API: no view to draw, so a decomposition's one pass is its trace, and attention's its maps."""
    tr = app[1]
    att = explain(tr, SOURCE, target=target, method=method, beam=2)
    assert counts == _expected(method, target, view=False, source_len=len(att.source))
    counts.clear()
    tokens = tr.tokenizer.encode(target) if target else tr.translate([SOURCE], beam_size=2)[0]["tokens"]
    src, tgt = torch.tensor(tr.encode_sources([SOURCE])[0]), torch.tensor(tokens)
    tgt_in = torch.cat([tgt.new_tensor([tr.tokenizer.bos_id]), tgt[:-1]])
    assert torch.equal(att.scores, _reference_scores(tr.model, method, src, tgt_in))


def test_a_request_checks_the_ids_it_carries():
    with pytest.raises(InputError, match="source_ids"):
        TranslationRequest(SOURCE, source_ids=(1, -2))
    with pytest.raises(InputError, match="source_ids"):
        TranslationRequest(SOURCE, source_ids=[1, 2])
    with pytest.raises(InputError, match="give the target too"):
        TranslationRequest(SOURCE, target_ids=(5,))


def test_the_lanes_batch_tokenises_each_source_once(app, counts):
    """Plain translations batched in the server's fast lane: one search and one forced pass over the batch,
    each source tokenised once for both, and the same tokens and maps as the batch's search and padded forced
    pass from the texts (``translate``, ``attention_batch``), which tokenised each source twice."""
    from attnkit.explorer.lane import FastLane, _Item

    tr = app[1]
    sources = [SOURCE, "En el principio creó Dios los cielos y la tierra."]
    extras = FastLane._search_batch([_Item(None, (), {}, (tr, 2, s)) for s in sources])
    assert counts == Counter({"source encodes": 2, "searches": 1, "forced passes": 1, "last feed-forward": 1})
    counts.clear()
    wants = tr.translate(sources, beam_size=2)  # the batch as one search (a batch's length cap is its own)
    befores = tr.attention_batch(sources, [w["tokens"] for w in wants])  # the batch's one padded pass, as before
    for s, extra, want, before in zip(sources, extras, wants, befores):
        assert extra["result"]["tokens"] == want["tokens"] and extra["result"].source == s
        assert torch.equal(extra["forced"].maps.cross, before.maps.cross)


@pytest.mark.parametrize("method", DECOMPOSED)
def test_a_pairs_trace_is_not_read_again_once_the_weights_change(app, method):
    """The sanity check re-draws a copy's layers in place, stage by stage, and explains the same pairs with
    it: each stage's scores must be that stage's weights', equal to a fresh pair's, not the kept trace's."""
    import copy

    from attnkit.attribution.explanation_quality import _randomise, randomisation_stages
    from attnkit.attribution.forced import forced_translation
    from attnkit.tasks.translation import Translator

    tr = app[1]
    shadow = copy.deepcopy(tr.model).eval()
    twin = Translator(shadow, tr.tokenizer, src_tokenizer=tr.src_tokenizer)
    pair = forced_translation(tr, SOURCE, TARGET)
    generator = torch.Generator().manual_seed(0)
    before = explain(twin, "", method=method, pair=pair).scores
    changed = 0
    for stage in randomisation_stages(shadow)[:4]:
        _randomise(stage, generator)
        kept = explain(twin, "", method=method, pair=pair).scores  # the pair has a trace of earlier weights
        fresh = explain(twin, "", method=method, pair=forced_translation(tr, SOURCE, TARGET)).scores
        assert torch.equal(kept, fresh)
        changed += not torch.equal(kept, before)
        before = kept
    assert changed >= 1  # the stages re-drew layers the decomposition reads
