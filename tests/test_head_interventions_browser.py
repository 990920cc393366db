"""The page's head interventions (static/heads.js) in a real browser: `attnkit serve` on the shipped
transformer-es-en and attention-only-2l-en, Debian's chromium driven by Playwright. A shift-click on
cross-attention layer 2, head 1 of the translator's heads grid ablates it: the page shows the translation the
library writes with that head zeroed (:func:`translation_effect`, beam 1), the changed words marked; the language
model's patching heat map marks L1H1, the previous-token head, as its largest cell, with the value the library
computes (:func:`patch_heads`, noising, as ``attnkit heads --patching``); an enlarged head of the language model
shows its strongest role and the QK parts :func:`qk_decomposition` gives."""

import pytest
import torch

from served import served
from test_explorer_browser import ARGS, CHROMIUM, SHOTS

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed")
playwright = pytest.importorskip("playwright.sync_api")
expect = playwright.expect

TRANSLATOR, LM = "transformer-es-en", "attention-only-2l-en"
VERSE = "Y dijo Dios: Sea la luz."


def test_ablate_a_translator_head_and_patch_the_language_model():
    from attnkit.attribution.intervention_effects import translation_effect
    from attnkit.attribution.interventions import HeadAblation
    from attnkit.attribution.patching import patch_heads, repeated_tokens_pair
    from attnkit.attribution.qk_decomposition import qk_decomposition
    from attnkit.service import open_model

    tr = open_model(TRANSLATOR).impl
    clean = tr.translate([VERSE], beam_size=1)[0].translation
    want = translation_effect(tr, VERSE, clean, [HeadAblation(1, 0, site="cross")], beam=1)
    assert want.translation != clean
    lm = open_model(LM).impl.model
    c, k, target = repeated_tokens_pair(lm.config.vocab_size, 20, seed=0)
    patched = patch_heads(lm, c, k, target, direction="noise")
    with served("--workers", "1", "--model", TRANSLATOR, "--model", LM) as url, playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.fill("#text", VERSE)
        page.select_option("#beam", "1")
        page.click("#translate")
        card = page.locator(f".model-card[data-model='{TRANSLATOR}']")
        head = card.locator(".heads-grid canvas[data-kind='cross'][data-layer='1'][data-head='0']")
        head.wait_for(timeout=120_000)
        expect(card.locator(".translation")).to_have_text(clean)
        head.click(modifiers=["Shift"])
        expect(head).to_have_class("hcell ablated")
        out = card.locator(".ablate-out[data-done]")
        out.wait_for(timeout=120_000)
        assert out.get_attribute("data-ablated") == want.translation
        assert out.get_attribute("data-clean") == clean
        assert card.locator(".ablate-ablated mark.ablate-diff").count() > 0  # the words that changed
        change = float(card.locator(".ablate-ll").get_attribute("data-change"))
        assert change == pytest.approx(want.log_likelihood_change, abs=1e-5)
        expect(page.locator("#enlarged")).to_be_hidden()  # a marking click does not enlarge the head
        SHOTS.mkdir(parents=True, exist_ok=True)
        card.locator(".ablate-panel").screenshot(path=str(SHOTS / "ablate.png"))

        sa = page.locator(f".sa-card[data-model='{LM}']")
        sa.locator(".patch-go").click(timeout=120_000)
        top = sa.locator(".patch-out[data-done] .patch-max")
        top.wait_for(timeout=120_000)
        assert (top.get_attribute("data-layer"), top.get_attribute("data-head")) == ("1", "1")
        assert float(top.get_attribute("data-effect")) == pytest.approx(float(patched.effect[0, 0]), abs=1e-9)
        expect(sa.locator(".patch-grid .patch-cell")).to_have_count(patched.scores.numel())
        sa.locator(".sa-patching").screenshot(path=str(SHOTS / "patching.png"))

        # an enlarged head of the text: its roles and the QK parts of its most-attended key at the last query
        text = page.input_value("#sa-text")
        sa.locator(".sa-grid canvas[data-layer='1'][data-head='1']").first.click()
        why = page.locator("#enlarged .why-out[data-done]")
        why.wait_for(timeout=120_000)
        expect(why.locator(".why-strongest")).to_have_attribute("data-role", "induction")
        ids, _ = open_model(LM).impl.encode(text)
        d = qk_decomposition(lm, torch.tensor(ids), 1, 1, len(ids) - 1)
        parts = d.by_key_part()[int(d.weights.argmax())]  # (P,)
        shown = why.locator(".why-part").evaluate_all("ps => ps.map((p) => [p.dataset.part, +p.dataset.value])")
        assert shown[0][0] == d.parts[int(parts.abs().argmax())]  # the largest part first
        assert dict(shown) == pytest.approx(dict(zip(d.parts, parts.tolist())), abs=1e-5)
        b.close()


def test_ablate_rnnsearchs_attention_in_its_card():
    """The RNNsearch card's "ablate the attention" button: the ablated translation and log-likelihood change
    the library gives with its context zeroed (:func:`ablate_rnn_attention`)."""
    from attnkit.attribution.translator_ablation import ablate_rnn_attention, forced_log_likelihood_of
    from attnkit.service import open_model

    name = "rnnsearch-es-en"
    tr = open_model(name).impl
    clean = tr.translate([VERSE], beam_size=1)[0].translation
    clean_ll = forced_log_likelihood_of(tr, VERSE, clean)
    with ablate_rnn_attention(tr.model, "zero"):
        ablated = tr.translate([VERSE], beam_size=1)[0].translation
        ll = forced_log_likelihood_of(tr, VERSE, clean)
    with served("--workers", "1", "--model", name) as url, playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.fill("#text", VERSE)
        page.select_option("#beam", "1")
        page.click("#translate")
        card = page.locator(f".model-card[data-model='{name}']")
        card.locator(".ablate-panel summary").click(timeout=120_000)
        card.locator("button.ablate-attention").click()
        out = card.locator(".ablate-out[data-done]")
        out.wait_for(timeout=120_000)
        assert out.get_attribute("data-ablated") == ablated and out.get_attribute("data-clean") == clean
        change = float(card.locator(".ablate-ll").get_attribute("data-change"))
        assert change == pytest.approx(ll - clean_ll, abs=1e-5)
        b.close()
