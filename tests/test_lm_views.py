"""The language-model methods where attnkit's other methods live (issue 56): ``attnkit explain --method
attention_norm|value_zeroing|alti|alti_logit`` as rows, every layer's map for the self-attention views,
``logit_lens|direct_logit|routes`` through ``LMViewRequest`` (CLI in-process, JSON, PNG, page, notebook).

References are independent of the code under test: the model run again (its logits, its argmax), a
float64 loop over GPT-2's own projections and eager attention weights, ALTI's rollout rows summing to 1."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.cli import main
from attnkit.errors import InputError
from attnkit.explorer.lm_view_answer import lm_view_json
from attnkit.hf import load_self_attention
from attnkit.service import GenerationRequest, LMViewRequest, analyse, open_model
from hf_tiny import build_tiny, saved_tiny

TEXT = "Jesús lloró en la tierra."


@pytest.fixture(scope="module")
def gpt2():
    return open_model(str(saved_tiny("gpt2")))


@pytest.fixture(scope="module")
def llama():
    return open_model(str(saved_tiny("llama")))


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@torch.no_grad()
def test_alti_logit_rows_add_up_to_the_models_own_logit_of_each_next_token(llama):
    sa = llama.impl
    assert sa.model.config.attention_bias is False  # no bias term: the tokens' shares are the whole logit
    a = analyse(llama, GenerationRequest(TEXT, mode="forced", method="alti_logit")).attribution
    ids, _ = sa.encode(TEXT)
    logits = sa.model(input_ids=torch.tensor([ids[:-1]])).logits[0].double()  # (n-1, V): the model run again
    want = logits[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    torch.testing.assert_close(a.raw.double().sum(-1), want, atol=1e-4, rtol=1e-4)
    assert torch.all(a.raw.triu(1) == 0)  # a causal model: no share from a later token
    assert a.method == "alti_logit" and len(a.target) == len(ids) - 1


@torch.no_grad()
def test_attention_norm_rows_equal_a_float64_loop_over_gpt2s_own_projections():
    folder = saved_tiny("gpt2")
    model = open_model(str(folder))
    a = analyse(model, GenerationRequest(TEXT, mode="forced", method="attention_norm", layer=2)).attribution
    sa = model.impl
    ids, _ = sa.encode(TEXT)
    x_ids = torch.tensor(ids[:-1])
    n = x_ids.shape[0]
    eager, _ = build_tiny("gpt2", attn_implementation="eager")
    eager = eager.double().eval()
    out = eager(x_ids[None], output_attentions=True, output_hidden_states=True)
    alpha = out.attentions[1][0]  # (H, N, N): layer 2
    block = eager.transformer.h[1]
    u = block.ln_1(out.hidden_states[1][0])  # (N, D)
    d, nh, dh = 32, 4, 8
    v = block.attn.c_attn(u)[:, 2 * d :].view(n, nh, dh)
    w = block.attn.c_proj.weight  # (H·Dh, D)
    want = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(i + 1):
            t = sum(alpha[h, i, j] * (v[j, h] @ w[h * dh : (h + 1) * dh]) for h in range(nh))
            want[i, j] = t.norm()
    torch.testing.assert_close(a.raw.double(), want, atol=1e-4, rtol=1e-5)  # the magnitudes, kept
    want = want / want.sum(-1, keepdim=True)
    torch.testing.assert_close(a.scores.double(), want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("method", ["attention_norm", "value_zeroing"])
def test_the_cli_says_its_rows_are_normalised_and_gives_the_magnitudes_in_json(gpt2, capsys, method):
    from attnkit.attribution.lm_methods import layer_maps

    folder = saved_tiny("gpt2")
    code, out, err = _cli(capsys, "explain", "--model", folder, "--text", TEXT, "--method", method)
    assert code == 0 and "each row normalised to sum to 1" in out and "'raw' in --json" in out, err
    code, out, err = _cli(capsys, "explain", "--model", folder, "--text", TEXT, "--method", method, "--json")
    assert code == 0, err
    d = json.loads(out)
    ids, _ = gpt2.impl.encode(TEXT)
    want = layer_maps(gpt2.impl.model, ids[:-1], method)[-1]  # (n-1, n-1): the last layer's map, whole
    torch.testing.assert_close(torch.tensor(d["raw"], dtype=torch.float64), want, atol=1e-5, rtol=0)
    assert float((want.sum(-1) - 1).abs().max()) > 0.05  # magnitudes, not shares
    shares = want / want.sum(-1, keepdim=True)
    torch.testing.assert_close(torch.tensor(d["scores"], dtype=torch.float64), shares, atol=1e-5, rtol=0)


def test_value_zeroing_and_alti_rows_and_their_refusals(gpt2):
    a = analyse(gpt2, GenerationRequest(TEXT, max_new_tokens=2, method="alti")).attribution
    assert a.scores.shape == (2, len(a.source)) and torch.allclose(a.scores.sum(-1), torch.ones(2))
    a = analyse(gpt2, GenerationRequest(TEXT, mode="forced", method="value_zeroing", layer=1)).attribution
    assert a.params["layer"] == 1 and torch.all(a.scores >= 0)
    with pytest.raises(InputError, match="alti composes every layer"):
        analyse(gpt2, GenerationRequest(TEXT, mode="forced", method="alti", layer=1))
    with pytest.raises(InputError, match="view of one prediction"):
        analyse(gpt2, GenerationRequest(TEXT, mode="forced", method="routes"))


def test_the_registry_lists_the_new_methods_for_the_benchmark():
    from attnkit.attribution.generation import generation_methods
    from attnkit.cli.explain_hf import VIEW_METHODS

    methods = generation_methods()
    for m in ("attention_norm", "value_zeroing", "alti", "alti_logit", "logit_lens", "direct_logit", "routes"):
        assert m in methods
    assert {"attention_norm", "value_zeroing", "alti"} <= set(VIEW_METHODS)
    # the rows a model has (lm_faithfulness's default): no context mixing for a family that is not traced
    from types import SimpleNamespace

    from attnkit.attribution.generation import row_methods

    def like(model_type):
        return SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(model_type=model_type)))

    assert "alti_logit" in row_methods(like("gpt2")) and "routes" not in row_methods()
    assert "alti" in row_methods(like("phi3"))  # traced (its fused projection read by slicing)
    assert "alti" not in row_methods(like("falcon")) and "rollout" in row_methods(like("falcon"))


@torch.no_grad()
def test_logit_lens_and_direct_logit_through_the_cli_equal_the_model_run_again(gpt2, capsys):
    folder = saved_tiny("gpt2")
    sa = gpt2.impl
    ids, _ = sa.encode(TEXT)
    logits = sa.model(input_ids=torch.tensor([ids])).logits[0]  # (N, V)
    code, out, err = _cli(capsys, "explain", "--model", folder, "--text", TEXT, "--method", "logit_lens", "--json")
    assert code == 0, err
    lens = json.loads(out)
    predicted = int(logits[-1].argmax())
    assert lens["position"] == len(ids) and lens["token"]["id"] == predicted
    assert [r["layer"] for r in lens["lens"]] == [0, 1, 2]  # the embeddings, then each block (1-based)
    assert lens["lens"][-1]["rank"] == 1 and lens["lens"][-1]["top"][0]["id"] == predicted
    assert lens["lens"][-1]["top"][0]["logit"] == pytest.approx(float(logits[-1, predicted]), abs=1e-4)
    code, out, err = _cli(
        capsys, "explain", "--model", folder, "--text", TEXT, "--method", "direct_logit", "--position", 3, "--json"
    )
    assert code == 0, err
    d = json.loads(out)["direct_logit"]
    assert d["position"] == 3 and d["token"] == int(logits[2].argmax())
    total = d["embedding"] + d["norm_bias"] + sum(sum(r["heads"]) + r["out_bias"] + r["mlp"] for r in d["layers"])
    assert total == pytest.approx(float(logits[2, d["token"]]), abs=1e-4)  # the terms add up to the logit
    code, out, _ = _cli(capsys, "explain", "--model", folder, "--text", TEXT, "--method", "direct_logit")
    assert code == 0 and "head 4" in out and "MLP" in out


@torch.no_grad()
@pytest.mark.parametrize("view", ["logit_lens", "direct_logit", "routes"])
def test_a_one_token_text_has_a_prediction_to_view_through_the_cli(gpt2, capsys, view):
    """A view of one prediction reads the token after the text: one token is enough (a forced attribution,
    which explains each next token by the ones before, needs two)."""
    ids, _ = gpt2.impl.encode("God")
    assert len(ids) == 1
    predicted = int(gpt2.impl.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
    code, out, err = _cli(capsys, "explain", "--model", saved_tiny("gpt2"), "--text", "God", "--method", view, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["position"] == 1 and data["pieces"] == gpt2.impl.pieces_of(ids)
    assert data["token"]["id"] == predicted
    code, _, err = _cli(capsys, "explain", "--model", saved_tiny("gpt2"), "--text", "God", "--method", "alti_logit")
    assert code == 2 and "needs at least two" in err


def test_routes_through_the_cli_json_png_and_page(gpt2, capsys, tmp_path):
    folder = saved_tiny("gpt2")
    png, page = tmp_path / "graph.png", tmp_path / "graph.html"
    code, out, err = _cli(
        capsys, "explain", TEXT, "--model", folder, "--method", "routes", "--threshold", 0.05, "--plot", png, "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    g = data["graph"]
    heads = [e for e in g["edges"] if e["head"] is not None]
    assert heads and all(e["weight"] >= 0.05 for e in heads)
    assert {e["layer"] for e in g["edges"]} <= {1, 2} and all(1 <= e["head"] <= 4 for e in heads)
    # every head edge's attention row is there for the page, and its head really attends to the source
    rows = {(r["layer"], r["target"]): r["heads"] for r in data["attention_rows"]}
    assert all(rows[(e["layer"], e["target"])][e["head"] - 1][e["source"] - 1] > 0 for e in heads)
    assert str(data["position"]) in data["node_lens"]
    # what an edge's head promotes at its target: the top token's logit is that head's direct logit attribution
    from attnkit.attribution.lm_mixing import direct_logit_attribution

    e = heads[0]
    row = next(r for r in data["attention_rows"] if (r["layer"], r["target"]) == (e["layer"], e["target"]))
    top = row["promotes"][e["head"] - 1][0]
    ids = torch.tensor(gpt2.impl.encode(TEXT)[0])
    dla = direct_logit_attribution(gpt2.impl.model, ids, position=e["target"] - 1, token=top["id"])
    assert top["logit"] == pytest.approx(float(dla.heads[e["layer"] - 1, e["head"] - 1]), abs=1e-4)
    assert row["suppresses"][e["head"] - 1][0]["logit"] <= top["logit"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, err = _cli(capsys, "explain", TEXT, "--model", folder, "--method", "routes", "--plot", page)
    assert code == 0, err
    html = page.read_text(encoding="utf-8")
    assert "window.AttnkitFlow" in html and "<script src=" not in html  # self-contained
    start = html.index("window.ATTNKIT_FLOW = ") + len("window.ATTNKIT_FLOW = ")
    shown = json.JSONDecoder().raw_decode(html[start:])[0]
    assert shown["graph"]["edges"] == lm_view_json(analyse(gpt2, LMViewRequest(TEXT)))["graph"]["edges"]


def test_every_layers_mixing_map_as_the_self_attention_views(capsys):
    from attnkit.attribution.lm_mixing import alti

    folder = saved_tiny("gpt2")
    code, out, err = _cli(capsys, "explain", TEXT, "--model", folder, "--self-attention", "--method", "alti", "--json")
    assert code == 0, err
    data = json.loads(out)
    sa = load_self_attention(str(folder))
    ids, _ = sa.encode(TEXT)
    got = torch.tensor(data["scores"], dtype=torch.float64)
    assert data["layer"] == 2 and torch.allclose(got.sum(-1), torch.ones(len(ids), dtype=torch.float64), atol=1e-4)
    torch.testing.assert_close(got, alti(sa.model, torch.tensor(ids)).double(), atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("family", "args", "says"),
    [
        ("bert", ["--method", "alti_logit"], "alti_logit is not defined for an encoder-only model"),
        ("gpt2", ["--method", "routes", "--layer", "1"], "--layer: not for routes"),
        ("gpt2", ["--method", "logit_lens", "--threshold", "0.1"], "--threshold is for --method routes"),
        ("gpt2", ["--method", "alti", "--position", "2"], "--position is for the views"),
        ("gpt2", ["--method", "logit_lens", "--position", "99"], "position must be a token of the text, 1..13"),
        ("bert", ["--method", "routes"], "routes is not defined for an encoder-only model"),
        ("marian", ["--method", "alti_logit"], "alti_logit is a language model's method, not a translator's"),
    ],
)
def test_what_cannot_be_done_is_refused_in_one_line(capsys, family, args, says):
    code, _, err = _cli(capsys, "explain", TEXT, "--model", saved_tiny(family), *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and says in lines[0], err


@pytest.mark.parametrize(("family", "extra"), [("gpt2", []), ("bert", []), ("gpt2", ["--self-attention"])])
def test_an_unknown_method_lists_the_methods_that_model_takes(capsys, family, extra):
    from attnkit.attribution import METHODS
    from attnkit.attribution.generation import generation_methods
    from attnkit.cli.explain_hf import VIEW_METHODS

    code, _, err = _cli(capsys, "explain", TEXT, "--model", saved_tiny(family), "--method", "nonsense", *extra)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "unknown attribution method 'nonsense'" in lines[0], err
    listed = lines[0].split(" takes: ")[1].split(", ")
    decoder = family == "gpt2" and not extra
    assert listed == (generation_methods() if decoder else list(VIEW_METHODS))  # Captum is installed here
    assert "alti_plus" in METHODS and "alti_plus" not in listed  # not the translators' list


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"view": "graph"}, "view must be one of"),
        ({"threshold": 1.5}, "threshold must be a number in"),
        ({"view": "logit_lens", "threshold": 0.1}, "threshold is for the routes view"),
        ({"position": 0}, "position must be"),
        ({"token": "x"}, "token is for the direct_logit view"),
    ],
)
def test_a_view_request_names_its_bad_field(fields, says):
    with pytest.raises(InputError, match=says):
        LMViewRequest(TEXT, **fields)


def test_the_notebook_shows_the_routes_graph_and_the_tables(gpt2):
    import attnkit

    routes = analyse(gpt2, LMViewRequest(TEXT, threshold=0.1))
    view = attnkit.show(routes)
    assert "AttnkitFlow.render" in view.html and routes._repr_html_().startswith("<iframe")
    lens = analyse(gpt2, LMViewRequest(TEXT, view="logit_lens"))
    assert "<table" in lens._repr_html_() and "embeddings" in lens._repr_html_()
    with pytest.raises(InputError, match="is a table"):
        attnkit.show(lens)


def test_the_logit_lens_at_several_positions_equals_lm_mixings_one_position_at_a_time(gpt2, monkeypatch):
    from attnkit.attribution import lm_methods
    from attnkit.attribution.lm_mixing import logit_lens

    sa = gpt2.impl
    ids, _ = sa.encode(TEXT)
    vocab = sa.model.get_output_embeddings().weight.shape[0]
    monkeypatch.setattr(lm_methods, "LENS_LOGITS", 2 * vocab)  # two positions' logits at a time
    got = lm_methods.lens_at(sa.model, ids, [0, 4, 5, len(ids) - 1], k=3)
    for p, rows in got.items():
        want = logit_lens(sa.model, torch.tensor(ids), position=p, k=3)
        assert [(r.layer, r.top, r.rank) for r in rows] == [(r.layer, r.top, r.rank) for r in want]
