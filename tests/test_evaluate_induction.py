"""``attnkit evaluate induction``: the induction heads of a language model, measured (Olsson et al. 2022).

On the 2-layer model built by hand to have a previous-token head in layer 1 and an induction head in
layer 2 (:func:`test_induction_scores._hand_built`) the command names that head; on a stock tiny
``LlamaForCausalLM`` folder the scores equal a loop over the attention ``transformers`` returns; the shared formula against a float64 loop; bad inputs are one line.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from attnkit.cli import main
from attnkit.models.induction import prefix_matching_from_attention, previous_token_from_attention
from test_hf_lm_export import save_lm
from test_induction_scores import _hand_built


def _run_json(capsys, *argv) -> dict:
    assert main(["evaluate", "induction", *argv, "--device", "cpu", "--json"]) in (0, None)
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    if report["in_context_learning"] is None:  # the JSON says why; stderr says it in one line
        assert captured.err.count("in-context-learning score omitted") == 1
    return report


@pytest.fixture(scope="module")
def hand_built(tmp_path_factory):
    return save_lm(tmp_path_factory.mktemp("hb") / "ckpt", _hand_built())


def test_names_the_hand_built_induction_head(capsys, hand_built):
    r = _run_json(capsys, "--model", str(hand_built), "--length", "8", "--batch", "4")
    assert r["best_head"]["layer"] == 2 and r["best_head"]["head"] == 1
    assert r["best_head"]["prefix_matching"] == pytest.approx(15 / 16, abs=0.01)  # see test_induction_scores
    by = {(h["layer"], h["head"]): h for h in r["heads"]}
    assert by[1, 1]["previous_token"] > 0.95 and by[1, 1]["prefix_matching"] < 0.05
    assert by[2, 1]["copying"] > 0.95
    assert r["in_context_learning"] is None and "train_config.json" in r["icl_note"]


def test_table_names_the_head_and_says_why_icl_is_missing(capsys, hand_built):
    assert main(["evaluate", "induction", "--model", str(hand_built), "--length", "8", "--device", "cpu"]) in (0, None)
    out = capsys.readouterr().out
    assert "best induction head: layer 2, head 1" in out
    assert "in-context-learning score: not measured" in out


def test_formula_matches_a_float64_loop():
    g = torch.Generator().manual_seed(3)
    attn = torch.rand(2, 3, 2, 10, 10, generator=g, dtype=torch.float64).softmax(-1)  # (L, B, H, 2L, 2L)
    length = 5
    pm, pt = prefix_matching_from_attention(attn, length), previous_token_from_attention(attn)
    for li in range(2):
        for h in range(2):
            want_pm = sum(float(attn[li, b, h, length + j, j + 1]) for b in range(3) for j in range(length)) / 15
            want_pt = sum(float(attn[li, b, h, i, i - 1]) for b in range(3) for i in range(1, 10)) / 27
            assert pm[li][h] == pytest.approx(want_pm, abs=1e-12)
            assert pt[li][h] == pytest.approx(want_pt, abs=1e-12)
    with pytest.raises(ValueError, match="length"):
        prefix_matching_from_attention(attn, 4)


def test_hf_causal_lm_scores_are_those_of_transformers_eager_attention(capsys):
    """A stock LlamaForCausalLM folder: the command's scores equal a plain loop over the weights that
    ``transformers`` returns with ``output_attentions=True`` in eager attention, on the same rows."""
    from transformers import AutoModelForCausalLM

    from attnkit.hf.induction import hf_special_ids
    from attnkit.hf.self_attention import load_self_attention
    from attnkit.models.induction import repeated_random_tokens
    from hf_tiny import saved_tiny

    folder = saved_tiny("llama")
    r = _run_json(capsys, "--model", str(folder), "--length", "6", "--batch", "2", "--seed", "5")
    hf = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    specials = hf_special_ids(load_self_attention(str(folder)))
    ids = repeated_random_tokens(
        hf.config.vocab_size, 6, 2, generator=torch.Generator().manual_seed(5), special_ids=specials
    )
    with torch.no_grad():
        attn = hf(input_ids=ids, output_attentions=True).attentions  # per layer (B, H, 12, 12)
    for h in r["heads"]:
        w = attn[h["layer"] - 1][:, h["head"] - 1].double()  # (B, 12, 12)
        pm = sum(float(w[b, 6 + j, j + 1]) for b in range(2) for j in range(6)) / 12
        pt = sum(float(w[b, i, i - 1]) for b in range(2) for i in range(1, 12)) / 22
        assert h["prefix_matching"] == pytest.approx(pm, abs=1e-5)
        assert h["previous_token"] == pytest.approx(pt, abs=1e-5)
        assert h["copying"] is None
    assert len({h["prefix_matching"] for h in r["heads"]}) > 1  # the heads differ: not a comparison of constants
    assert "not measured" in r["copying_note"]


def test_bad_inputs_are_one_line(capsys, tmp_path, hand_built):
    from hf_tiny import saved_tiny
    from tiny import saved_tiny_transformer

    (tmp_path / "empty").mkdir()
    cases = [
        (["--model", str(hand_built), "--length", "9"], "--length 9 is too long"),
        (["--model", str(saved_tiny("bert"))], "encoder-only"),
        (["--model", str(saved_tiny_transformer(tmp_path / "tr"))], "is a translator"),
        (["--model", str(tmp_path / "empty")], "holds no model"),
    ]
    for argv, message in cases:
        assert main(["evaluate", "induction", *argv, "--device", "cpu"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and err[0].startswith("attnkit: error: --")
