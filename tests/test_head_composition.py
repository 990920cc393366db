"""Composition scores (:mod:`attnkit.attribution.head_composition`): every score equals Elhage et al. 2021's
definition computed by hand from the ``d_model × d_model`` matrices in float64 (grouped-query and gpt2
shapes); the random baseline is ``1/√d_model`` (for rotation-invariant random matrices ``E‖AB‖_F² =
‖A‖_F²‖B‖_F²/d``) and a freshly initialised model's adjusted scores average to zero; on the shipped
``attention-only-2l-en`` K-composition names, with no head given, the layer-1 previous-token head that feeds the
best induction head."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from attnkit.attribution.head_composition import COMPOSITION_KINDS, composition_scores
from attnkit.models.language_model import LanguageModel, LanguageModelConfig


def _model(seed: int = 0, **overrides) -> LanguageModel:
    torch.manual_seed(seed)
    cfg = {"vocab_size": 50, "d_model": 32, "n_layers": 3, "n_heads": 4, "max_len": 16, **overrides}
    return LanguageModel(LanguageModelConfig(**cfg)).eval()


def _circuits(model: LanguageModel, layer: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W_QK, W_OV)`` of one head, ``d_model × d_model`` float64, by hand: ``W_Qᵀ W_K`` and ``W_O W_V``."""
    a = model.layers[layer].self_attn
    dh = a.head_dim
    g = head // (a.n_heads // a.n_kv_heads)
    w_q = a.q_proj.weight.double()[head * dh : (head + 1) * dh]  # (Dh, D)
    w_k = a.k_proj.weight.double()[g * dh : (g + 1) * dh]
    w_v = a.v_proj.weight.double()[g * dh : (g + 1) * dh]
    w_o = a.o_proj.weight.double()[:, head * dh : (head + 1) * dh]  # (D, Dh)
    return w_q.T @ w_k, w_o @ w_v


@pytest.mark.parametrize("overrides", [{"shape": "llama", "n_kv_heads": 2}, {"shape": "gpt2"}])
@torch.no_grad()
def test_scores_equal_the_definition_on_whole_matrices(overrides):
    model = _model(**overrides)
    got = composition_scores(model)
    fro = torch.linalg.matrix_norm
    circuits = {(layer, head): _circuits(model, layer, head) for layer in range(3) for head in range(4)}
    want = {kind: torch.full((3, 4, 3, 4), math.nan, dtype=torch.float64) for kind in COMPOSITION_KINDS}
    for (a, h), (_, ov_a) in circuits.items():
        for (b, g), (qk_b, ov_b) in circuits.items():
            if b > a:
                want["q"][a, h, b, g] = fro(qk_b.T @ ov_a) / (fro(qk_b) * fro(ov_a))
                want["k"][a, h, b, g] = fro(qk_b @ ov_a) / (fro(qk_b) * fro(ov_a))
                want["v"][a, h, b, g] = fro(ov_b @ ov_a) / (fro(ov_b) * fro(ov_a))
    for kind in COMPOSITION_KINDS:
        torch.testing.assert_close(got.raw[kind], want[kind], atol=1e-10, rtol=0, equal_nan=True)
        torch.testing.assert_close(
            got.scores(kind), want[kind] - got.baseline[kind], atol=1e-10, rtol=0, equal_nan=True
        )


def test_random_baseline_is_one_over_root_d_and_a_fresh_model_scores_it():
    model = _model(d_model=64, n_layers=4)
    got = composition_scores(model, samples=16, seed=0)
    for kind in COMPOSITION_KINDS:
        assert got.baseline[kind] == pytest.approx(1 / math.sqrt(64), rel=0.02)
        adjusted = got.scores(kind)
        adjusted = adjusted[~adjusted.isnan()]  # (96,): 6 layer pairs × 16 head pairs
        assert adjusted.numel() == 96 and abs(float(adjusted.mean())) < 0.005
    again = composition_scores(model, samples=16, seed=0)
    assert again.baseline == got.baseline and composition_scores(model, seed=1).baseline != got.baseline


def test_shipped_k_composition_names_the_previous_token_head_of_the_induction_head():
    """``attention-only-2l-en``: the layer-1 head with the largest adjusted K-composition into the best
    induction head is the layer-1 head with the highest previous-token score."""
    from attnkit.models.induction import induction_scores
    from attnkit.service import open_model

    model = open_model("attention-only-2l-en").impl.model
    scores = induction_scores(model)
    layer, head, _ = scores.best_induction_head()  # 1-based
    assert layer == 2
    previous = scores.previous_token[0]
    prev = max(range(len(previous)), key=previous.__getitem__)
    comp = composition_scores(model)
    into = comp.scores("k")[0, :, layer - 1, head - 1]  # (H,): every layer-1 head into the induction head
    assert int(into.argmax()) == prev
    assert float(into[prev]) > 0  # above the random baseline
    top = comp.top("k", 1)[0]
    assert top.source == (1, prev + 1)


def test_top_and_json():
    comp = composition_scores(_model(n_layers=2, n_heads=2, d_model=16))
    top = comp.top("v", 10)
    assert len(top) == 4  # layer 1 into layer 2: 2 × 2 pairs
    assert [p.score for p in top] == sorted((p.score for p in top), reverse=True)
    assert all(p.source[0] == 1 and p.reader[0] == 2 for p in top)
    assert top[0].adjusted == pytest.approx(top[0].score - comp.baseline["v"])
    data = json.loads(json.dumps(comp.to_dict(k=2)))
    assert len(data["pairs"]) == 4 and len(data["top"]["k"]) == 2
    assert data["top"]["v"][0]["source"] == f"L{top[0].source[0]}H{top[0].source[1]}"
    with pytest.raises(ValueError, match=re.escape("kind must be one of ('q', 'k', 'v')")):
        comp.top("x")
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        comp.top("k", 0)
    with pytest.raises(ValueError, match="samples must be an int >= 1"):
        composition_scores(_model(), samples=0)
    with pytest.raises(TypeError, match="model must be an attnkit LanguageModel"):
        composition_scores(torch.nn.Linear(2, 2))


def test_cli_composition_and_qk_json_equal_the_library(capsys):
    """``attnkit heads --composition --json`` and ``--qk 2.2 --text T --position N --json`` print what the
    library computes; bad flags are one line (exit status 2)."""
    from attnkit.attribution.qk_decomposition import qk_decomposition
    from attnkit.cli import main
    from attnkit.service import open_model

    name = "attention-only-2l-en"
    assert main(["heads", "--model", name, "--composition", "--top", "3", "--json", "--device", "cpu"]) in (0, None)
    got = json.loads(capsys.readouterr().out)
    model = open_model(name)
    assert got == {"model": name, **composition_scores(model.impl.model).to_dict(3)}
    text = "In the beginning God created the heaven and the earth."
    argv = ["heads", "--model", name, "--qk", "2.2", "--text", text, "--position", "6", "--device", "cpu"]
    assert main([*argv, "--json"]) in (0, None)
    got = json.loads(capsys.readouterr().out)
    ids, pieces = model.impl.encode(text)
    want = qk_decomposition(model.impl.model, torch.tensor(ids), 1, 1, 5)
    assert got["position"] == 6 and got["pieces"] == pieces[:6] and got["query"] == 5
    assert got["parts"] == want.parts == ["embedding", "L1H1", "L1H2", "L1H3", "L1H4"]
    torch.testing.assert_close(torch.tensor(got["terms"]), want.terms, atol=1e-6, rtol=0)
    assert main(argv) in (0, None)
    assert "why layer 2, head 2" in capsys.readouterr().out
    for bad, says in (
        (["--qk", "3.1", "--text", text], "--qk: layer must be in 1..2 and head in 1..4"),
        (["--qk", "2", "--text", text], "--qk must be LAYER.HEAD"),
        (["--qk", "2.1"], "--qk needs --text"),
        (["--qk", "2.1", "--text", text, "--position", "99"], f"--position must be in 1..{len(ids)}"),
        (["--composition", "--text", text], "--text and --position are for --qk"),
    ):
        assert main(["heads", "--model", name, "--device", "cpu", *bad]) == 2
        assert says in capsys.readouterr().err
