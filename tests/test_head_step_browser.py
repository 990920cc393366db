"""The step-through view of one head (static/headstep.js) in a real browser: `attnkit serve` on the shipped
attention-only-2l-en, Debian's chromium driven by Playwright. Enlarges layer 2, head 2, steps through it at
one query, and checks the weights the page shows against the model's own row, then turns each knob
(temperature 2, the √d scale off, a masked key, two keys swapped) and checks the numbers shown against
softmax computed here in float64 from the API's q and K; then the same step in an exported page, offline."""

import json
import urllib.request

import pytest
import torch

from served import served
from test_explorer_browser import ARGS, CHROMIUM, SHOTS

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed")
playwright = pytest.importorskip("playwright.sync_api")
expect = playwright.expect

MODEL = "attention-only-2l-en"
TEXT = "The cat sat on the mat. The cat sat"
LAYER, HEAD, QUERY = 2, 2, 10


def _rows(page) -> tuple[torch.Tensor, torch.Tensor]:
    """The weights α_j and the scaled scores e_j the page shows, row by row, as float64."""
    got = page.locator("#enlarged .hs-key").evaluate_all("rs => rs.map((r) => [r.dataset.w, r.dataset.e])")
    w, e = zip(*[(float(a), float(b)) for a, b in got])
    return torch.tensor(w, dtype=torch.float64), torch.tensor(e, dtype=torch.float64)


def _softmax(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), 0)


def test_step_through_a_head_and_turn_every_knob(tmp_path):
    from attnkit.service import open_model

    lm = open_model(MODEL).impl
    ids, pieces = lm.encode(TEXT)
    own = {}
    lm.stream(ids, lambda i, w: own.__setitem__(i, w), layers=[LAYER])
    model_row = own[LAYER][HEAD - 1, QUERY - 1].double()
    with served("--workers", "1", "--model", MODEL) as url, playwright.sync_playwright() as p:
        req = urllib.request.Request(
            url + "api/head-step",
            data=json.dumps({"model": MODEL, "text": TEXT, "layer": LAYER, "head": HEAD, "query": QUERY}).encode(),
            headers={"Content-Type": "application/json"},
        )
        a = json.load(urllib.request.urlopen(req, timeout=120))
        q, K = torch.tensor(a["q"], dtype=torch.float64), torch.tensor(a["keys"], dtype=torch.float64)
        raw, allowed = K @ q, torch.tensor(a["mask"])
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.fill("#sa-text", TEXT)
        page.click("#sa-read")
        card = f".sa-card[data-model='{MODEL}']"
        grid_head = page.locator(f"{card} .sa-grid canvas[data-layer='{LAYER - 1}'][data-head='{HEAD - 1}']")
        grid_head.wait_for(timeout=120_000)
        grid_head.click()
        page.select_option("#enlarged .hs-query", str(QUERY))
        page.click("#enlarged .hs-open")
        rows = page.locator("#enlarged .hs-key")
        expect(rows).to_have_count(len(pieces), timeout=60_000)
        expect(page.locator("#enlarged .hs-head")).to_contain_text(f"layer {LAYER}, head {HEAD}")

        w, _ = _rows(page)  # the page's own recomputation from q, K, the scale and the mask
        torch.testing.assert_close(w, model_row, atol=1e-5, rtol=0)
        torch.testing.assert_close(w, torch.tensor(a["weights"], dtype=torch.float64), atol=1e-5, rtol=0)
        plain = _softmax(raw * a["scale"], allowed)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("#enlarged .hs-box").screenshot(path=str(SHOTS / "head-step.png"))

        page.fill("#enlarged .hs-temp", "2")  # temperature 2: softmax(e / 2), flatter
        w, e = _rows(page)
        torch.testing.assert_close(w, _softmax(raw * a["scale"] / 2, allowed), atol=1e-9, rtol=0)
        entropy = lambda x: -(x[x > 0] * x[x > 0].log()).sum()
        assert entropy(w) > entropy(plain)
        torch.testing.assert_close(e[allowed], (raw * a["scale"] / 2)[allowed], atol=1e-9, rtol=0)

        page.click("#enlarged .hs-reset")
        page.uncheck("#enlarged .hs-sqrt")  # no 1/√d_h: softmax(q·k)
        w, _ = _rows(page)
        torch.testing.assert_close(w, _softmax(raw, allowed), atol=1e-9, rtol=0)

        page.click("#enlarged .hs-reset")
        masked = 3  # a key the query sees (causal: keys 1..QUERY)
        rows.nth(masked).click()
        w, _ = _rows(page)
        assert w[masked] == 0
        rest = plain.clone()
        rest[masked] = 0
        torch.testing.assert_close(w, rest / rest.sum(), atol=1e-9, rtol=0)
        expect(rows.nth(masked)).to_have_class("hs-key hs-masked")

        page.click("#enlarged .hs-reset")
        out = json.loads(page.locator("#enlarged .hs-out").get_attribute("data-out"))
        page.select_option("#enlarged .hs-swap-a", "0")
        page.select_option("#enlarged .hs-swap-b", "4")
        page.click("#enlarged .hs-swap")
        w, _ = _rows(page)
        swapped = plain.clone()
        swapped[[0, 4]] = plain[[4, 0]]
        torch.testing.assert_close(w, swapped, atol=1e-9, rtol=0)  # the rows permute ...
        after = json.loads(page.locator("#enlarged .hs-out").get_attribute("data-out"))
        torch.testing.assert_close(torch.tensor(after), torch.tensor(out), atol=1e-9, rtol=0)  # ... the output not
        expect(page.locator("#enlarged .hs-note")).to_contain_text("RoPE")

        # the same step exported offline: the knobs recompute with no server
        from attnkit.explorer.html import write_explorer_html

        path = write_explorer_html(tmp_path / "step.html", head_steps=[a])
        offline = b.new_page()
        offline.goto(path.as_uri())
        offline.locator("#head-step-panel .hs-key").first.wait_for()
        offline.fill("#head-step-panel .hs-temp", "2")
        shown = offline.locator("#head-step-panel .hs-key").evaluate_all("rs => rs.map((r) => +r.dataset.w)")
        torch.testing.assert_close(
            torch.tensor(shown, dtype=torch.float64), _softmax(raw * a["scale"] / 2, allowed), atol=1e-9, rtol=0
        )
        b.close()


def test_rnnsearch_card_steps_through_one_decoder_step():
    """The RNNsearch card's step-through: the weights α_tj the page shows at decoder step 2 are the model's own
    (its teacher-forced pass over the translation the card shows)."""
    from attnkit.service import open_model

    name, source = "rnnsearch-es-en", "Y dijo Dios: Sea la luz."
    tr = open_model(name).impl
    translation = tr.translate([source], beam_size=1)[0].translation
    want = tr.attention(source, translation).maps.alignment[1].double()  # decoder step 2: (S,)
    with served("--workers", "1", "--model", name) as url, playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.fill("#text", source)
        page.select_option("#beam", "1")
        page.click("#translate")
        card = page.locator(f".model-card[data-model='{name}']")
        card.locator(".hs-rnn summary").click(timeout=120_000)
        card.locator(".hs-rnn .hs-query").select_option("2")
        card.locator(".hs-rnn .hs-open").click()
        rows = card.locator(".hs-rnn .hs-key")
        rows.first.wait_for(timeout=120_000)
        got = rows.evaluate_all("rs => rs.map((r) => +r.dataset.w)")
        torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), want, atol=1e-5, rtol=0)
        b.close()
