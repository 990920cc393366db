"""The explorer's views inline in a notebook: a small notebook executed with nbclient (ipykernel), its
nbconvert HTML opened in Debian's chromium: every view renders from its own inline page, with no request
beyond the file itself (no server, no CDN)."""

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
nbconvert = pytest.importorskip("nbconvert")
CHROMIUM = Path("/usr/bin/chromium")

CELLS = [
    "import torch, attnkit\n"
    "from attnkit.attribution import explain\n"
    "from attnkit.tasks.translation import Translator\n"
    "from attnkit.tasks.captioning import Captioner\n"
    "tr = Translator.load('rnnsearch-es-en')",
    "explain(tr, 'Y dijo Dios: Sea la luz.', target='And God said, Let there be light.', method='input_x_gradient')",
    "tr.attention('Jesús lloró.', 'Jesus wept.')",
    "img = torch.zeros(1, 64, 64)\nimg[0, 6:26, 6:26] = 0.8\nattnkit.show(Captioner.load('captioner-soft'), img, method='saliency')",
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    folder = tmp_path_factory.mktemp("nb")
    nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    ).execute()
    return nb, folder


def test_results_show_themselves_as_inline_explorer_views(executed):
    nb, _ = executed
    for cell in nb.cells[1:]:
        html = next(o for o in cell.outputs if o.output_type == "execute_result")["data"]["text/html"]
        assert html.startswith('<iframe class="attnkit-view" srcdoc="')
        assert not re.search(r"(src|href)=&quot;(https?:)?//", html)  # nothing loaded from elsewhere


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install chromium)")
def test_the_notebooks_html_renders_every_view_in_chromium(executed):
    playwright = pytest.importorskip("playwright.sync_api")
    nb, folder = executed
    body, _ = nbconvert.HTMLExporter(template_name="basic").from_notebook_node(nb)
    page_file = folder / "notebook.html"
    page_file.write_text(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{body}</body></html>")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        requests = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_file.as_uri())
        frames = page.frame_locator("iframe.attnkit-view")
        assert page.locator("iframe.attnkit-view").count() == 3
        ixg = frames.nth(0)
        ixg.locator(".model-card .method-note[data-method='input_x_gradient']").wait_for(timeout=30_000)
        assert ixg.locator(".model-card .matrix .cell").count() > 10
        ixg.locator(".tokens.tgt .tok[data-i='1']").hover()
        assert "draws most on" in ixg.locator(".status").inner_text()
        att = frames.nth(1)
        att.locator(".model-card .matrix .cell").first.wait_for(timeout=30_000)
        assert att.locator(".steps-table").count() == 1  # RNNsearch's three steps, from the model's maps
        cap = frames.nth(2)
        cap.locator(".caption-card .method-note[data-method='saliency']").wait_for(timeout=30_000)
        cap.locator(".cword[data-t='1']").hover()
        assert cap.locator(".heat image.heat-map").get_attribute("data-t") == "1"
        browser.close()
    outside = [u for u in requests if not u.startswith(("file:", "data:", "about:", "blob:"))]
    assert not outside, outside
