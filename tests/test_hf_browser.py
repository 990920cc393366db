"""The explorer's self-attention panel in a real browser: `attnkit serve` on a tiny random BERT and a
tiny random GPT-2 saved as Hugging Face folders, Debian's chromium driven by Playwright. Types a text,
waits for every layer's heads to arrive (one request per layer), checks the grid has L × H heads per
model and the pieces the model reads, clicks a head and checks its enlarged matrix is that head's
(N × N cells with the eager weights), lets GPT-2 continue the text with an attribution method, and opens
an exported view offline."""

import os
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from attnkit.hf import load_self_attention
from hf_tiny import build_tiny, saved_tiny
from test_explorer_browser import ARGS, CHROMIUM, _free_port

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed")
playwright = pytest.importorskip("playwright.sync_api")
TEXT = "Jesús lloró."


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    folders = [str(saved_tiny("bert")), str(saved_tiny("gpt2"))]
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnkit.cli", "serve", "--port", str(port), "--workers", "1", "--model", *folders],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    for _ in range(240):
        try:
            urllib.request.urlopen(url + "api/models", timeout=1)
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(proc.stdout.read()) from None
            time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


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
    page.wait_for_selector("#self-attention-panel:not([hidden])")
    assert page.locator("#translate-panel").is_hidden() and page.locator("#caption-panel").is_hidden()
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
        assert page.locator(f"{card} .sa-pieces .tok").count() == len(pieces)
        heads = page.locator(f"{card} .sa-grid canvas:not([data-head='mean'])")
        assert heads.count() == 2 * 4  # 2 layers × 4 heads
        assert page.locator(f"{card} .sa-grid canvas[data-head='mean']").count() == 2
        page.locator(f"{card} .sa-grid canvas[data-layer='1'][data-head='2']").click()
        page.wait_for_selector("#enlarged:not([hidden]) svg.matrix")
        cells = page.locator("#enlarged .cell")
        n = len(pieces)
        assert cells.count() == n * n
        shown = torch.tensor([float(w) for w in cells.evaluate_all("cs => cs.map((c) => c.dataset.w)")]).reshape(n, n)
        torch.testing.assert_close(shown, _eager(family, ids)[1, 2].float(), atol=1e-4, rtol=0)
        assert "layer 2, head 3" in page.locator("#enlarged h3").inner_text()
        page.keyboard.press("Escape")
        assert page.locator("#enlarged").is_hidden()
    assert page.locator(".sa-card[data-model='tiny-bert'] .sa-continue").count() == 0  # BERT does not write


def test_gpt2_continues_the_text_with_an_attribution(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server)
    card = ".sa-card[data-model='tiny-gpt2']"
    page.wait_for_selector(f"{card} .sa-continue", timeout=60_000)
    page.fill(f"{card} .sa-tokens", "3")
    page.select_option(f"{card} .sa-method", "input_x_gradient")
    page.click(f"{card} .sa-continue")
    page.wait_for_selector(f"{card} .sa-continuation .model-card .matrix", timeout=60_000)
    note = page.locator(f"{card} .sa-continuation .method-note").inner_text()
    assert note.startswith("input_x_gradient")
    assert page.locator(f"{card} .sa-continuation .tokens.tgt .tok").count() == 3
    # the same view exported by the notebook display opens offline with every layer's heads
    from attnkit.explorer.notebook import self_attention_view

    sa = load_self_attention(str(saved_tiny("gpt2")))
    path = self_attention_view(sa.self_attention(TEXT), model="tiny-gpt2").save(tmp_path / "view.html")
    offline = browser.new_page()
    offline.goto(path.as_uri())
    offline.wait_for_selector(".sa-card .sa-grid canvas")
    assert offline.locator(".sa-card .sa-grid canvas:not([data-head='mean'])").count() == 8
    assert offline.locator(".sa-grid .pending").count() == 0 and offline.locator(".sa-rollout").count() == 1
