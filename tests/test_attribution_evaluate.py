"""attnkit evaluate explanations: Spearman against the textbook formula, the randomisation cascade's order, the
deletion curve against a plain loop of forced passes, AER against the alignment evaluation's own path."""

import json

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from attnkit.alignment.aer import aer_counts, argmax_links
from attnkit.alignment.gold import load_gold
from attnkit.alignment.words import word_spans
from attnkit.attribution import forced_translation
from attnkit.attribution.explanation_quality import (
    _deletion_areas,
    evaluate_caption_explanations,
    evaluate_explanations,
    format_report,
    randomisation_stages,
    spearman,
)
from attnkit.cli import main
from attnkit.errors import InputError
from attnkit.tasks.translation import Translator
from attnkit.tasks.translation.alignment import ModelAligner
from tiny import tiny_transformer


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=3, max_size=12, unique=True), st.randoms(use_true_random=False))
def test_spearman_without_ties_is_the_textbook_formula(xs, rnd):
    ys = xs[:]
    rnd.shuffle(ys)
    n = len(xs)
    rx = {v: i for i, v in enumerate(sorted(xs))}
    ry = {v: i for i, v in enumerate(sorted(ys))}
    d2 = sum((rx[a] - ry[b]) ** 2 for a, b in zip(xs, ys))
    assert spearman(xs, ys) == pytest.approx(1 - 6 * d2 / (n * (n * n - 1)), abs=1e-12)


def test_spearman_with_ties_uses_average_ranks():
    # ranks of [1, 2, 2, 3] are [0, 1.5, 1.5, 3]; Pearson with [0, 1, 2, 3] is 0.9486832980505138
    assert spearman([1, 2, 2, 3], [10, 20, 30, 40]) == pytest.approx(0.9486832980505138)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_randomisation_goes_from_the_output_side_and_covers_every_parameter_once():
    model = tiny_transformer()
    stages = randomisation_stages(model)
    ids = [id(p) for stage in stages for p in stage]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())  # every parameter, once
    assert stages[0] == [model.out_bias]
    assert stages[1] == list(model.decoder.norm.parameters())
    assert stages[2] == list(model.decoder.layers[1].parameters())
    assert stages[-1] == [model.embedding.weight]


def test_deletion_areas_equal_a_plain_loop_of_forced_passes():
    tr = Translator.load("rnnsearch-es-en")
    pair = forced_translation(tr, "Y dijo Dios: Sea la luz.", "And God said, Let there be light.")
    src_spans, tgt_spans = word_spans(pair.source_pieces), word_spans(pair.target_pieces)
    n = len(src_spans)  # 6 words: every k is a point of the curve
    order = [3, 0, 5, 1, 4, 2]
    orders = [order for _ in tgt_spans]
    areas = _deletion_areas(tr.model, pair, [orders], tr.tokenizer.unk_id)[0]

    def word_logp(src, i):
        with torch.no_grad():
            logits, _ = tr.model(src[None], torch.tensor([len(src)]), pair.tgt_in[None])
        lp = F.log_softmax(logits[0].double(), -1)
        return sum(float(lp[t, pair.tgt[t]]) for t in tgt_spans[i])

    for i in (0, 2, len(tgt_spans) - 1):
        drops = []
        for k in range(n + 1):
            src = pair.src.clone()
            for w in order[:k]:
                src[src_spans[w]] = tr.tokenizer.unk_id
            drops.append(word_logp(pair.src, i) - word_logp(src, i))
        expected = sum((drops[k] + drops[k + 1]) / 2 for k in range(n)) / n
        assert areas[i] == pytest.approx(expected, abs=1e-4)


def test_evaluate_explanations_on_one_gold_verse():
    verse = min(load_gold()[50:], key=lambda v: len(v.source) * len(v.target))  # the smallest scored verse
    report = evaluate_explanations(
        "transformer-es-en", methods=["attention", "alti_plus"], verses=[verse], sanity_verses=1
    )
    assert report["verses"] == 1 and list(report["methods"]) == ["attention", "alti_plus"]
    tr = Translator.load("transformer-es-en")
    words = ModelAligner(tr).word_attention_batch([(verse.source, verse.target)])[0]  # evaluate alignment's path
    expected = aer_counts(argmax_links(words), verse.sure, verse.possible)
    assert report["methods"]["attention"]["aer"] == pytest.approx(expected.aer, abs=1e-4)
    for r in report["methods"].values():
        assert 0 <= r["aer"] <= 1 and r["ms_per_sentence"] > 0 and np.isfinite(r["deletion_area"])
        s = r["sanity"]
        assert len(s["by_stage"]) == len(randomisation_stages(tr.model)) and s["passes"] == (s["spearman"] <= 0.2)
    assert "better than raw attention" in format_report(report)


def test_evaluate_caption_explanations_on_two_scenes(tmp_path):
    from attnkit.data.datasets.scenes import load_scenes

    scenes = load_scenes("test", tmp_path, n_train=40, n_valid=10, n_test=4)
    report = evaluate_caption_explanations(
        "captioner-hard", methods=["attention", "saliency"], limit=2, sanity_verses=1, scenes=scenes
    )
    assert report["scenes"] == 2 and set(report["methods"]) == {"attention", "saliency"}
    for r in report["methods"].values():
        assert 0 <= r["mass_in_box"] <= 1 and np.isfinite(r["deletion_area"]) and "spearman" in r["sanity"]
    assert "mass in box" in format_report(report)


def test_an_interrupted_evaluation_resumes_with_what_it_finished(tmp_path):
    """Each method's row is handed over as soon as it is done; a resumed run keeps those rows, scores only the
    rest, and ends with the report a run without interruption makes; a report of other settings is refused."""
    verse = min(load_gold()[50:], key=lambda v: len(v.source) * len(v.target))
    saved = []
    run = dict(verses=[verse], sanity_verses=1)
    whole = evaluate_explanations("transformer-es-en", methods=["attention", "value_zeroing"], **run)
    evaluate_explanations(
        "transformer-es-en", methods=["attention"], on_method=lambda r: saved.append(json.loads(json.dumps(r))), **run
    )
    assert [list(r["methods"]) for r in saved] == [["attention"]] and saved[-1]["complete"] is False
    resumed = evaluate_explanations(
        "transformer-es-en", methods=["attention", "value_zeroing"], resume=saved[-1], **run
    )
    assert resumed["resumed"] == ["attention"] and resumed["complete"] is True
    for m in ("attention", "value_zeroing"):
        expected = {k: v for k, v in whole["methods"][m].items() if k != "ms_per_sentence"}
        assert {k: v for k, v in resumed["methods"][m].items() if k != "ms_per_sentence"} == expected
    again = evaluate_explanations("transformer-es-en", methods=["value_zeroing"], resume=resumed, **run)
    assert list(again["methods"]) == ["value_zeroing", "attention"]  # a row not asked again is kept, not lost
    assert again["resumed"] == ["value_zeroing", "attention"]
    with pytest.raises(InputError, match="sanity_verses 1 vs 0"):
        evaluate_explanations(
            "transformer-es-en", methods=["attention"], verses=[verse], sanity_verses=0, resume=saved[-1]
        )


def test_evaluate_explanations_command_saves_after_each_method_and_resumes(tmp_path, capsys):
    out = tmp_path / "report.json"
    argv = ["evaluate", "explanations", "--method", "attention", "--limit", "1", "--sanity-verses", "1"]
    assert main([*argv, "--output", str(out), "--resume"]) == 0
    first = json.loads(out.read_text())
    assert first["complete"] is True and "resumed" not in first and list(first["methods"]) == ["attention"]
    assert "[explanations] attention: 1/1" in capsys.readouterr().err
    assert main([*argv, "--output", str(out), "--resume", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["resumed"] == ["attention"] and again["methods"] == first["methods"]
    out.write_text("{ not json")
    assert main([*argv, "--output", str(out), "--resume"]) == 2
    assert "is not a readable report" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 2
    assert "--resume needs --output" in capsys.readouterr().err
