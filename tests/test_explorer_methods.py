"""Attribution methods in the explorer's API ("method" in /api/translate and /api/caption, the methods in
/api/models, progress and cancellation), and the one way the self-contained page is built."""

import json
import re
import threading
import time

import pytest
import torch

from attnkit.alignment import word_attention
from attnkit.attribution import explain, explain_caption, forced_caption, forced_translation
from attnkit.data.datasets.scenes import load_scenes
from attnkit.explorer import html, schema
from attnkit.explorer.app import create_app, load_models
from tiny import SERVED_IN_TESTS

fastapi_testclient = pytest.importorskip("fastapi.testclient")
SOURCE = "Y dijo Dios: Sea la luz: y fué la luz."


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    models = load_models(SERVED_IN_TESTS)  # no language model: none of these tests reads one
    scenes = load_scenes("test", tmp_path_factory.mktemp("scenes"), n_train=40, n_valid=10, n_test=8)
    client = fastapi_testclient.TestClient(create_app(models, scenes=scenes, verses=[]), base_url="http://127.0.0.1")
    return client, models, scenes


def test_models_list_their_methods(served):
    client, _, _ = served
    info = {m["name"]: [x["name"] for x in m["methods"]] for m in client.get("/api/models").json()["models"]}
    assert info["transformer-es-en"] == [
        "attention",
        "rollout",
        "attention_norm",
        "value_zeroing",
        "attention_flow",
        "attention_relevance",
        "alti_plus",
        "saliency",
        "input_x_gradient",
        "integrated_gradients",
    ]
    assert info["rnnsearch-es-en"][:2] == ["attention", "attention_norm"]
    assert info["rnnencdec-es-en"] == ["saliency", "input_x_gradient", "integrated_gradients"]
    assert info["captioner-soft"] == ["attention", "saliency", "input_x_gradient", "integrated_gradients"]


@pytest.mark.parametrize(("model", "method"), [("transformer-es-en", "alti_plus"), ("rnnencdec-es-en", "saliency")])
def test_translate_with_a_method_gives_its_view(served, model, method):
    client, models, _ = served
    r = client.post("/api/translate", json={"text": SOURCE, "model": model, "beam": 1, "method": method})
    assert r.status_code == 200, r.text
    p = schema.Translation.model_validate(r.json())
    tr = models.translators[model]
    tokens = tr.translate([SOURCE], beam_size=1)[0]["tokens"]
    att = explain(tr, SOURCE, method=method, pair=forced_translation(tr, SOURCE, tokens))
    a = p.attribution
    assert a.method == method and a.needs_gradients == att.needs_gradients
    assert torch.tensor(a.scores) == pytest.approx(att.scores, abs=1e-5)
    words = word_attention(att.scores, p.source_pieces, p.target_pieces)
    assert torch.tensor(a.words) == pytest.approx(words, abs=1e-5)
    assert (p.attention is None) == (model == "rnnencdec-es-en")  # RNNencdec: no attention, yet attributions
    plain = client.post("/api/translate", json={"text": SOURCE, "model": model, "beam": 1}).json()
    assert plain["attribution"] is None and plain["translation"] == p.translation


def test_caption_with_a_method_measures_correctness_on_its_maps(served):
    from attnkit.tasks.captioning import attention_mass_in_box, words_to_items

    client, models, scenes = served
    r = client.post("/api/caption", json={"scene": 1, "model": "captioner-hard", "method": "input_x_gradient"})
    assert r.status_code == 200, r.text
    p = r.json()
    cm = models.captioners["captioner-hard"]
    item = scenes[1]
    tokens = [cm.vocab.stoi[w] for w in p["words"]]
    att = explain_caption(cm, item["image"], method="input_x_gradient", pair=forced_caption(cm, item["image"], tokens))
    maps = torch.tensor(p["attribution"]["maps"])  # (T, h, w)
    assert maps.shape == (len(p["words"]), *p["grid"])
    assert maps.flatten(1) == pytest.approx(att.scores, abs=1e-5)
    items = words_to_items(p["words"], item["classes"].tolist(), item["places"].tolist())
    named = [t for t, k in enumerate(items) if k >= 0]
    mass = attention_mass_in_box(
        att.scores[named].numpy(), tuple(p["grid"]), cm.canvas, item["boxes"].numpy()[[items[t] for t in named]]
    )
    assert [p["correctness"][t] for t in named] == pytest.approx(mass.tolist(), abs=1e-4)


def test_unknown_or_unavailable_methods_are_400s(served):
    client, _, _ = served
    r = client.post("/api/translate", json={"text": SOURCE, "model": "rnnsearch-es-en", "method": "lime"})
    assert r.status_code == 400 and "unknown attribution method 'lime'" in r.json()["error"]
    r = client.post("/api/translate", json={"text": SOURCE, "model": "rnnsearch-es-en", "method": "alti_plus"})
    assert r.status_code == 400 and "rnnsearch-es-en has no alti_plus" in r.json()["error"]
    r = client.post("/api/caption", json={"scene": 0, "model": "captioner-soft", "method": "value_zeroing"})
    assert r.status_code == 400 and "a captioner has no value_zeroing" in r.json()["error"]
    assert client.get("/api/progress/nothing").json() == {
        "job": "nothing",
        "progress": None,
        "queued": None,
        "wait_s": None,
    }


def test_progress_is_its_own_clients_only(served):
    """A heavy job's progress (worker process) is seen by the session that started it, by no other."""
    app = served[0].app
    mine = fastapi_testclient.TestClient(app, base_url="http://127.0.0.1", cookies={"attnkit-session-8000": "a" * 22})
    theirs = fastapi_testclient.TestClient(app, base_url="http://127.0.0.1", cookies={"attnkit-session-8000": "b" * 22})
    seen, other, answer = [], [], {}
    body = {"text": SOURCE, "model": "transformer-es-en", "beam": 1, "method": "integrated_gradients", "job": "j1"}

    def work():
        answer["r"] = mine.post("/api/translate", json=body)

    t = threading.Thread(target=work)
    t.start()
    while t.is_alive():
        seen.append(mine.get("/api/progress/j1").json()["progress"])
        other.append(theirs.get("/api/progress/j1").json()["progress"])
        time.sleep(0.1)
    t.join()
    assert answer["r"].status_code == 200, answer["r"].text
    assert answer["r"].json()["attribution"]["method"] == "integrated_gradients"
    assert any(p is not None and p > 0 for p in seen)  # it moved, and its owner saw it
    assert other == [None] * len(other)  # another session never sees it
    assert mine.get("/api/progress/j1").json() == {"job": "j1", "progress": None, "queued": None, "wait_s": None}


# ---------------------------------------------------------------------------------------- the page, built one way
def test_the_page_template_inlines_every_asset_and_has_each_slot_once():
    t = html.page_template()
    assert not re.search(r"<link\b[^>]*href=(?!\"data:)|<script\b[^>]*src=", t)  # only data: URLs (the icon)
    static = html.STATIC
    for name in re.findall(r'(?:href|src)="static/([\w.-]+)"', (static / "index.html").read_text()):
        assert f'data-asset="{name}"' in t
        text = (static / name).read_text()
        assert text.replace("</script", "<\\/script")[:200] in t
    assert t.count(html.DATA_SLOT) == 1 and t.count(html.TEMPLATE_SLOT) == 1


def test_fill_page_puts_the_data_and_the_template_itself_in_the_page():
    data = {"models": [], "translations": [], "captions": [], "note": "</script><b>"}
    page = html.standalone_html(data)
    got = re.search(r"window\.ATTNKIT_DATA = (.*?);\nwindow\.ATTNKIT_TEMPLATE = (.*?);</script>", page, re.S)
    assert json.loads(got.group(1)) == data and "</script><b>" not in page
    assert json.loads(got.group(2)) == html.page_template()  # an exported page can export again
    assert html.fill_page(json.loads(got.group(2)), html._json(data)) == page


def test_an_asset_the_rule_does_not_know_is_an_error(tmp_path, monkeypatch):
    for f in html.STATIC.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "extra.js").write_text("window.EXTRA = 1;")
    index = (tmp_path / "index.html").read_text()
    monkeypatch.setattr(html, "STATIC", tmp_path)
    (tmp_path / "index.html").write_text(index.replace("</body>", '<script src="static/extra.js"></script>\n</body>'))
    assert 'data-asset="extra.js">window.EXTRA = 1;' in html.page_template()  # a new file: inlined too
    (tmp_path / "index.html").write_text(
        index.replace("</body>", '<script defer src="static/extra.js"></script></body>')
    )
    with pytest.raises(RuntimeError, match="an asset the inlining rule does not know"):
        html.page_template()
