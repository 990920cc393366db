"""The explorer's self-attention panel in a real browser: `attnkit serve` on a tiny random BERT and a
tiny random GPT-2 saved as Hugging Face folders, Debian's chromium driven by Playwright. Types a text,
waits for every layer's heads to arrive (one request per layer), checks the grid has L × H heads per
model and the pieces the model reads, clicks a head and checks its enlarged matrix is that head's
(N × N cells with the eager weights), lets GPT-2 continue the text with an attribution method, and opens
an exported view offline."""

import urllib.request

import pytest
import torch

from attnkit.hf import load_self_attention
from hf_tiny import build_tiny, saved_tiny
from served import served
from test_explorer_browser import ARGS, CHROMIUM, SHOTS

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed")
playwright = pytest.importorskip("playwright.sync_api")
expect = playwright.expect
TEXT = "Jesús lloró."
SHIPPED_LM = "attention-only-2l-en"  # attnkit's shipped 2-layer attention-only model: its induction heads


@pytest.fixture(scope="module")
def server():
    folders = [str(saved_tiny("bert")), str(saved_tiny("gpt2")), SHIPPED_LM]
    with served("--workers", "1", "--model", *folders, env={"HF_HUB_OFFLINE": "1"}) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def _eager(family: str, ids) -> torch.Tensor:
    model, _ = build_tiny(family, attn_implementation="eager")
    with torch.no_grad():
        return torch.stack(model(input_ids=torch.tensor([ids]), output_attentions=True).attentions)[:, 0]


def test_heads_grid_renders_and_a_head_enlarges(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    # the panels start visible and the page hides those without models once /api/models answers: wait for it
    expect(page.locator("#self-attention-panel")).to_be_visible()
    expect(page.locator("#translate-panel")).to_be_hidden()
    expect(page.locator("#caption-panel")).to_be_hidden()
    page.fill("#sa-text", TEXT)
    page.click("#sa-read")
    for family in ("bert", "gpt2"):
        card = f".sa-card[data-model='tiny-{family}']"
        page.wait_for_function(
            f"(() => {{ const c = document.querySelector(\"{card}\"); return c && c.querySelector('.sa-grid') "
            "&& !c.querySelector('.sa-grid .pending'); })()",
            timeout=60_000,
        )
        sa = load_self_attention(str(saved_tiny(family)))
        ids, pieces = sa.encode(TEXT)
        # counts through Playwright's expect, which waits for the page to settle (a loaded machine draws late)
        expect(page.locator(f"{card} .sa-pieces .tok")).to_have_count(len(pieces))
        expect(page.locator(f"{card} .sa-grid canvas:not([data-head='mean'])")).to_have_count(
            2 * 4
        )  # 2 layers × 4 heads
        expect(page.locator(f"{card} .sa-grid canvas[data-head='mean']")).to_have_count(2)
        page.locator(f"{card} .sa-grid canvas[data-layer='1'][data-head='2']").click()
        page.wait_for_selector("#enlarged:not([hidden]) svg.matrix")
        expect(page.locator("#enlarged h3")).to_contain_text("layer 2, head 3")
        cells = page.locator("#enlarged .cell")
        n = len(pieces)
        expect(cells).to_have_count(n * n)
        shown = torch.tensor([float(w) for w in cells.evaluate_all("cs => cs.map((c) => c.dataset.w)")]).reshape(n, n)
        torch.testing.assert_close(shown, _eager(family, ids)[1, 2].float(), atol=1e-4, rtol=0)
        page.keyboard.press("Escape")
        expect(page.locator("#enlarged")).to_be_hidden()
    assert page.locator(".sa-card[data-model='tiny-bert'] .sa-continue").count() == 0  # BERT does not write


def test_gpt2_continues_the_text_with_an_attribution(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    card = ".sa-card[data-model='tiny-gpt2']"
    page.wait_for_selector(f"{card} .sa-continue", timeout=120_000)
    page.fill(f"{card} .sa-tokens", "3")
    page.select_option(f"{card} .sa-method", "input_x_gradient")
    page.click(f"{card} .sa-continue")
    page.wait_for_selector(f"{card} .sa-continuation .model-card .matrix", timeout=120_000)
    note = page.locator(f"{card} .sa-continuation .method-note").inner_text()
    assert note.startswith("input_x_gradient")
    assert page.locator(f"{card} .sa-continuation .tokens.tgt .tok").count() == 3
    # the continuation's HTML export (a schema.Continuation in the page's data) opens offline with its card
    with page.expect_download() as got:
        page.click(f"{card} .sa-continuation .model-card .export[data-format='html']")
    exported = tmp_path / "continuation.html"
    got.value.save_as(exported)
    again = browser.new_page()
    again.goto(exported.as_uri())
    again.wait_for_selector("#sa-results .model-card .matrix")
    assert again.locator("#sa-results .model-card .tokens.tgt .tok").count() == 3
    assert again.locator("#sa-results .model-card .method-note").inner_text().startswith("input_x_gradient")
    # the same view exported by the notebook display opens offline with every layer's heads
    from attnkit.explorer.notebook import self_attention_view

    sa = load_self_attention(str(saved_tiny("gpt2")))
    path = self_attention_view(sa.self_attention(TEXT), model="tiny-gpt2").save(tmp_path / "view.html")
    offline = browser.new_page()
    offline.goto(path.as_uri())
    offline.wait_for_selector(".sa-card .sa-grid canvas")
    assert offline.locator(".sa-card .sa-grid canvas:not([data-head='mean'])").count() == 8
    assert offline.locator(".sa-grid .pending").count() == 0 and offline.locator(".sa-rollout").count() == 1


def test_gpt2s_information_flow_graph_draws_and_a_block_shows_its_logit_lens(server, browser):
    from attnkit.explorer.lm_view_answer import lm_view_json
    from attnkit.service import LMViewRequest, analyse, open_model

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    card = ".sa-card[data-model='tiny-gpt2']"
    page.wait_for_selector(f"{card} .sa-flow-go", timeout=120_000)
    text = page.input_value("#sa-text").strip()
    page.fill(f"{card} .sa-flow-threshold", "0.05")
    page.evaluate(  # what the progress line says, and how many residual edges are drawn, each time it changes
        """card => { window.flowSeen = []; new MutationObserver(() => {
            const c = document.querySelector(card), p = c && c.querySelector('.flow-progress');
            const seen = p ? `${p.textContent} | ${c.querySelectorAll('.flow-residual').length}` : null;
            if (seen && window.flowSeen[window.flowSeen.length - 1] !== seen) window.flowSeen.push(seen);
          }).observe(document.body, { subtree: true, childList: true, characterData: true }); }""",
        card,
    )
    with page.expect_response("**/api/flow/stream", timeout=120_000) as streamed:  # the graph arrives streamed
        page.click(f"{card} .sa-flow-go")
    assert streamed.value.headers["content-type"].startswith("application/x-ndjson")
    page.wait_for_selector(f"{card} .sa-flow-graph[data-done] svg.flow-graph .flow-edge", timeout=120_000)
    # the same model, analysed here: the page draws every head edge the service keeps
    want = lm_view_json(analyse(open_model(str(saved_tiny("gpt2"))), LMViewRequest(text, threshold=0.05)))
    expect(page.locator(f"{card} .flow-progress")).to_have_text(f"all {want['layers']} layers traced")
    # drawn layer by layer: the last layer alone first (its one residual edge, at the predicting position), then
    # one more layer each line, the last layer first, before the done line completes it
    residuals = sum(e["head"] is None for e in want["graph"]["edges"])
    seen = [x for x in page.evaluate("window.flowSeen") if not x.startswith("waiting")]
    L = want["layers"]
    expected = [f"layer {L - i} of {L} ({i + 1} traced, from the last layer down)" for i in range(L)]
    assert [x.split(" | ")[0] for x in seen] == [*expected, f"all {L} layers traced"], seen
    assert int(seen[0].split(" | ")[1]) == 1 and int(seen[-1].split(" | ")[1]) == residuals
    heads = [e for e in want["graph"]["edges"] if e["head"] is not None]
    edges = page.locator(f"{card} .flow-edge")
    assert edges.count() == len(heads)
    shown = sorted(float(w) for w in edges.evaluate_all("es => es.map((e) => e.dataset.weight)"))
    assert shown == pytest.approx(sorted(e["weight"] for e in heads), abs=1e-6)
    # a click on the predicting block (last position, after the last layer) shows its logit lens
    last, layers = want["position"], want["layers"]
    page.click(f"{card} .flow-node[data-layer='{layers}'][data-position='{last}']")
    lens = page.locator(f"{card} .flow-lens[data-position='{last}'] .flow-lens-table tr")
    expect(lens).to_have_count(layers + 2)  # the header, the embeddings, every layer
    rows = want["node_lens"][str(last)]
    for i, r in enumerate(rows):
        cells = lens.nth(i + 1).locator("td").all_inner_texts()
        assert int(cells[1]) == r["rank"]
    assert lens.nth(layers + 1).locator("td").nth(1).inner_text() == "1"  # the last block predicts the token
    # a click on an edge shows its head's attention row; the slider hides the weaker edges
    edges.first.dispatch_event("click")
    expect(page.locator(f"{card} .flow-row .flow-attention li").first).to_be_visible()
    expect(page.locator(f"{card} .flow-row .flow-promotes")).to_contain_text("promotes")
    page.locator(f"{card} .flow-threshold").evaluate("s => { s.value = s.max; s.dispatchEvent(new Event('input')); }")
    assert page.locator(f"{card} .flow-edge:visible").count() < len(heads) or len(heads) == 1


def _text_of(n_tokens: int) -> str:
    """A text of gold English verses that the tiny GPT-2 reads as exactly ``n_tokens`` tokens."""
    from hf_tiny import gold_lines

    sa = load_self_attention(str(saved_tiny("gpt2")))
    words = " ".join(gold_lines()[150:160]).split()  # the English half
    for k in range(1, len(words) + 1):
        if len(sa.encode(" ".join(words[:k]))[0]) == n_tokens:
            return " ".join(words[:k])
    raise AssertionError(f"no prefix of the verses is {n_tokens} tokens")


def test_the_example_is_in_the_language_models_language_and_the_routes_labels_read_at_25_tokens(server, browser):
    """The server has attnkit's English language model: the panel's text is English, not the built-in Spanish
    verse. The routes graph of a 25-token text is drawn at its own size (it scrolls in its card rather than
    shrinking): every label's rendered font size, its font size times the screen scale, is at least 11 px."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    card = ".sa-card[data-model='tiny-gpt2']"
    page.wait_for_selector(f"{card} .sa-flow-go", timeout=120_000)
    assert page.input_value("#sa-text").startswith("In the beginning")  # English, for an English model
    text = _text_of(25)
    page.fill("#sa-text", text)
    page.click(f"{card} .sa-flow-go")
    page.wait_for_selector(f"{card} .sa-flow-graph[data-done] svg.flow-graph .flow-edge", timeout=120_000)
    sizes = page.locator(f"{card} svg.flow-graph text.flow-label").evaluate_all(
        """ts => ts.map((t) => { const m = t.getScreenCTM();
            return { piece: t.classList.contains('flow-piece-label'),
                     px: parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b) }; })"""
    )
    assert sum(s["piece"] for s in sizes) == 25 and len(sizes) == 25 + 3  # 25 pieces, embeddings + 2 layers
    assert min(s["px"] for s in sizes) >= 11, sizes
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(f"{card} .sa-flow-graph").screenshot(path=str(SHOTS / "routes-25-tokens.png"))


def test_repeated_random_tokens_name_the_layer_2_induction_head_and_draw_its_map(server, browser):
    """The shipped attention-only model's card, N = 20 random tokens repeated twice: the page names the best
    induction head (the server's, in layer 2), draws every head's map with the stripe outlined and the
    best head's map flagged, titled with its prefix-matching score, and enlarges it with the 20 stripe cells
    marked."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    card = f".sa-card[data-model='{SHIPPED_LM}']"
    page.wait_for_selector(f"{card} .sa-repeat-go", timeout=120_000)
    page.fill(f"{card} .sa-repeat-n", "20")
    page.click(f"{card} .sa-repeat-go")
    out = f"{card} .sa-repeat-out"
    page.wait_for_selector(f"{out} .sa-best-head", timeout=120_000)
    want = _api(server, "api/repeated", {"model": SHIPPED_LM, "length": 20, "seed": 0})["repeated"]["best"]
    assert want["layer"] == 2 and want["prefix_matching"] >= 0.5
    best = page.locator(f"{out} .sa-best-head")
    assert best.get_attribute("data-layer") == "2" and best.get_attribute("data-head") == str(want["head"])
    expect(best).to_contain_text(f"best induction head layer 2, head {want['head']}")
    expect(page.locator(f"{out} .sa-grid canvas:not([data-head='mean'])")).to_have_count(2 * 4)
    drawn = page.locator(f"{out} canvas.sa-best")
    expect(drawn).to_have_count(1)
    assert drawn.get_attribute("data-layer") == "1" and drawn.get_attribute("data-head") == str(want["head"] - 1)
    assert f"prefix-matching {want['prefix_matching']:.3f}" in drawn.get_attribute("title")
    size, strong = drawn.evaluate(  # pixels of weights over 0.5 (the page's blue at more than half opacity)
        "c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; "
        "for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 128 && d[i + 2] > d[i]) n++; return [c.width, n]; }"
    )
    px = size // 40
    assert px >= 3 and size == 40 * px  # 40 positions, 3 pixels or more each
    assert strong >= 15 * (px - 2) ** 2  # the stripe's strong weights are drawn (at least 15 of its 20 cells)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "repeated-tokens.png"), full_page=True)
    drawn.click()
    page.wait_for_selector("#enlarged:not([hidden]) svg.matrix")
    expect(page.locator("#enlarged .gold-sure")).to_have_count(20)
    expect(page.locator("#enlarged .cell")).to_have_count(40 * 40)
    with pytest.raises(urllib.error.HTTPError) as too_long:  # 130 positions: more than the model's 128
        _api(server, "api/repeated", {"model": SHIPPED_LM, "length": 65})
    assert too_long.value.code == 413 and "at most 64" in too_long.value.read().decode()


def test_a_wide_heads_grid_scrolls_inside_its_card(server, browser):
    """Two cards side by side, each narrower than its grid (a long text draws every head larger): the grid
    scrolls inside its card, so the last column of the left card is not under the right card and can be
    clicked (MiniLM's 12 heads beside another model ran under the next card)."""
    page = browser.new_page(viewport={"width": 1000, "height": 900})
    page.goto(server)
    page.fill("#sa-text", "En el principio creó Dios los cielos y la tierra, y la tierra estaba desordenada.")
    page.click("#sa-read")
    for family in ("bert", "gpt2"):
        page.wait_for_function(
            f"(() => {{ const c = document.querySelector(\".sa-card[data-model='tiny-{family}']\"); "
            "return c && c.querySelector('.sa-grid') && !c.querySelector('.sa-grid .pending'); })()",
            timeout=60_000,
        )
    cards = page.locator(".sa-card")
    boxes = [cards.nth(i).bounding_box() for i in range(cards.count())]
    left = min(range(len(boxes)), key=lambda i: boxes[i]["x"])
    assert any(abs(b["y"] - boxes[left]["y"]) < 2 and b["x"] > boxes[left]["x"] for b in boxes), boxes  # side by side
    grid = cards.nth(left).locator(".sa-grid")
    assert grid.evaluate("g => g.scrollWidth > g.clientWidth")  # wider than its card: the case in question
    for head in ("3", "mean"):  # the last head (head 4) and the last column (the mean)
        cell = grid.locator(f"canvas[data-layer='1'][data-head='{head}']")
        cell.scroll_into_view_if_needed()
        inside, hit = cell.evaluate(
            "c => { const r = c.getBoundingClientRect(), card = c.closest('.sa-card').getBoundingClientRect(); "
            "return [r.right <= card.right && r.left >= card.left, "
            "document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === c]; }"
        )
        assert inside, f"the cell of column {head} runs out of its card (under the next one)"
        assert hit, f"the cell of column {head} is covered"
    grid.locator("canvas[data-layer='1'][data-head='3']").click(timeout=5_000)
    expect(page.locator("#enlarged h3")).to_contain_text("layer 2, head 4")


# ---------------------------------------------------------------- encoder-decoders and Llama
# One more server for three tiny folders at once: Marian and T5 on the translation page (Marian has the
# decompositions, T5's RMSNorm blocks refuse them), Llama in the self-attention panel.
SOURCE = TEXT  # short: the tiny random models write up to their length limit


@pytest.fixture(scope="module")
def mixed_server():
    folders = [str(saved_tiny(f)) for f in ("marian", "bart", "m2m_100", "t5", "llama")]
    with served("--workers", "1", "--model", *folders, env={"HF_HUB_OFFLINE": "1"}) as url:
        yield url


def _api(url: str, path: str, body: dict | None = None) -> dict:
    """The server's JSON for ``path`` (POSTed ``body`` when given): what the page is compared with."""
    import json

    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def _cells(locator) -> list[float]:
    return [float(w) for w in locator.evaluate_all("cs => cs.map((c) => c.dataset.w)")]


def _card_done(page, model: str, inner: str) -> None:
    """Wait for ``inner`` in the model's card; on a timeout, fail with what the page shows instead (each
    card's text: an error the server answered, or a card still waiting), so a failure says why."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_selector(f".model-card[data-model='{model}'] {inner}", timeout=120_000)
    except PlaywrightTimeout:
        cards = page.locator(".model-card").evaluate_all(
            "cs => cs.map((c) => c.dataset.model + ': ' + c.innerText.slice(0, 300).replace(/\\s+/g, ' '))"
        )
        error = page.locator("#error").inner_text()
        raise AssertionError(
            f"{model}: no {inner!r} after 120 s; the page's error: {error!r}; cards: {cards}"
        ) from None


def test_encoder_decoders_translate_with_their_heads_and_methods(mixed_server, browser):
    url = mixed_server
    methods = {m["name"]: {x["name"] for x in m["methods"]} for m in _api(url, "api/models")["models"]}
    assert "alti_plus" in methods["tiny-marian"] and "alti_plus" not in methods["tiny-t5"]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.wait_for_selector("#translate-panel:not([hidden])")
    page.wait_for_selector("#method option[value='alti_plus']", state="attached")
    # M2M100 names its languages by its tokens (__es__, __en__): the heading says them, not "? → ?"; the
    # models that name none (Marian, BART, T5 saved without) are given the same sentences
    expect(page.locator("#translate-heading")).to_have_text("Translate Spanish → English")
    # the picker offers each method with the models that have it; T5's are exactly T5's own methods
    offered = dict(
        page.locator("#method option[value]:not([value=''])").evaluate_all(
            "os => os.map((o) => [o.value, o.dataset.models])"
        )
    )
    assert {m for m, who in offered.items() if "tiny-t5" in who.split()} == methods["tiny-t5"]
    assert sorted(offered["alti_plus"].split()) == ["tiny-bart", "tiny-m2m_100", "tiny-marian"]

    page.fill("#text", SOURCE)
    page.select_option("#beam", "1")
    page.click("#translate")
    for model in ("tiny-marian", "tiny-bart", "tiny-m2m_100", "tiny-t5"):
        _card_done(page, model, ".heads-grid canvas[data-kind='cross']")
    for model in ("tiny-bart", "tiny-m2m_100"):  # post-norm BART and pre-norm M2M100: the same page as Marian
        got = _api(url, "api/translate", {"text": SOURCE, "model": model, "beam": 1, "heads": True})
        other = f".model-card[data-model='{model}']"
        assert page.locator(f"{other} .translation").inner_text() == got["translation"]
        cells = torch.tensor(_cells(page.locator(f"{other} svg.matrix .cell"))).reshape(len(got["attention"]), -1)
        torch.testing.assert_close(cells, torch.tensor(got["attention"]), atol=1e-4, rtol=0)
        assert page.locator(f"{other} .heads-grid canvas[data-kind='cross']:not([data-head='mean'])").count() == 2 * 4
    api = _api(url, "api/translate", {"text": SOURCE, "model": "tiny-marian", "beam": 1, "heads": True})
    card = ".model-card[data-model='tiny-marian']"
    assert page.locator(f"{card} .translation").inner_text() == api["translation"]
    cross = torch.tensor(api["heads"]["cross"])  # (L, H, T, S)
    assert cross.shape[:2] == (2, 4)
    grid = page.locator(f"{card} .heads-grid canvas[data-kind='cross']:not([data-head='mean'])")
    assert grid.count() == 2 * 4
    shown = torch.tensor(_cells(page.locator(f"{card} svg.matrix .cell"))).reshape(len(api["attention"]), -1)
    torch.testing.assert_close(shown, torch.tensor(api["attention"]), atol=1e-4, rtol=0)
    page.locator(f"{card} .heads-grid canvas[data-kind='cross'][data-layer='1'][data-head='2']").click()
    page.wait_for_selector("#enlarged:not([hidden]) svg.matrix")
    head = torch.tensor(_cells(page.locator("#enlarged .cell"))).reshape(cross.shape[2:])
    torch.testing.assert_close(head, cross[1, 2], atol=1e-4, rtol=0)
    page.keyboard.press("Escape")
    t5 = ".model-card[data-model='tiny-t5']"
    # the tiny random T5 writes <pad> pieces (decoded to ""): the page must show the API's pieces and matrix
    api5 = _api(url, "api/translate", {"text": SOURCE, "model": "tiny-t5", "beam": 1, "heads": True})
    assert page.locator(f"{t5} .translation").inner_text() == api5["translation"]
    assert page.locator(f"{t5} .tokens.tgt .tok").count() == len(api5["target_pieces"]) > 0
    shown5 = torch.tensor(_cells(page.locator(f"{t5} svg.matrix .cell"))).reshape(len(api5["attention"]), -1)
    torch.testing.assert_close(shown5, torch.tensor(api5["attention"]), atol=1e-4, rtol=0)
    assert page.locator(f"{t5} .heads-grid canvas[data-kind='cross']:not([data-head='mean'])").count() == 2 * 4

    # a decomposition: Marian shows its ALTI+ matrix, T5 says it has none and keeps its attention
    page.select_option("#method", "alti_plus")
    _card_done(page, "tiny-marian", ".method-note[data-method='alti_plus']")
    _card_done(page, "tiny-t5", ".method-note")
    alti = _api(url, "api/translate", {"text": SOURCE, "model": "tiny-marian", "beam": 1, "method": "alti_plus"})
    scores = torch.tensor(alti["attribution"]["scores"])  # (T, S)
    shown = torch.tensor(_cells(page.locator(f"{card} svg.matrix .cell"))).reshape(scores.shape)
    torch.testing.assert_close(shown, scores, atol=1e-4, rtol=0)
    note = page.locator(f"{t5} .method-note")
    assert note.get_attribute("data-method") == "" and "has no alti_plus" in note.inner_text()
    assert page.locator(f"{t5} svg.matrix .cell").count() > 0


def test_llama_heads_grid(mixed_server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(mixed_server)
    page.wait_for_selector("#self-attention-panel:not([hidden])")
    page.fill("#sa-text", TEXT)
    page.click("#sa-read")
    card = ".sa-card[data-model='tiny-llama']"
    page.wait_for_function(
        f"(() => {{ const c = document.querySelector(\"{card}\"); return c && c.querySelector('.sa-grid') "
        "&& !c.querySelector('.sa-grid .pending'); })()",
        timeout=60_000,
    )
    _, pieces = load_self_attention(str(saved_tiny("llama"))).encode(TEXT)
    assert page.locator(f"{card} .sa-pieces .tok").count() == len(pieces)
    assert page.locator(f"{card} .sa-grid canvas:not([data-head='mean'])").count() == 2 * 4  # 2 layers × 4 heads
    # grouped-query attention: 4 query heads over 2 key/value heads, each head labelled with its group
    labels = page.locator(f"{card} .sa-grid > .label").all_inner_texts()
    assert labels[:5] == ["head 1 · kv 1", "head 2 · kv 1", "head 3 · kv 2", "head 4 · kv 2", "mean"]
    expect(page.locator(f"{card} h3")).to_contain_text("4 heads in 2 key/value groups")
    page.locator(f"{card} .sa-grid canvas[data-layer='0'][data-head='3']").click()
    page.wait_for_selector("#enlarged:not([hidden]) svg.matrix")
    expect(page.locator("#enlarged h3")).to_contain_text("layer 1, head 4, key/value group 2")
    n = len(pieces)
    shown = torch.tensor(_cells(page.locator("#enlarged .cell"))).reshape(n, n)
    ids, _ = load_self_attention(str(saved_tiny("llama"))).encode(TEXT)
    torch.testing.assert_close(shown, _eager("llama", ids)[0, 3].float(), atol=1e-4, rtol=0)
