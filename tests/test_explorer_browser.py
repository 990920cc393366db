"""The explorer in a real browser: `attnkit serve` on 127.0.0.1, Debian's chromium driven by Playwright.

Types a verse, waits for the translations, hovers a target word and checks that the source words get
the model's own weights, switches to words, opens a Transformer head, uploads a scene and hovers a
caption word, exports a view as HTML and opens it offline. Screenshots go to out/explorer/.
"""

import base64
import io
import json
import urllib.request
from pathlib import Path

import httpx
import pytest
import torch

from served import served

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install chromium)"
)
playwright = pytest.importorskip("playwright.sync_api")
SHOTS = Path(__file__).resolve().parents[1] / "out" / "explorer"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VERSE = "Y vió Dios que la luz era buena: y apartó Dios la luz de las tinieblas."


@pytest.fixture(scope="module")
def server(bible_home):
    with served(home=str(bible_home)) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def _api(url, path, body):
    """GET (body None) or POST JSON to the running server."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())


def test_translate_hover_words_heads(server, browser, tmp_path):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    page.fill("#text", VERSE)
    page.select_option("#beam", "5")
    page.click("#translate")
    card = page.locator(".model-card[data-model='rnnsearch-es-en']")
    page.wait_for_function(
        "document.querySelector('.model-card .translation') && "
        "[...document.querySelectorAll('.model-card')].length === 3 && "
        "document.body.innerText.indexOf('translating') < 0",
        timeout=120_000,
    )
    assert page.locator(".model-card[data-model='rnnencdec-es-en'] .no-attention").count() == 1
    want = _api(server, "api/translate", {"text": VERSE, "model": "rnnsearch-es-en", "beam": 5})
    assert card.locator(".translation").inner_text() == want["translation"]
    t = 2  # hover the third target piece: the source pieces light up with the model's weights
    card.locator(f".tokens.tgt .tok[data-i='{t}']").hover()
    weights = card.locator(".tokens.src .tok").evaluate_all("els => els.map(e => parseFloat(e.dataset.w))")
    assert weights == pytest.approx(want["attention"][t], abs=1e-4)
    best = max(range(len(weights)), key=weights.__getitem__)
    assert "hl" in card.locator(f".tokens.src .tok[data-i='{best}']").get_attribute("class")
    card.locator(".matrix .cell[data-r='0'][data-c='0']").hover()
    assert "→" in card.locator(".status").inner_text()
    page.screenshot(path=str(SHOTS / "translate.png"), full_page=True)
    card.locator(".tokens.tgt .tok[data-i='4']").hover()  # "light" → "luz"
    page.screenshot(path=str(SHOTS / "readme.png"))  # docs/explorer.png

    page.check("#words")  # whole words: sum over a source word's pieces, mean over a target word's pieces
    card = page.locator(".model-card[data-model='rnnsearch-es-en']")
    assert card.locator(".tokens.src .tok").count() == len(VERSE.split())
    card.locator(".tokens.tgt .tok[data-i='1']").hover()
    wweights = card.locator(".tokens.src .tok").evaluate_all("els => els.map(e => parseFloat(e.dataset.w))")
    assert wweights == pytest.approx(want["words"]["attention"][1], abs=1e-4)
    # the links read from the word matrix both ways are drawn on it, one black ring each, where the API puts them
    rings = card.locator("circle.model-link")
    assert rings.count() == len(want["words"]["links"]) > 0
    assert "black rings: attention links" in card.inner_text()
    assert "mean over a target word's pieces" in page.locator("#rule").inner_text()
    page.uncheck("#words")

    tf = page.locator(".model-card[data-model='transformer-es-en']")
    tf.locator("canvas.hcell[data-kind='cross'][data-layer='2'][data-head='1']").click()
    enlarged = page.locator("#enlarged")
    assert enlarged.is_visible() and "cross-attention" in enlarged.inner_text()
    assert enlarged.locator(".cell").count() > 20
    enlarged.locator(".cell[data-r='1'][data-c='0']").hover()
    head = _api(server, "api/translate", {"text": VERSE, "model": "transformer-es-en", "beam": 5, "heads": True})
    assert enlarged.locator(".status").inner_text().endswith(f"{head['heads']['cross'][2][1][1][0]:.3f}")
    page.screenshot(path=str(SHOTS / "head.png"))
    page.keyboard.press("Escape")
    assert enlarged.is_hidden()

    with page.expect_download() as dl:  # the view as a self-contained HTML file, opened with no server
        card.locator("button.export[data-format='html']").click()
    exported = tmp_path / "view.html"
    dl.value.save_as(exported)
    offline = browser.new_page()
    offline.goto(exported.as_uri())
    offline.wait_for_selector(".model-card[data-model='rnnsearch-es-en'] .matrix")
    assert offline.locator(".model-card").count() == 1 and offline.locator("#translate").is_hidden()
    with page.expect_download() as dl:
        card.locator("button.export[data-format='svg']").click()
    dl.value.save_as(tmp_path / "view.svg")
    assert (tmp_path / "view.svg").read_text().startswith("<svg")
    svg_w = card.locator("svg.matrix").evaluate("s => s.width.baseVal.value")
    _png_download(page, card, tmp_path / "view.png", width=2 * svg_w)


def test_the_other_language_pair(server, browser):
    """The pair picker: English → Spanish shows only that model, on the Bible's verses turned around."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    page.wait_for_selector(".model-card[data-model='rnnsearch-es-en'] .translation", timeout=120_000)
    assert page.locator("#pair-picker").is_visible()
    page.select_option("#pair", "en>es")
    page.wait_for_function(
        "[...document.querySelectorAll('.model-card')].map(c => c.dataset.model).join() === 'transformer-en-es' && "
        "document.querySelector('.model-card .translation') && document.body.innerText.indexOf('translating') < 0",
        timeout=120_000,
    )
    first = _api(server, "api/verses?model=transformer-en-es&limit=1", None)["verses"][0]
    spanish = _api(server, "api/verses?model=transformer-es-en&limit=1", None)["verses"][0]
    assert (first["source"], first["reference"]) == (spanish["reference"], spanish["source"])
    assert first["gold"] == spanish["gold"]  # a gold verse either way: its links are drawn turned around
    assert page.input_value("#text") == first["source"]
    assert page.locator("#translate-heading").inner_text() == "Translate English → Spanish"
    want = _api(server, "api/translate", {"text": first["source"], "model": "transformer-en-es", "beam": 5})
    card = page.locator(".model-card[data-model='transformer-en-es']")
    assert card.locator(".translation").inner_text() == want["translation"]
    page.check("#words")
    assert card.locator("circle.model-link").count() == len(want["words"]["links"]) > 0
    # the first verse is a gold verse: forced to its Spanish, its hand-made links are drawn turned around
    from attnkit.alignment.gold import load_gold

    gold = load_gold()[50].turned_around()
    assert first["source"] == " ".join(gold.source)
    page.check("#force")
    page.wait_for_function(
        "document.querySelector(\".model-card[data-model='transformer-en-es'] .gold-sure\")", timeout=120_000
    )
    assert card.locator(".translation").inner_text() == " ".join(gold.target)
    assert card.locator(".gold-sure").count() == len(gold.sure)
    assert card.locator(".gold-possible").count() == len(gold.possible - gold.sure)
    page.uncheck("#force")
    page.select_option("#pair", "es>en")  # and back: the Spanish models again
    page.wait_for_function("document.querySelectorAll('.model-card').length === 3", timeout=120_000)


def _png_download(page, card, path, width):
    """Click the card's PNG export; the file is a PNG drawn from the SVG at twice its size, not blank."""
    from PIL import Image

    with page.expect_download() as dl:
        card.locator("button.export[data-format='png']").click()
    dl.value.save_as(path)
    with Image.open(path) as im:
        assert im.format == "PNG" and im.width == round(width)
        lo, hi = im.convert("L").getextrema()
        assert hi - lo > 50
    return path


def test_a_busy_servers_503_is_asked_again_when_it_says(server, browser):
    """A 503 with Retry-After (the server's lane or queue is full) is no error to the page: it says the server
    is busy, asks again after that many seconds, and the translation arrives."""
    text = "Jesús lloró."
    want = _api(server, "api/translate", {"text": text, "model": "rnnsearch-es-en", "beam": 5})
    page = browser.new_page()
    asked = []

    def busy_once(route, request):
        body = json.loads(request.post_data)
        if body["text"] == text:
            asked.append(body["model"])
        if body["text"] == text and body["model"] == "rnnsearch-es-en" and asked.count("rnnsearch-es-en") == 1:
            route.fulfill(
                status=503,
                headers={"Retry-After": "1", "Content-Type": "application/json"},
                body=json.dumps({"error": "the server is busy: try again in 1 s"}),
            )
        else:
            route.continue_()

    page.route("**/api/translate", busy_once)
    page.goto(server)
    page.wait_for_selector(".model-card .translation", timeout=120_000)  # the page's own first translation
    page.evaluate(
        "window.busySeen = false; new MutationObserver(() => { if (document.body.innerText.includes("
        "'the server is busy: asking again')) window.busySeen = true; })"
        ".observe(document.body, {subtree: true, childList: true, characterData: true})"
    )
    page.fill("#text", text)
    page.click("#translate")
    card = page.locator(".model-card[data-model='rnnsearch-es-en'] .translation")
    page.wait_for_function(
        "(want) => { const t = document.querySelector(\".model-card[data-model='rnnsearch-es-en'] .translation\");"
        " return t && t.innerText === want; }",
        arg=want["translation"],
        timeout=120_000,
    )
    assert asked.count("rnnsearch-es-en") == 2 and asked.count("transformer-es-en") == 1
    assert page.evaluate("window.busySeen") and page.locator("#error").inner_text() == ""
    assert card.inner_text() == want["translation"]
    page.close()


def test_a_gold_verse_with_its_reference_shows_the_gold_links(server, browser):
    from attnkit.alignment.gold import load_gold

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    page.wait_for_function("document.querySelectorAll('#verse option').length > 1", timeout=120_000)
    page.check("#force")
    page.check("#words")
    page.select_option("#verse", "0")  # the first scored gold verse
    first = load_gold()[50]
    card = page.locator(".model-card[data-model='transformer-es-en']")
    page.wait_for_function(
        "document.querySelector(\".model-card[data-model='transformer-es-en'] .gold-sure\")", timeout=120_000
    )
    assert card.locator(".translation").inner_text() == " ".join(first.target)
    assert card.locator(".gold-sure").count() == len(first.sure)
    assert card.locator(".gold-possible").count() == len(first.possible - first.sure)
    page.screenshot(path=str(SHOTS / "gold.png"), full_page=False)


def test_caption_upload_and_hover(server, browser, tmp_path):
    from PIL import Image

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    page.wait_for_function("document.querySelectorAll('#scene option').length > 0", timeout=120_000)
    page.select_option("#scene", "2")
    page.click("#caption-btn")
    page.wait_for_selector(".caption-card[data-model='captioner-hard'] .cword", timeout=120_000)
    hard = page.locator(".caption-card[data-model='captioner-hard']")
    assert hard.locator(".box").count() >= 1  # a test scene shows its ground-truth boxes
    hard.locator(".cword[data-t='1']").hover()
    assert hard.locator(".heat image.heat-map").get_attribute("data-t") == "1"
    assert "correctness" in hard.locator(".status").inner_text()
    page.screenshot(path=str(SHOTS / "caption-scene.png"), full_page=True)
    # the browser's bilinear upsampling is torch's (align_corners=False), and nearest shows the cells
    grid = [[float((3 * i + 5 * j) % 7) for j in range(8)] for i in range(8)]
    for mode in ("bilinear", "nearest"):
        js = page.evaluate("([g, m]) => Array.from(upsample(g, 64, 48, m))", [grid, mode])
        want = torch.nn.functional.interpolate(
            torch.tensor(grid, dtype=torch.float64)[None, None],
            size=(64, 48),
            mode=mode,
            **({"align_corners": False} if mode == "bilinear" else {}),
        )
        assert js == pytest.approx(want.flatten().tolist(), abs=1e-9)
    hard.locator(".cells-toggle").check()
    assert hard.locator(".heat image.heat-map").get_attribute("data-mode") == "nearest"
    _png_download(page, hard, tmp_path / "overlay.png", width=512)

    # upload the scene as a bigger RGB PNG: the page sends the file, the server converts it as
    # `attnkit caption` does, and the page shows what the API answers for the same bytes
    scene = _api(server, "api/scenes?limit=3", None)["scenes"][2]
    img = tmp_path / "mine.png"
    Image.open(io.BytesIO(base64.b64decode(scene["image"].split(",")[1]))).convert("RGB").resize((192, 192)).save(img)
    want = httpx.post(  # the JSON the page sends: the file as a base64 data: URL
        server + "api/caption",
        json={
            "image": "data:image/png;base64," + base64.b64encode(img.read_bytes()).decode(),
            "model": "captioner-soft",
        },
        timeout=120,
    ).json()
    page.set_input_files("#upload", str(img))
    page.wait_for_function(
        "document.querySelectorAll('.caption-card .box').length === 0 && "
        "document.querySelectorAll('.caption-card').length === 2",
        timeout=120_000,
    )
    soft = page.locator(".caption-card[data-model='captioner-soft']")
    assert soft.locator("div.caption:not(.tokens)").inner_text() == want["caption"]
    soft.locator(".cword[data-t='1']").hover()
    assert soft.locator(".heat image.heat-map").get_attribute("data-t") == "1"
    page.screenshot(path=str(SHOTS / "caption-upload.png"), full_page=True)


def test_a_method_picker_changes_the_matrix_and_the_export_is_the_python_page(server, browser, tmp_path):
    """Pick ALTI+: the Transformer's matrix, hover and export follow it; the exported file is byte for byte
    what attnkit.explorer.html.fill_page writes. Then a slow method shows progress and can be cancelled."""
    from attnkit.explorer.html import fill_page, page_template

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    page.fill("#text", VERSE)
    page.select_option("#beam", "1")
    page.click("#translate")
    page.wait_for_selector(".model-card[data-model='transformer-es-en'] .matrix", timeout=120_000)
    card = page.locator(".model-card[data-model='transformer-es-en']")
    cells = "els => els.map(e => parseFloat(e.dataset.w))"
    before = card.locator(".matrix .cell").evaluate_all(cells)
    page.select_option("#method", "alti_plus")
    page.wait_for_selector(
        ".model-card[data-model='transformer-es-en'] .method-note[data-method='alti_plus']", timeout=120_000
    )
    card = page.locator(".model-card[data-model='transformer-es-en']")
    after = card.locator(".matrix .cell").evaluate_all(cells)
    want = _api(
        server, "api/translate", {"text": VERSE, "model": "transformer-es-en", "beam": 1, "method": "alti_plus"}
    )
    assert after == pytest.approx([w for row in want["attribution"]["scores"] for w in row], abs=1e-4)
    assert after != pytest.approx(before, abs=1e-3)  # the matrix changed with the method
    card.locator(".tokens.tgt .tok[data-i='2']").hover()
    hovered = card.locator(".tokens.src .tok").evaluate_all(cells)
    assert hovered == pytest.approx(want["attribution"]["scores"][2], abs=1e-4)
    assert "draws most on" in card.locator(".status").inner_text()
    # RNNsearch has no ALTI+: it says so and shows its attention
    assert "has no alti_plus" in page.locator(".model-card[data-model='rnnsearch-es-en'] .method-note").inner_text()
    with page.expect_download() as dl:
        card.locator("button.export[data-format='html']").click()
    exported = tmp_path / "alti.html"
    dl.value.save_as(exported)
    data_json = page.evaluate(
        "toJson({ models: state.models, translations: [state.translations.find((p) => p.model === "
        "'transformer-es-en')], captions: [] })"
    )
    assert exported.read_text(encoding="utf-8") == fill_page(page_template(), data_json)
    offline = browser.new_page()
    offline.goto(exported.as_uri())
    offline.wait_for_selector(".model-card .method-note[data-method='alti_plus']")
    assert offline.locator(".model-card .matrix .cell").evaluate_all(cells) == pytest.approx(after, abs=1e-9)

    page.select_option("#method", "integrated_gradients")  # seconds per model: progress, then Cancel
    page.wait_for_selector(".progress-box progress", timeout=30_000)
    assert "computing integrated_gradients" in page.locator(".progress-box").inner_text()
    page.click(".progress-box button.cancel")
    page.wait_for_selector("#results .cancelled", timeout=30_000)
    assert page.locator(".model-card").count() == 0
    assert _api(server, "api/translate", {"text": "Jesús lloró.", "model": "rnnsearch-es-en", "beam": 1})["translation"]
    page.screenshot(path=str(SHOTS / "method-cancelled.png"))

    page.wait_for_function("document.querySelectorAll('#scene option').length > 0", timeout=120_000)
    page.select_option("#caption-method", "saliency")
    page.wait_for_selector(
        ".caption-card[data-model='captioner-soft'] .method-note[data-method='saliency']", timeout=120_000
    )
    soft = page.locator(".caption-card[data-model='captioner-soft']")
    soft.locator(".cword[data-t='1']").hover()
    assert soft.locator(".heat image.heat-map").get_attribute("data-t") == "1"
    page.screenshot(path=str(SHOTS / "caption-method.png"), full_page=True)


def test_the_real_server_answers_bad_input_with_4xx_and_goes_on(server):
    """uvicorn itself (not the test client): refusals mid-upload, malformed bodies, then a normal answer."""
    from attnkit.explorer.options import ServeOptions

    limit = ServeOptions().caption_body_bytes

    def chunks():
        for _ in range(limit // (1 << 20) + 2):
            yield b"\0" * (1 << 20)

    with httpx.Client(base_url=server, timeout=120) as c:
        answers = [
            c.post("api/caption", content=chunks(), headers={"Content-Type": "application/json"}),
            c.post("api/caption", json={"image": base64.b64encode(b"GIF89a not really").decode()}),
            c.post("api/translate", content=b'{"text": ', headers={"Content-Type": "application/json"}),
            c.post("api/translate", json={"text": "", "model": "rnnsearch-es-en"}),
        ]
        assert [r.status_code for r in answers] == [413, 415, 422, 400]
        assert all(set(r.json()) == {"error"} for r in answers)
        ok = c.post("api/translate", json={"text": "Jesús lloró.", "model": "rnnsearch-es-en", "beam": 1})
        assert ok.status_code == 200 and ok.json()["translation"] == "Jesus wept."
