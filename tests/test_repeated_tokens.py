"""``attnkit explain --repeated N`` and ``analyse(model, RepeatedRequest(N))``: a language model's heads on N
random tokens followed by the same N again, where an induction head draws its stripe (Olsson et al. 2022).

The shipped ``attention-only-2l-en`` names a layer-2 head with a prefix-matching score ≥ 0.5; the stripe's
cells are ``i − N + 1`` by a plain loop; the tokens are the first row the induction scores draw; the
scores are a plain loop over the model's own maps run again, and over ``transformers``' eager weights for a
stock Llama; the PNG and the page are written; bad input is one line.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

pytest.importorskip("transformers")

from attnkit.cli import main
from attnkit.service import RepeatedRequest, analyse, open_model, repeated_attention

SHIPPED = "attention-only-2l-en"


def _json(capsys, *argv) -> dict:
    assert main(["explain", "--model", SHIPPED, "--device", "cpu", "--json", *argv]) in (0, None)
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def shipped():
    return open_model(SHIPPED)


def test_cli_names_a_layer_2_induction_head_and_marks_its_stripe(capsys):
    n = 20
    r = _json(capsys, "--repeated", str(n))
    best = r["best_head"]
    assert best["layer"] == 2 and best["prefix_matching"] >= 0.5
    assert (r["layer"], r["head"]) == (best["layer"], best["head"])  # the best head is the one shown
    assert r["prefix_matching"] == best["prefix_matching"]
    stripe, previous = [], []
    for q in range(1, 2 * n + 1):  # 1-based query positions
        if q > n:
            stripe.append([q, q - n + 1])
        if q > 1:
            previous.append([q, q - 1])
    assert r["stripe"] == stripe and r["previous_diagonal"] == previous
    assert r["ids"][:n] == r["ids"][n:] and len(set(r["ids"][:n])) == n
    on_stripe = sum(r["scores"][q - 1][k - 1] for q, k in stripe) / n  # the shown map's own stripe
    assert on_stripe == pytest.approx(best["prefix_matching"], abs=1e-4)
    assert max(h["previous_token"] for h in r["heads"] if h["layer"] == 1) > 0.5  # the head layer 2 builds on


def test_the_tokens_are_the_induction_scores_first_row_and_the_scores_a_loop_over_the_maps(shipped):
    from attnkit.models.induction import repeated_random_tokens

    n, seed = 12, 7
    a = analyse(shipped, RepeatedRequest(n, seed=seed, layer=1, head=3))
    lm = shipped.impl
    rows = repeated_random_tokens(lm.model.config.vocab_size, n, 8, generator=torch.Generator().manual_seed(seed))
    assert a.ids == rows[0].tolist()
    with torch.no_grad():  # the model run again, its maps read back
        maps = lm.model(rows[:1], need_weights=True).attention
    for li, w in enumerate(maps):
        for h in range(w.shape[1]):
            m = w[0, h].double()
            pm = sum(float(m[n + j, j + 1]) for j in range(n)) / n
            pt = sum(float(m[i, i - 1]) for i in range(1, 2 * n)) / (2 * n - 1)
            assert a.prefix_matching[li][h] == pytest.approx(pm, abs=1e-5)
            assert a.previous_token[li][h] == pytest.approx(pt, abs=1e-5)
    assert (a.layer, a.head) == (1, 3) and torch.equal(a.map(), a.attention[0, 2])
    best = max((p, li + 1, h + 1) for li, row in enumerate(a.prefix_matching) for h, p in enumerate(row))
    assert a.best == (best[1], best[2], best[0])
    assert a.pieces == [lm.tokenizer.id_to_piece(i) for i in a.ids]
    b = repeated_attention(shipped, n, seed=seed)  # the notebook's call: the same maps
    assert torch.equal(b.attention, a.attention) and (b.layer, b.head) == b.best[:2]


def test_a_stock_llama_is_read_through_transformers():
    from transformers import AutoModelForCausalLM

    from hf_tiny import saved_tiny

    folder = saved_tiny("llama")
    a = repeated_attention(str(folder), 5, seed=2)
    hf = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        attn = hf(input_ids=torch.tensor([a.ids]), output_attentions=True).attentions  # per layer (1, H, 10, 10)
    assert a.ids[:5] == a.ids[5:]
    for li, w in enumerate(attn):
        torch.testing.assert_close(a.attention[li], w[0].float(), atol=1e-5, rtol=0)
        for h in range(w.shape[1]):
            pm = sum(float(w[0, h, 5 + j, j + 1]) for j in range(5)) / 5
            assert a.prefix_matching[li][h] == pytest.approx(pm, abs=1e-5)


def test_png_page_and_text(capsys, tmp_path):
    png, page = tmp_path / "stripe.png", tmp_path / "stripe.html"
    assert main(["explain", "--model", SHIPPED, "--repeated", "8", "--seed", "3", "--plot", str(png)]) in (0, None)
    out = capsys.readouterr().out
    assert "best induction head: layer 2" in out and f"wrote {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(
        ["explain", "--model", SHIPPED, "--repeated", "8", "--layer", "1", "--head", "1", "--plot", str(page)]
    ) in (
        0,
        None,
    )
    assert "shown: layer 1, head 1" in capsys.readouterr().out
    html = page.read_text()
    data = json.loads(re.search(r"window\.ATTNKIT_DATA = (.*);\n", html).group(1))
    rep = data["self_attention"][0]["repeated"]
    assert rep["length"] == 8 and rep["best"]["layer"] == 2 and len(rep["stripe"]) == 8


def test_bad_input_is_one_line(capsys):
    cases = [
        (["--repeated", "5", "--text", "In the beginning"], "--repeated and --text"),
        (["--repeated", "5", "In the beginning"], "--repeated and --text"),
        (["--repeated", "65"], "--repeated 65 is too long"),
        (["--repeated", "5", "--layer", "3", "--head", "1"], "--layer must be in 1..2"),
        (["--repeated", "5", "--layer", "2"], "--layer and --head go together"),
        (["--repeated", "5", "--method", "saliency"], "--method"),
        (["--repeated", "1"], "repeated"),
    ]
    for argv, message in cases:
        assert main(["explain", "--model", SHIPPED, *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert main(["explain", "--model", "transformer-es-en", "--repeated", "5"]) == 2
    assert "is for a language model" in capsys.readouterr().err
    with pytest.raises(ValueError, match="length"):
        RepeatedRequest(1)
    with pytest.raises(ValueError, match="layer and head"):
        RepeatedRequest(4, layer=1)
