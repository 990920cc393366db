"""Deletion and insertion scores and the randomised-model check of a decoder-only model's attributions
(attnkit.attribution.lm_faithfulness): the areas equal a plain loop that reruns the model on each
shortened prefix alone, the random floor is the mean of the seeded random orders' areas, the trained
weights come back bit for bit after the randomisation, and misuse is refused in one line."""

import numpy as np
import pytest
import torch

from attnkit.attribution.generation import forced_ids
from attnkit.attribution.lm_faithfulness import (
    _areas,
    _candidates,
    _order,
    _points,
    _row_scores,
    evaluate_lm_explanations,
    format_lm_report,
)
from attnkit.errors import InputError
from attnkit.hf import load_self_attention
from hf_tiny import saved_tiny

TEXT = "Jesús lloró en la tierra."


@pytest.fixture(scope="module")
def gpt2():
    return load_self_attention(str(saved_tiny("gpt2")))


def _loop_lp(sa, ids, t, removed) -> float:
    """log p(ids[t + 1] | ids[:t + 1] with ``removed`` replaced by <unk>), the prefix run alone, float64."""
    x = list(ids[: t + 1])
    for p in removed:
        x[p] = sa.hf_tokenizer.unk_token_id
    with torch.no_grad():
        logits = sa.model(input_ids=torch.tensor([x]), use_cache=False).logits[0, -1].double()
    return float(torch.log_softmax(logits, -1)[ids[t + 1]])


def test_areas_equal_a_plain_loop(gpt2):
    ids, _ = forced_ids(gpt2, TEXT)
    scores = _row_scores(gpt2, TEXT, "attention")
    rows = {t: _candidates(gpt2, ids, t) for t in (2, len(ids) - 2)}
    orders = {t: [_order(scores[t], c), list(reversed(c))] for t, c in rows.items()}
    got = _areas(gpt2, ids, orders)
    for t, row_orders in orders.items():
        for o, order in enumerate(row_orders):
            n = len(order)
            ks = _points(n)
            full, empty = _loop_lp(gpt2, ids, t, []), _loop_lp(gpt2, ids, t, order)
            dels = [full - _loop_lp(gpt2, ids, t, order[:k]) for k in ks]
            ins = [_loop_lp(gpt2, ids, t, [p for p in order if p not in order[:k]]) - empty for k in ks]
            xs = [k / n for k in ks]
            assert got[t][o][0] == pytest.approx(np.trapezoid(dels, xs), abs=1e-5)
            assert got[t][o][1] == pytest.approx(np.trapezoid(ins, xs), abs=1e-5)


def test_order_is_most_important_first_and_skips_special_tokens(gpt2):
    ids, _ = forced_ids(gpt2, TEXT)
    special = set(gpt2.hf_tokenizer.all_special_ids)
    for t in range(len(ids) - 1):
        assert all(ids[p] not in special for p in _candidates(gpt2, ids, t))
    assert _order(np.array([0.1, 0.5, 0.5, 0.2]), [0, 1, 2, 3]) == [1, 2, 3, 0]


def test_report_and_sanity_restore_the_weights(gpt2):
    before = {k: v.clone() for k, v in gpt2.model.state_dict().items()}
    report = evaluate_lm_explanations(gpt2, [TEXT], ["attention", "saliency"], random_orders=2)
    after = gpt2.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert set(report["methods"]) == {"attention", "saliency"}
    ids, _ = forced_ids(gpt2, TEXT)
    assert report["rows"] == sum(1 for t in range(len(ids) - 1) if _candidates(gpt2, ids, t))
    for row in report["methods"].values():
        assert -1.0 <= row["sanity_spearman"] <= 1.0
        assert row["sanity_flagged"] == (row["sanity_spearman"] > 0.2)
    # the same seed gives the same report (random orders and randomised weights are seeded)
    again = evaluate_lm_explanations(gpt2, [TEXT], ["attention", "saliency"], random_orders=2)
    assert {k: v["deletion_area"] for k, v in again["methods"].items()} == {
        k: v["deletion_area"] for k, v in report["methods"].items()
    }
    assert again["random_deletion_area"] == report["random_deletion_area"]
    assert "random order" in format_lm_report(report)


def test_refusals(gpt2):
    with pytest.raises(InputError, match="texts"):
        evaluate_lm_explanations(gpt2, [])
    with pytest.raises(InputError, match="not one str"):
        evaluate_lm_explanations(gpt2, TEXT)
    with pytest.raises(InputError, match="random_orders"):
        evaluate_lm_explanations(gpt2, [TEXT], ["attention"], random_orders=0)
    bert = load_self_attention(str(saved_tiny("bert")))
    with pytest.raises(InputError, match="not a decoder-only"):
        evaluate_lm_explanations(bert, [TEXT])


def test_cli_scores_a_decoder_only_model_on_given_texts(capsys, tmp_path):
    import json

    from attnkit.cli import main

    texts = tmp_path / "texts.txt"
    texts.write_text(TEXT + "\n\nDios dijo.\n", encoding="utf-8")
    out = tmp_path / "report.json"
    args = ["evaluate", "explanations", "--model", str(saved_tiny("gpt2")), "--texts", str(texts)]
    capsys.readouterr()
    code = main([*args, "--method", "attention", "--json", "--output", str(out)])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["texts"] == 2 and list(report["methods"]) == ["attention"]
    assert json.loads(out.read_text(encoding="utf-8")) == report
    gpt2 = load_self_attention(str(saved_tiny("gpt2")))
    direct = evaluate_lm_explanations(gpt2, [TEXT, "Dios dijo."], ["attention"], sanity_texts=3)
    assert report["methods"]["attention"]["deletion_area"] == direct["methods"]["attention"]["deletion_area"]
    code = main([*args, "--resume", "--output", str(out)])
    assert code == 2 and "--resume is for translators" in capsys.readouterr().err
    code = main(["evaluate", "explanations", "--model", str(saved_tiny("gpt2")), "--texts", str(tmp_path / "none")])
    assert code == 2 and f"{tmp_path / 'none'}: no such file" in capsys.readouterr().err
