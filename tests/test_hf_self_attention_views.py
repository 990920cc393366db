"""Hugging Face encoder-only and decoder-only models in the CLI and the explorer's API: `attnkit explain`
prints and writes the self-attention views (BERT) and a continuation's attributions (GPT-2, Llama), equal
to the Python API's; /api/self-attention gives the eager head means, rollout and per-layer heads within the
answer limit, and /api/generate a continuation with the asked method."""

import json

import pytest
import torch

from attnkit.alignment import attention_rollout
from attnkit.attribution import explain_generation
from attnkit.cli import main
from attnkit.hf import load_self_attention
from hf_tiny import build_tiny, saved_tiny

TEXT = "En el principio creó Dios los cielos y la tierra."


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _eager_maps(family: str, ids: list[int]) -> torch.Tensor:
    model, _ = build_tiny(family, attn_implementation="eager")
    with torch.no_grad():
        return torch.stack(model(input_ids=torch.tensor([ids]), output_attentions=True).attentions)[:, 0].float()


def test_explain_writes_an_encoder_only_models_views(capsys, tmp_path):
    folder = saved_tiny("bert")
    sa = load_self_attention(str(folder))
    ids, pieces = sa.encode(TEXT)
    eager = _eager_maps("bert", ids)  # (L, H, N, N)
    code, out, err = _cli(capsys, "explain", TEXT, "--model", folder, "--layer", 1, "--head", 3, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["pieces"] == pieces and not data["causal"]
    torch.testing.assert_close(torch.tensor(data["scores"]), eager[0, 2], atol=1e-5, rtol=0)
    code, out, err = _cli(capsys, "explain", TEXT, "--model", folder, "--method", "rollout", "--json")
    torch.testing.assert_close(torch.tensor(json.loads(out)["scores"]), attention_rollout(eager), atol=1e-5, rtol=0)
    png, html = tmp_path / "heads.png", tmp_path / "views.html"
    code, out, err = _cli(capsys, "explain", TEXT, "--model", folder, "--plot", png)
    assert code == 0 and f"wrote {png}" in out and "layer 2, mean of the 4 heads" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, err = _cli(capsys, "explain", TEXT, "--model", folder, "--plot", html)
    assert code == 0 and html.read_text().count('"num_layers":2') == 1
    code, _, err = _cli(capsys, "explain", TEXT, "--model", folder, "--plot", tmp_path / "x.svg")
    assert code == 2 and "--plot" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("family", "method"), [("gpt2", "input_x_gradient"), ("llama", "attention")])
def test_explain_attributes_a_continuation_as_the_api_does(capsys, tmp_path, family, method):
    folder = saved_tiny(family)
    png = tmp_path / "att.png"
    code, out, err = _cli(
        capsys, "explain", TEXT, "--model", folder, "--method", method, "--max-new-tokens", 3, "--json", "--plot", png
    )
    assert code == 0, err
    data = json.loads(out)
    expected = explain_generation(load_self_attention(str(folder)), TEXT, method=method, max_new_tokens=3)
    assert data["target"] == expected.target and data["source"] == expected.source and len(data["target"]) == 3
    torch.testing.assert_close(torch.tensor(data["scores"]), expected.scores, atol=1e-5, rtol=0)
    assert png.is_file() and f"wrote {png}" in err
    code, out, _ = _cli(capsys, "explain", TEXT, "--model", folder, "--method", method, "--max-new-tokens", 3)
    assert code == 0 and "continuation of the text" in out and expected.extra["translation"] in out
    code, out, _ = _cli(capsys, "explain", TEXT, "--model", folder, "--self-attention", "--method", "rollout")
    assert code == 0 and "decoder-only" in out and "attention rollout" in out


@pytest.fixture(scope="module")
def client():
    from fastapi.testclient import TestClient

    from attnkit.explorer.app import create_app, load_models
    from attnkit.explorer.options import ServeOptions

    models = load_models([str(saved_tiny("bert")), str(saved_tiny("gpt2"))])
    app = create_app(models, verses=[], options=ServeOptions(max_answer_numbers=3000, max_new_tokens=5))
    with TestClient(app, base_url="http://127.0.0.1:8000") as c:
        yield c


def test_api_self_attention_gives_eager_maps_layer_by_layer(client):
    infos = {m["name"]: m for m in client.get("/api/models").json()["models"]}
    assert infos["tiny-bert"]["task"] == "self-attention" and not infos["tiny-bert"]["generates"]
    assert infos["tiny-gpt2"]["generates"] and "integrated_gradients" in [
        m["name"] for m in infos["tiny-gpt2"]["methods"]
    ]
    text = "Jesús lloró."
    for family in ("bert", "gpt2"):
        sa = load_self_attention(str(saved_tiny(family)))
        eager = _eager_maps(family, sa.encode(text)[0])
        r = client.post("/api/self-attention", json={"text": text, "model": f"tiny-{family}"})
        assert r.status_code == 200, r.text
        p = r.json()
        assert p["layers"] == [] and p["causal"] == (family == "gpt2")
        torch.testing.assert_close(torch.tensor(p["head_mean"]), eager.mean(1), atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(p["rollout"]), attention_rollout(eager), atol=1e-4, rtol=0)
        for layer in (1, 2):  # layer numbers count from 1: "layer": 2 is the second layer, eager[1]
            one = client.post("/api/self-attention", json={"text": text, "model": f"tiny-{family}", "layer": layer})
            one = one.json()
            assert one["head_mean"] is None and [x["layer"] for x in one["layers"]] == [layer]
            torch.testing.assert_close(torch.tensor(one["layers"][0]["heads"]), eager[layer - 1], atol=1e-4, rtol=0)


def test_api_bounds_and_errors(client):
    long = " ".join(["Dios"] * 40)  # (L + 1) · N² numbers over the answer limit of 3000
    r = client.post("/api/self-attention", json={"text": long, "model": "tiny-bert"})
    assert r.status_code == 413 and "--max-answer-numbers" in r.json()["error"]
    for layer in (0, 3, -1):  # tiny-bert has layers 1 and 2
        r = client.post("/api/self-attention", json={"text": "x", "model": "tiny-bert", "layer": layer})
        assert (
            r.status_code == 422 and f"layer must be in 1..2 (tiny-bert has 2 layers), got {layer}" in r.json()["error"]
        )
    r = client.post("/api/self-attention", json={"text": "  ", "model": "tiny-bert"})
    assert r.status_code == 400
    r = client.post("/api/generate", json={"text": "Jesús lloró.", "model": "tiny-bert"})
    assert r.status_code == 422 and "does not write" in r.json()["error"]
    r = client.post("/api/generate", json={"text": "Jesús lloró.", "model": "tiny-gpt2", "max_new_tokens": 6})
    assert r.status_code == 413 and "--max-new-tokens" in r.json()["error"]
    r = client.post("/api/generate", json={"text": "Jesús lloró.", "model": "tiny-gpt2", "method": "shap"})
    assert r.status_code == 400 and "shap" in r.json()["error"]  # alti_plus is a language model's ALTI now
    r = client.post("/api/self-attention", content="text=x", headers={"Content-Type": "text/plain"})
    assert r.status_code == 415  # JSON only, as every route


def test_api_generate_attributes_the_continuation(client):
    sa = load_self_attention(str(saved_tiny("gpt2")))
    r = client.post(
        "/api/generate", json={"text": "Jesús lloró.", "model": "tiny-gpt2", "max_new_tokens": 3, "method": "saliency"}
    )
    assert r.status_code == 200, r.text
    p = r.json()
    expected = explain_generation(sa, "Jesús lloró.", method="saliency", max_new_tokens=3)
    assert p["written_pieces"] == expected.target and p["context_pieces"] == expected.source
    torch.testing.assert_close(torch.tensor(p["attribution"]["scores"]), expected.scores, atol=1e-4, rtol=0)
    last = explain_generation(sa, "Jesús lloró.", method="attention", max_new_tokens=3)
    torch.testing.assert_close(torch.tensor(p["attention"]), last.scores, atol=1e-4, rtol=0)
    # a gradient method is a heavy job: it ran in a worker process, whose time the queue now knows
    assert client.app.state.explorer.jobs.recent  # the job was timed under its kind


def test_api_flow_gives_the_logit_lens_and_refuses_bad_fields(client):
    text = "Jesús lloró."
    # the logit lens runs in the fast lane (the routes, a heavy job in a worker process, are drawn and checked
    # against the service in tests/test_hf_browser.py)
    r = client.post("/api/flow", json={"text": text, "model": "tiny-gpt2", "view": "logit_lens", "position": 2})
    assert r.status_code == 200, r.text
    sa = load_self_attention(str(saved_tiny("gpt2")))
    ids, _ = sa.encode(text)
    with torch.no_grad():
        predicted = int(sa.model(input_ids=torch.tensor([ids])).logits[0, 1].argmax())  # the model run again
    lens = r.json()
    assert lens["position"] == 2 and lens["token"]["id"] == predicted and lens["lens"][-1]["top"][0]["id"] == predicted
    r = client.post("/api/flow", json={"text": text, "model": "tiny-gpt2", "view": "direct_logit"})
    assert r.status_code == 200, r.text
    d = r.json()["direct_logit"]
    with torch.no_grad():
        logit = float(sa.model(input_ids=torch.tensor([ids])).logits[0, -1, d["token"]])
    total = d["embedding"] + d["norm_bias"] + sum(sum(x["heads"]) + x["out_bias"] + x["mlp"] for x in d["layers"])
    assert d["position"] == len(ids) and total == pytest.approx(logit, abs=1e-4)
    for body, status, said in (
        ({"threshold": 0.001}, 422, "threshold"),
        ({"position": 99}, 422, "position must be a token of the text"),
        ({"view": "graph"}, 422, "view"),
        ({"model": "tiny-bert"}, 422, "no language-model head"),
        ({"text": " ".join(["Dios"] * 40)}, 413, "--max-answer-numbers"),
    ):
        r = client.post("/api/flow", json={"text": text, "model": "tiny-gpt2", **body})
        assert r.status_code == status and said in r.json()["error"], r.text


def test_api_flow_stream_collects_to_the_flow_answer(client):
    """/api/flow/stream: a start line at once, one line per layer (the last layer first, as the top-down walk
    finishes it) and a done line; the layers' edges and MLP nodes in the order they came, with the done line,
    are /api/flow's answer (the graph computed again by a second job)."""
    body = {"text": "Jesús lloró.", "model": "tiny-gpt2", "threshold": 0.05}
    with client.stream("POST", "/api/flow/stream", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(x) for x in r.iter_lines() if x.strip()]
    start, *layers, done = lines
    assert start["event"] == "start" and done["event"] == "done", lines[-1]
    assert [x["event"] for x in layers] == ["layer"] * start["layers"]
    assert [x["layer"] for x in layers] == list(range(start["layers"], 0, -1))
    want = client.post("/api/flow", json=body).json()
    got = {k: v for k, v in done.items() if k != "event"}
    got["graph"] = {
        **done["graph"],
        "edges": [e for x in layers for e in x["edges"]],
        "mlp_nodes": [m for x in layers for m in x["mlp_nodes"]],
    }
    got.pop("seconds"), want.pop("seconds")
    assert any(e["head"] is not None for e in want["graph"]["edges"])  # a graph beyond the residuals
    assert got == want
    assert {k: start[k] for k in ("model", "pieces", "position", "layers", "heads")} == {
        k: want[k] for k in ("model", "pieces", "position", "layers", "heads")
    }
    assert start["threshold"] == want["graph"]["threshold"] == 0.05
    for extra, said in (({"view": "logit_lens"}, "only the routes view"), ({"threshold": 0.001}, "threshold")):
        r = client.post("/api/flow/stream", json={**body, **extra})
        assert r.status_code == 422 and said in r.json()["error"], r.text


def test_grouped_query_heads_are_named_by_their_key_value_group(capsys, tmp_path, monkeypatch):
    """Llama's 4 query heads read 2 key/value heads (heads 1-2 group 1, heads 3-4 group 2: checked against
    the model in test_hf_self_attention): the JSON, the explorer's payload, the notebook view and the
    picture's column titles say so; BERT's heads say nothing of groups."""
    import attnkit.viz.heads as heads_mod
    from attnkit.explorer.notebook import self_attention_view
    from attnkit.explorer.self_attention import self_attention_answer

    llama = saved_tiny("llama")
    code, out, err = _cli(capsys, "explain", TEXT, "--model", llama, "--self-attention", "--json")
    assert code == 0, err
    assert json.loads(out)["kv_groups"] == [1, 1, 2, 2]
    code, out, err = _cli(capsys, "explain", TEXT, "--model", llama, "--max-new-tokens", 2, "--json")
    assert code == 0 and json.loads(out)["kv_groups"] == [1, 1, 2, 2]
    code, out, _ = _cli(capsys, "explain", TEXT, "--model", saved_tiny("bert"), "--json")
    assert code == 0 and json.loads(out)["kv_groups"] is None
    sa = load_self_attention(str(llama))
    assert self_attention_answer(sa, TEXT, layer=1).kv_groups == [1, 1, 2, 2]
    (view,) = self_attention_view(sa.self_attention(TEXT, heads=[2, 3])).data["self_attention"]
    assert view["kv_groups"] == [1, 2]
    seen = {}
    write = heads_mod.save_png

    def keep(fig, path, dpi):
        seen["titles"] = [ax.get_title() for ax in fig.axes if ax.get_title()]
        return write(fig, path, dpi)

    monkeypatch.setattr(heads_mod, "save_png", keep)
    code, _, err = _cli(capsys, "explain", TEXT, "--model", llama, "--self-attention", "--plot", tmp_path / "h.png")
    assert code == 0, err
    assert seen["titles"] == ["head 1 · kv 1", "head 2 · kv 1", "head 3 · kv 2", "head 4 · kv 2"]
    with pytest.raises(ValueError, match="kv_groups must hold one int group number per head"):
        heads_mod.plot_heads(torch.rand(1, 4, 3, 3), tmp_path / "x.png", kv_groups=[1, 2])


def test_a_model_attnkit_cannot_trace_is_one_line_in_the_cli(capsys, monkeypatch):
    """Every Llama attention module bypasses the attention interface (as a remote-code model would): the
    self-attention views and the attention methods end in one line naming what the model lacks."""
    from transformers.models.llama import modeling_llama

    from hf_tiny import bypass_attention_forward

    monkeypatch.setattr(modeling_llama.LlamaAttention, "forward", bypass_attention_forward)
    folder = saved_tiny("llama")
    for extra in (["--self-attention"], ["--method", "rollout", "--max-new-tokens", "2"]):
        code, out, err = _cli(capsys, "explain", TEXT, "--model", folder, *extra, "--json")
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [
            "attnkit: error: attnkit cannot read attention from llama: its attention modules (LlamaAttention) "
            "do not call transformers' attention interface"
        ], err
