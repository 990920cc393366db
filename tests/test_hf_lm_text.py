"""A decoder-only model reading a given text (teacher forcing), sampling its continuation with a seed, and
contrastive attribution (attnkit.attribution.generation, attnkit.decoding.continuation, the GenerationRequest of
attnkit.service): forced rows equal the model rerun on each prefix alone (float64 autograd, eager
attention), the contrastive saliency equals autograd of log p(token) − log p(foil) by hand, the step scores
equal a float64 softmax of the model's own logits, and a seeded sample equals transformers' own sampling;
the CLI, the server's route and the request refuse what does not go together in one line."""

import copy
import json

import pytest
import torch

from attnkit.alignment import attention_rollout
from attnkit.attribution import explain_generation
from attnkit.attribution.generation import MAX_FORCED_TOKENS, contrast_token
from attnkit.cli import main
from attnkit.decoding.continuation import sample_continuation
from attnkit.hf import load_self_attention
from attnkit.service import GenerationRequest, analyse, open_model
from hf_tiny import EOS, PAD, build_tiny, saved_tiny

pytest.importorskip("captum")
TEXT = "Jesús lloró en la tierra."
FOIL = "Dios"  # one token of the tiny vocabulary ("▁Dios")


@pytest.fixture(scope="module")
def gpt2():
    return load_self_attention(str(saved_tiny("gpt2")))


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _page_data(path) -> dict:
    """The explorer data inside a self-contained page, read with an HTML parser: the script that sets
    ``window.ATTNKIT_DATA``."""
    from html.parser import HTMLParser

    scripts: list[str] = []

    class Scripts(HTMLParser):
        def handle_data(self, d):
            if "ATTNKIT_DATA = " in d:
                scripts.append(d)

    Scripts().feed(path.read_text(encoding="utf-8"))
    start = scripts[0].index("ATTNKIT_DATA = ") + len("ATTNKIT_DATA = ")
    return json.JSONDecoder().raw_decode(scripts[0][start:])[0]


def _prefix_gradients(sa, ids, foil=None):
    """Row t: ∂[log p(ids[t+1]) (− log p(foil))]/∂x of the float64 model run on the prefix ids[:t+1] alone,
    padded with zeros to the n − 1 inputs: ``(x (n-1, E), grads (n-1, n-1, E))``."""
    model = copy.deepcopy(sa.model).double()
    x = model.get_input_embeddings()(torch.tensor(ids[:-1])).detach()  # (n-1, E)
    grads = torch.zeros(len(ids) - 1, *x.shape, dtype=torch.float64)
    for t in range(len(ids) - 1):
        xi = x[: t + 1].clone().requires_grad_(True)
        lp = torch.log_softmax(model(inputs_embeds=xi[None], use_cache=False).logits[0, -1], -1)  # (V,)
        f = lp[ids[t + 1]] - (lp[foil] if foil is not None else 0.0)
        (g,) = torch.autograd.grad(f, xi)
        grads[t, : t + 1] = g
    return x, grads


def test_forced_gradients_equal_per_prefix_reruns(gpt2):
    att = explain_generation(gpt2, TEXT, method="input_x_gradient", forced=True, batch=3)
    ids, _ = gpt2.encode(TEXT)
    x, g = _prefix_gradients(gpt2, ids)
    per_feature = x * g  # (n-1, n-1, E): row t explains log p(x_{t+1} | x_≤t)
    assert att.target == gpt2.pieces_of(ids[1:]) and att.source == gpt2.pieces_of(ids[:-1])
    torch.testing.assert_close(att.raw.double(), per_feature.sum(-1), atol=2e-5, rtol=1e-4)
    scores = per_feature.norm(dim=-1)
    torch.testing.assert_close(att.scores.double(), scores / scores.sum(-1, keepdim=True), atol=2e-5, rtol=1e-4)
    assert att.extra["forced"] and att.extra["kind"] == "forced text" and "max_new_tokens" not in att.params


def test_forced_attention_and_rollout_equal_per_prefix_eager_reruns():
    sa = load_self_attention(str(saved_tiny("llama")))  # a BOS token first: row 0 explains the first word
    ids, _ = sa.encode(TEXT)
    eager, _ = build_tiny("llama", attn_implementation="eager")
    att = explain_generation(sa, TEXT, method="attention", forced=True, layer=1, head=2)
    roll = explain_generation(sa, TEXT, method="rollout", forced=True)
    for t in range(len(ids) - 1):
        with torch.no_grad():
            maps = torch.stack(eager(input_ids=torch.tensor([ids[: t + 1]]), output_attentions=True).attentions)
        maps = maps[:, 0].float()  # (L, H, t+1, t+1)
        torch.testing.assert_close(att.scores[t, : t + 1], maps[0, 1, -1], atol=1e-5, rtol=0)
        torch.testing.assert_close(roll.scores[t, : t + 1], attention_rollout(maps)[-1], atol=1e-5, rtol=0)
        assert float(att.scores[t, t + 1 :].abs().sum()) == 0.0


def test_contrastive_saliency_equals_autograd_of_the_difference(gpt2):
    ids, prompt_len = gpt2.generate(TEXT, max_new_tokens=3)
    foil = contrast_token(gpt2, FOIL)
    att = explain_generation(gpt2, TEXT, method="saliency", continuation=(ids, prompt_len), contrast=FOIL)
    _, g = _prefix_gradients(gpt2, ids, foil)
    g = g[prompt_len - 1 :]  # (G, n-1, E): the written tokens' rows
    scores = g.abs().norm(dim=-1)
    torch.testing.assert_close(att.scores.double(), scores / scores.sum(-1, keepdim=True), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(att.raw.double(), g.abs().sum(-1), atol=2e-5, rtol=1e-4)
    plain = explain_generation(gpt2, TEXT, method="saliency", continuation=(ids, prompt_len))
    assert not torch.allclose(plain.scores, att.scores, atol=1e-3)  # the foil changes what is explained
    assert att.params["contrast"] == "▁Dios" and att.extra["contrast"]["id"] == foil


def test_step_scores_equal_a_float64_softmax(gpt2):
    ids, _ = gpt2.encode(TEXT)
    foil = contrast_token(gpt2, FOIL)
    att = explain_generation(gpt2, TEXT, method="saliency", forced=True, contrast=FOIL)
    model = copy.deepcopy(gpt2.model).double()
    with torch.no_grad():
        p = torch.softmax(model(input_ids=torch.tensor([ids[:-1]])).logits[0], -1)  # (n-1, V)
    s = att.extra["step_scores"]
    rows = torch.arange(len(ids) - 1)
    got = {k: torch.tensor(v, dtype=torch.float64) for k, v in s.items()}
    torch.testing.assert_close(got["probability"], p[rows, ids[1:]], atol=2e-6, rtol=0)
    torch.testing.assert_close(got["entropy"], -(p * p.log()).sum(-1), atol=2e-6, rtol=0)
    torch.testing.assert_close(got["contrast_probability"], p[:, foil], atol=2e-6, rtol=0)


def test_a_seeded_sample_is_transformers_sampling(gpt2):
    model, tok = build_tiny("gpt2")
    prompt = torch.tensor([tok(TEXT)["input_ids"]])
    for temperature, top_k in ((0.7, 5), (1.3, None)):
        ids, prompt_len = sample_continuation(
            gpt2, TEXT, max_new_tokens=6, temperature=temperature, top_k=top_k, seed=3
        )
        torch.manual_seed(3)
        with torch.no_grad():
            expected = model.generate(
                prompt,
                do_sample=True,
                temperature=temperature,
                top_k=top_k or 0,
                top_p=1.0,
                max_new_tokens=6,
                eos_token_id=EOS,
                pad_token_id=PAD,
            )[0].tolist()
        assert prompt_len == prompt.shape[1] and ids == expected[: len(ids)]
    again = sample_continuation(gpt2, TEXT, max_new_tokens=6, temperature=1.3, seed=3)
    assert again == (ids, prompt_len)
    draws = {tuple(sample_continuation(gpt2, TEXT, max_new_tokens=6, temperature=2.0, seed=s)[0]) for s in range(4)}
    assert len(draws) > 1  # the seed matters


def test_the_request_refuses_what_does_not_go_together(gpt2):
    for fields, named in (
        ({"mode": "beam"}, "mode"),
        ({"mode": "sample", "temperature": 0.0}, "temperature"),
        ({"mode": "sample", "top_k": 0}, "top_k"),
        ({"mode": "sample", "seed": -1}, "seed"),
        ({"seed": 3}, "sample"),
        ({"method": "attention", "contrast": FOIL}, "contrast"),
        ({"contrast": FOIL}, "contrast"),
    ):
        with pytest.raises(ValueError, match=named):
            GenerationRequest(TEXT, **fields)
    with pytest.raises(ValueError, match="tokenises into"):
        contrast_token(gpt2, "Jerusalén")
    with pytest.raises(ValueError, match=str(MAX_FORCED_TOKENS) + "|256 positions"):
        explain_generation(gpt2, " ".join(["Dios"] * 300), method="attention", forced=True)
    model = open_model(str(saved_tiny("gpt2")))
    a = analyse(model, GenerationRequest(TEXT, max_new_tokens=3, mode="sample", method="attention"))
    b = analyse(model, GenerationRequest(TEXT, max_new_tokens=3, mode="sample", method="attention", seed=a.seed))
    assert a.seed is not None and a.continuation == b.continuation  # a drawn seed is reported and redoes it
    from attnkit import show

    shown = show(b).data["continuations"][0]  # the notebook's view of the analysis
    scores = {k: v for k, v in shown["step_scores"].items() if v is not None}  # the schema's empty fields
    assert shown["decoding"] == {"mode": "sample", "seed": a.seed} and scores == b.step_scores


def test_cli_explains_a_text_with_contrast_and_step_scores(capsys, tmp_path):
    folder = saved_tiny("gpt2")
    code, out, err = _cli(
        capsys, "explain", "--model", folder, "--text", TEXT, "--method", "saliency", "--contrast", FOIL, "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    expected = explain_generation(load_self_attention(str(folder)), TEXT, method="saliency", forced=True, contrast=FOIL)
    torch.testing.assert_close(torch.tensor(data["scores"]), expected.scores, atol=1e-5, rtol=0)
    assert data["extra"]["step_scores"] == expected.extra["step_scores"] and data["params"]["contrast"] == "▁Dios"
    sample = ("explain", "x", "--model", folder, "--sample", "--seed", 5, "--max-new-tokens", 3)
    code, out, err = _cli(capsys, *sample)
    assert code == 0 and "seed 5" in out and "step scores:" in out and "entropy" in out
    first, again = (json.loads(_cli(capsys, *sample, "--json")[1]) for _ in range(2))
    assert first["target"] == again["target"] and first["extra"]["decoding"]["seed"] == 5
    page = tmp_path / "text.html"
    code, _, err = _cli(capsys, "explain", "--model", folder, "--text", TEXT, "--plot", page)
    shown = _page_data(page)["continuations"][0]
    assert code == 0 and shown["decoding"]["mode"] == "forced" and shown["written_pieces"] == expected.target
    for args, said in (
        (["--text", TEXT, "--contrast", FOIL], "--contrast is for the gradient methods"),
        (["--text", TEXT, "--method", "saliency", "--contrast", "Jerusalén"], "tokenises into 8"),
        # one token, but not this one: the tokenizer's NFKC reads full-width letters as "God"
        (["--text", TEXT, "--method", "saliency", "--contrast", "Ｇｏｄ"], "contrast 'Ｇｏｄ' is not a token"),
        (["x", "--seed", 3], "only with --sample"),
        (["--text", TEXT, "--sample"], "--sample is for a continuation"),
        (["x", "--text", TEXT], "not both"),
    ):
        code, _, err = _cli(capsys, "explain", "--model", folder, *args)
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    code, _, err = _cli(capsys, "explain", "--model", saved_tiny("bert"), "--text", TEXT)
    assert code == 2 and "--text is for a decoder-only model" in err


def test_api_generate_forced_and_its_bad_fields():
    from fastapi.testclient import TestClient

    from attnkit.explorer.app import create_app, load_models
    from attnkit.explorer.options import ServeOptions

    app = create_app(load_models([str(saved_tiny("gpt2"))]), verses=[], options=ServeOptions(max_new_tokens=5))
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        r = client.post("/api/generate", json={"text": TEXT, "mode": "forced", "method": "rollout"})
        assert r.status_code == 200, r.text
        p = r.json()
        sa = load_self_attention(str(saved_tiny("gpt2")))
        expected = explain_generation(sa, TEXT, method="rollout", forced=True)
        assert p["decoding"]["mode"] == "forced" and p["written_pieces"] == expected.target
        torch.testing.assert_close(torch.tensor(p["attribution"]["scores"]), expected.scores, atol=1e-4, rtol=0)
        assert p["step_scores"]["probability"] == expected.extra["step_scores"]["probability"]
        r = client.post("/api/generate", json={"text": TEXT, "mode": "sample", "seed": 4, "max_new_tokens": 3})
        assert r.status_code == 200 and r.json()["decoding"] == {"mode": "sample", "seed": 4}
        for body, said in (
            ({"mode": "beam"}, "mode"),
            ({"mode": "sample", "temperature": 0}, "temperature"),
            ({"seed": 3}, "sample"),
            ({"method": "attention", "contrast": FOIL}, "contrast"),
            ({"method": "saliency", "contrast": "Jerusalén"}, "tokenises"),
        ):
            r = client.post("/api/generate", json={"text": TEXT, **body})
            assert r.status_code == 422 and said in r.json()["error"], r.text


def test_explain_plot_html_on_a_translator_is_a_page_with_the_data(capsys, tmp_path):
    page = tmp_path / "att.html"
    folder = saved_tiny("marian")
    code, out, err = _cli(capsys, "explain", "Jesús lloró.", "--model", folder, "--json", "--plot", page)
    assert code == 0 and f"wrote {page}" in err, err
    data = json.loads(out)
    assert page.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")  # not a PNG
    shown = _page_data(page)["translations"][0]
    assert shown["target_pieces"] == data["target"] and shown["source_pieces"] == data["source"]
    torch.testing.assert_close(
        torch.tensor(shown["attribution"]["scores"]), torch.tensor(data["scores"]), atol=1e-4, rtol=0
    )


def test_translate_json_gives_one_object_per_line(capsys, tmp_path):
    from attnkit.tasks.translation import Translator

    folder = saved_tiny("marian")
    sentences = ["Jesús lloró.", "En el principio creó Dios los cielos y la tierra."]
    (tmp_path / "in.es").write_text("\n".join(sentences) + "\n\n")
    code, out, err = _cli(capsys, "translate", "--model", folder, "--beam", 1, "--file", tmp_path / "in.es", "--json")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    plain = _cli(capsys, "translate", "--model", folder, "--beam", 1, "--file", tmp_path / "in.es")[1].splitlines()
    expected = Translator.load(folder).translate(sentences, beam_size=1)
    assert [d["source"] for d in lines] == sentences and [d["translation"] for d in lines] == plain
    for d, r in zip(lines, expected):
        assert d["tokens"] == list(r.tokens) and d["score"] == pytest.approx(r.score, abs=1e-5)
    code, out, _ = _cli(capsys, "translate", "--model", folder, "--beam", 1, "--json", "--show-attention", sentences[0])
    d = json.loads(out)
    r = Translator.load(folder).translate(sentences[:1], beam_size=1, return_attention=True)[0]
    assert d["target_pieces"] == r.target_pieces and d["source_pieces"] == r.source_pieces
    torch.testing.assert_close(torch.tensor(d["attention"]), r.attention.float(), atol=1e-5, rtol=0)


def test_the_default_batch_of_rows_fits_a_memory_bound_and_changes_no_value(gpt2):
    """A long text gets a few rows a pass (GPT-2 small's shape over 512 tokens: hundreds of rows at once ran
    out of 20 GB), a tiny model the usual batch; the values do not depend on the batch."""
    from attnkit.attribution.generation import ROW_MEMORY, row_batch
    from attnkit.attribution.gradients import DEFAULT_BATCH

    small = (12, 768, 12)  # (layers, width, heads)
    per_row = 4 * 12 * 512 * (16 * 768 + 2 * 12 * 512)
    assert row_batch(small, 512) == ROW_MEMORY // per_row == 1
    assert row_batch(small, 64) > row_batch(small, 512)
    assert row_batch(gpt2.dimensions(), 8) == DEFAULT_BATCH
    with pytest.raises(ValueError, match="length"):
        row_batch(small, 0)
    default = explain_generation(gpt2, TEXT, method="input_x_gradient", forced=True)
    one = explain_generation(gpt2, TEXT, method="input_x_gradient", forced=True, batch=1)
    torch.testing.assert_close(default.raw, one.raw, rtol=1e-5, atol=1e-6)
