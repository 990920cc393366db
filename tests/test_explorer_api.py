"""The explorer's JSON API (FastAPI TestClient): every field against the models' own interface, rollout
and diagnostics against independent references, every bad input gets its 4xx and the server goes on."""

import base64
import io
from concurrent.futures import ThreadPoolExecutor

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from PIL import Image

from answers import assert_same_answer
from attnkit.alignment import attention_diagnostics, attention_rollout, word_attention
from attnkit.data.datasets.bible import load_pairs
from attnkit.data.datasets.scenes import load_scenes
from attnkit.explorer import schema
from attnkit.explorer.app import ServeOptions, create_app, load_models
from tiny import SHIPPED

fastapi_testclient = pytest.importorskip("fastapi.testclient")
SOURCE = "Y dijo Dios: Sea la luz: y fué la luz."
LIMITS = ServeOptions()
MAX_TEXT_CHARS, MAX_UPLOAD_BYTES, MAX_UPLOAD_PIXELS = (
    LIMITS.max_text_chars,
    LIMITS.max_upload_bytes,
    LIMITS.max_upload_pixels,
)


@pytest.fixture(scope="module")
def served(bible_home, tmp_path_factory):
    models = load_models()  # every shipped model, loaded once
    scenes = load_scenes("test", tmp_path_factory.mktemp("scenes"), n_train=40, n_valid=10, n_test=24)
    app = create_app(models, scenes=scenes, verses=load_pairs("test", home=bible_home)[:10])
    return fastapi_testclient.TestClient(app, base_url="http://127.0.0.1"), models, scenes


def post(client, text, model, beam=5, heads=False):
    return client.post("/api/translate", json={"text": text, "model": model, "beam": beam, "heads": heads})


def test_models_verses_scenes_and_docs(served):
    client, _, _ = served
    models = {m["name"]: m for m in client.get("/api/models").json()["models"]}
    assert set(models) == set(SHIPPED)
    assert [n for n, m in models.items() if not m["has_attention"]] == ["rnnencdec-es-en"]
    assert models["transformer-es-en"]["scores"]["test_bleu"] == pytest.approx(34.68)
    assert models["transformer-es-en"]["config"]["nhead"] == 4 and models["captioner-hard"]["task"] == "captioning"
    verses = client.get("/api/verses").json()["verses"]
    assert len(verses) == 10 and {"ref", "source", "reference"} <= verses[0].keys()
    scenes = client.get("/api/scenes?limit=5").json()["scenes"]
    assert len(scenes) == 5 and scenes[0]["image"].startswith("data:image/png;base64,")
    assert client.get("/docs").status_code == 200
    api = client.get("/openapi.json").json()  # the one format, documented: every answer and the error body
    assert {"Translation", "Caption", "Heads", "Steps", "Diagnostics", "ApiErrorBody"} <= api["components"][
        "schemas"
    ].keys()
    ok = api["paths"]["/api/translate"]["post"]["responses"]
    assert ok["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/Translation")
    assert ok["413"]["content"]["application/json"]["schema"]["$ref"].endswith("/ApiErrorBody")
    bodies = api["paths"]["/api/caption"]["post"]["requestBody"]["content"]
    assert set(bodies) == {"application/json"}  # JSON only, uploads too (base64)
    assert "--max-text-chars" in api["info"]["description"]  # the limits in force, on the API page


@pytest.mark.parametrize("name", ["rnnsearch-es-en", "transformer-es-en", "rnnencdec-es-en"])
def test_translation_payload_equals_the_models_own_attention(served, name):
    client, models, _ = served
    tr = models.translators[name]
    r = post(client, SOURCE, name, beam=5, heads=True)
    assert r.status_code == 200, r.text
    p = r.json()
    ref = tr.translate([SOURCE], beam_size=5)[0]
    assert p["translation"] == ref["translation"] and p["model"] == name and p["beam"] == 5
    assert p["target_pieces"] == [tr.tokenizer.id_to_piece(t) for t in ref["tokens"]]
    ta = tr.attention(SOURCE, ref["tokens"])
    assert p["source_pieces"] == ta.source_pieces
    if ta.maps.alignment is None:
        assert not p["has_attention"] and p["attention"] is None and p["heads"] is None and p["steps"] is None
        return
    att = ta.maps.alignment
    torch.testing.assert_close(torch.tensor(p["attention"], dtype=torch.float64), att.double(), atol=1e-5, rtol=0)
    wa = word_attention(att, ta.source_pieces, ta.target_pieces)
    torch.testing.assert_close(
        torch.tensor(p["words"]["attention"], dtype=torch.float64), wa.double(), atol=1e-5, rtol=0
    )
    assert p["words"]["source"] == SOURCE.split() and "mean over a target word's pieces" in p["words"]["rule"]
    d = p["diagnostics"]
    ent = [-sum(a * torch.log(torch.tensor(a)).item() for a in row if a > 0) for row in att.double().tolist()]
    assert d["entropy"] == pytest.approx(ent, abs=1e-4)
    assert d["eos_mass"] == pytest.approx(att[:, -1].tolist(), abs=1e-5)
    assert d["eos_position"] == len(ta.source_pieces) - 1
    if name == "rnnsearch-es-en":  # the three steps, as the seeds teach them
        s = p["steps"]
        assert s["formula"] == "e_j = vᵀ tanh(W s + U h_j + b)"
        torch.testing.assert_close(torch.tensor(s["scores"]).softmax(-1), torch.tensor(s["weights"]), atol=1e-4, rtol=0)
        norms = ta.maps.annotations.norm(dim=-1)
        torch.testing.assert_close(torch.tensor(s["contributions"]), att * norms, atol=1e-3, rtol=1e-4)
        torch.testing.assert_close(torch.tensor(s["context_norm"]), ta.maps.context.norm(dim=-1), atol=1e-3, rtol=1e-4)
        assert p["heads"] is None
    else:  # every layer and head, and the rollout
        h = p["heads"]
        L, H = len(h["cross"]), len(h["cross"][0])
        assert tuple(ta.maps.cross.shape[:2]) == (L, H) and len(h["enc_self"][0][0]) == len(ta.source_pieces)
        torch.testing.assert_close(torch.tensor(h["cross"]), ta.maps.cross, atol=1e-4, rtol=0)
        torch.testing.assert_close(
            torch.tensor(h["rollout"], dtype=torch.float64), _rollout_loop(ta.maps.enc_self), atol=1e-4, rtol=0
        )
        assert p["steps"] is None


def _rollout_loop(enc_self):
    """Abnar & Zuidema's rollout with plain loops in float64."""
    a = enc_self.double().mean(1)  # (L, S, S)
    S = a.shape[-1]
    r = [[1.0 if i == j else 0.0 for j in range(S)] for i in range(S)]
    for layer in a.tolist():
        hat = [[layer[i][j] + (1.0 if i == j else 0.0) for j in range(S)] for i in range(S)]
        hat = [[x / sum(row) for x in row] for row in hat]
        r = [[sum(hat[i][k] * r[k][j] for k in range(S)) for j in range(S)] for i in range(S)]
    return torch.tensor(r, dtype=torch.float64)


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 4), H=st.integers(1, 3), S=st.integers(1, 7), seed=st.integers(0, 1000))
def test_rollout_equals_a_loop_and_keeps_rows_normalised(L, H, S, seed):
    maps = torch.rand(L, H, S, S, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).softmax(-1)
    out = attention_rollout(maps)
    torch.testing.assert_close(out, _rollout_loop(maps))
    torch.testing.assert_close(out.sum(-1), torch.ones(S, dtype=torch.float64))


def test_diagnostics_by_hand():
    att = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    d = attention_diagnostics(att, ["▁Hola", "▁mundo", "."])
    assert d["entropy"] == pytest.approx([0.693147, 0.0], abs=1e-6)
    assert d["eos_mass"] == [0.0, 1.0] and d["punctuation_mass"] == [0.0, 1.0] and d["eos_position"] == 2


def _png(mode="RGBA", size=(100, 50), fmt="PNG"):
    buf = io.BytesIO()
    Image.new(mode, size, (255, 255, 255) if mode == "RGB" else None).save(buf, format=fmt)
    return buf.getvalue()


def upload(client, data, **fields):
    """POST an image file to /api/caption as the page does: JSON, the file as a base64 data: URL."""
    return client.post(
        "/api/caption", json={"image": "data:image/png;base64," + base64.b64encode(data).decode(), **fields}
    )


def _chunks(n, size=1 << 20):
    """A body of n bytes sent in chunks, without a Content-Length."""
    for start in range(0, n, size):
        yield b" " * min(size, n - start)


def _huge_png():
    """A small file that decodes to more pixels than the limit (a 1-bit blank image compresses to ~10 KB)."""
    side = int(MAX_UPLOAD_PIXELS**0.5) + 100
    buf = io.BytesIO()
    Image.new("1", (side, side)).save(buf, format="PNG")
    assert len(buf.getvalue()) < MAX_UPLOAD_BYTES
    return buf.getvalue()


def test_caption_a_test_scene_and_uploads(served):
    client, models, scenes = served
    r = client.post("/api/caption", json={"scene": 3, "model": "captioner-hard"})
    assert r.status_code == 200, r.text
    p = r.json()
    want = models.captioners["captioner-hard"].caption(scenes[3]["image"].unsqueeze(0))[0]
    assert p["caption"] == want["caption"] and p["grid"] == [8, 8] and p["scene"]["reference"] == scenes[3]["caption"]
    att = torch.tensor(p["attention"])
    assert att.shape == (len(p["words"]), 8, 8)
    torch.testing.assert_close(att.flatten(1), want["attention"], atol=1e-5, rtol=0)
    assert len(p["boxes"]) == len(scenes[3]["classes"]) and len(p["correctness"]) == len(p["words"])
    named = [c for c in p["correctness"] if c is not None]
    assert named and all(0.0 <= c <= 1.0 for c in named)
    for data in (_png("RGBA", (100, 50)), _png("RGB", (300, 200), "JPEG")):
        r = upload(client, data, model="captioner-soft", beam=3)
        assert r.status_code == 200, r.text
        assert r.json()["boxes"] is None and r.json()["words"]


def test_every_bad_input_gets_its_4xx_and_the_server_goes_on(served):
    client, _, _ = served
    cases = [
        (post(client, "   ", "rnnsearch-es-en"), 400, "empty"),
        (post(client, "a" * (MAX_TEXT_CHARS + 1), "rnnsearch-es-en"), 413, "limit"),
        (post(client, "palabra " * 150, "transformer-es-en"), 400, "more than this model's maximum"),
        (post(client, "Hola.", "no-such-model"), 404, "unknown translation model"),
        (post(client, "Hola.", "rnnsearch-es-en", beam=0), 422, "beam"),
        (
            client.post("/api/translate", content=b"{not json", headers={"Content-Type": "application/json"}),
            422,
            "not valid JSON",
        ),
        (client.post("/api/translate", json={"beam": 2}), 422, "text"),
        (upload(client, b"not an image"), 415, "not an image"),
        (upload(client, _png("L", (8, 8), "GIF")), 415, "PNG or JPEG"),
        (upload(client, b"0" * (MAX_UPLOAD_BYTES + 1)), 413, "limit"),
        (client.post("/api/caption", json={"image": "%%% not base64"}), 400, "not base64"),
        (client.post("/api/caption", json={"image": "data:image/png;base64"}), 400, "without a comma"),
        (client.get("/favicon.ico"), 200, None),
        (client.post("/api/caption", json={"model": "captioner-soft"}), 422, '"scene"'),
        (client.post("/api/caption", json={"scene": 10_000}), 404, "does not exist"),
        (client.post("/api/caption", json={"scene": 1, "model": "captioner-x"}), 404, "unknown captioning model"),
        (client.post("/api/caption", content=b"[1, 2", headers={"Content-Type": "application/json"}), 422, "JSON"),
        (client.post("/api/caption", json={"scene": 1, "beam": "many"}), 422, "beam"),
        (upload(client, _png(), model="nope"), 404, "unknown captioning model"),
        (client.post("/api/caption", files={"image": ("x.png", _png(), "image/png")}), 415, "send the body as JSON"),
        (
            client.post("/api/caption", content=b"--x\r\nnot a part", headers={"Content-Type": "text/plain"}),
            415,
            "not text/plain",
        ),
        (
            client.post(
                "/api/caption",
                content=_chunks(2 * MAX_UPLOAD_BYTES),  # no Content-Length: counted as it streams
                headers={"Content-Type": "application/json"},
            ),
            413,
            "more than",
        ),
        (upload(client, _huge_png()), 413, "pixels"),
    ]
    for r, status, words in cases:
        assert r.status_code == status, (status, r.text)
        if words is None:
            continue
        body = r.json()
        assert set(body) == {"error"} and words in body["error"] and "Traceback" not in body["error"]
        assert post(client, "Jesús lloró.", "rnnsearch-es-en", beam=1).json()["translation"] == "Jesus wept."


def test_concurrent_requests_answer_as_sequential_ones(served):
    client, _, _ = served
    jobs = [
        ("rnnsearch-es-en", SOURCE),
        ("transformer-es-en", "Jesús lloró."),
        ("rnnencdec-es-en", SOURCE),
        ("transformer-es-en", SOURCE),
        ("rnnsearch-es-en", "Jesús lloró."),
        ("transformer-es-en", "Y Dios vió la luz."),
    ]
    jobs += [("captioner-soft", 1), ("captioner-hard", 2), ("captioner-soft", 5)]

    def ask(job):
        model, what = job
        if model.startswith("captioner"):
            return client.post("/api/caption", json={"scene": what, "model": model}).json()
        return post(client, what, model, beam=3).json()

    sequential = [ask(j) for j in jobs]
    with ThreadPoolExecutor(len(jobs)) as pool:
        parallel = list(pool.map(ask, jobs))
    assert all("error" not in r for r in sequential)
    for a, b in zip(parallel, sequential):  # in parallel, translations may be searched and drawn as one batch
        assert_same_answer(a, b)


def test_forcing_the_reference_of_a_gold_verse_brings_its_gold_links(served):
    from attnkit.alignment.gold import load_gold

    client, models, _ = served
    v = load_gold()[60]
    src, ref = " ".join(v.source), " ".join(v.target)
    p = client.post("/api/translate", json={"text": src, "model": "rnnsearch-es-en", "target": ref}).json()
    assert p["forced"] and p["translation"] == ref and p["words"]["target"] == v.target
    assert p["gold"]["ref"] == v.ref and sorted(map(tuple, p["gold"]["sure"])) == sorted(v.sure)
    ta = models.translators["rnnsearch-es-en"].attention(src, ref)  # the same forced decoding
    torch.testing.assert_close(
        torch.tensor(p["attention"], dtype=torch.float64), ta.maps.alignment.double(), atol=1e-5, rtol=0
    )
    other = client.post(
        "/api/translate", json={"text": "Jesús lloró.", "model": "rnnsearch-es-en", "target": "Jesus wept."}
    ).json()
    assert other["forced"] and other["gold"] is None
    r = client.post("/api/translate", json={"text": src, "model": "rnnsearch-es-en", "target": "  "})
    assert r.status_code == 400 and "target is empty" in r.json()["error"]


def test_a_gold_verse_read_english_to_spanish_brings_its_links_turned_around():
    from attnkit.alignment.gold import load_gold
    from attnkit.explorer.payload import gold_for

    v = load_gold()[60]
    es, en = " ".join(v.source), " ".join(v.target)
    there, back = gold_for(es, en), gold_for(en, es)
    assert back["source"] == v.target and back["target"] == v.source and back["ref"] == v.ref
    assert {(j, i) for i, j in map(tuple, back["sure"])} == v.sure == set(map(tuple, there["sure"]))
    assert {(j, i) for i, j in map(tuple, back["possible"])} == v.possible
    assert all(i < len(v.target) and j < len(v.source) for i, j in back["possible"])  # English first now
    assert gold_for(en, en) is None


def _fetched(page: str) -> list[str]:
    """Every src/href of the page's own tags (an HTML parser, so the script's text doesn't count) but a data:
    URL (the page's icon), which is not fetched."""
    from html.parser import HTMLParser

    found = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend(v for k, v in attrs if k in ("src", "href") and not (v or "").startswith("data:"))

    Tags().feed(page)
    return found


def test_the_html_export_embeds_the_apis_own_answers(served, tmp_path):
    """--html, the demo and the page's export write the same format the API returns."""
    import json
    import re

    from attnkit.explorer import write_explorer_html

    client, _, _ = served
    t = post(client, SOURCE, "transformer-es-en", beam=2, heads=True).json()
    c = client.post("/api/caption", json={"scene": 4, "model": "captioner-soft"}).json()
    m = client.get("/api/models").json()["models"]
    page = write_explorer_html(tmp_path / "x.html", translations=[t], captions=[c], models=m).read_text()
    data = json.loads(re.search(r"window\.ATTNKIT_DATA = (.*);\n", page).group(1))
    empty = {"self_attention": [], "head_steps": [], "continuations": []}
    assert data == {"models": m, "translations": [t], "captions": [c], **empty}
    assert _fetched(page) == ["docs"]  # script and style inline, nothing fetched (but the footer's link): offline
    with pytest.raises(ValueError, match="translations"):
        write_explorer_html(tmp_path / "y.html", translations=[{**t, "attention": "not a matrix"}])


def test_translate_and_caption_write_html_from_the_command_line(served, tmp_path, capsys):
    import json
    import re

    from attnkit.cli import main as cli_main

    _, models, scenes = served
    out = tmp_path / "t.html"
    assert cli_main(["translate", "--model", "rnnsearch-es-en", "--beam", "1", "--html", str(out), "Jesús lloró."]) == 0
    data = schema.ExplorerData.model_validate_json(
        re.search(r"window\.ATTNKIT_DATA = (.*);\n", out.read_text()).group(1)
    )
    assert [p.translation for p in data.translations] == ["Jesus wept."] and data.translations[0].steps is not None
    png = tmp_path / "scene.png"
    Image.fromarray((scenes[0]["image"][0].numpy() * 255).round().astype("uint8"), mode="L").save(png)
    out = tmp_path / "c.html"
    assert cli_main(["caption", "--model", "captioner-hard", "--html", str(out), str(png)]) == 0
    data = json.loads(re.search(r"window\.ATTNKIT_DATA = (.*);\n", out.read_text()).group(1))
    assert (
        data["captions"][0]["caption"]
        == models.captioners["captioner-hard"].caption(scenes[0]["image"].unsqueeze(0))[0]["caption"]
    )
