"""Scores of a corpus split in parts combine exactly: BLEU/chrF statistics and AER counts."""

from __future__ import annotations

import sacrebleu

from attnkit.alignment.aer import aer_counts
from attnkit.tasks.translation.metrics import corpus_scores
from attnkit.tasks.translation.sacrebleu_internals import add_statistics, scores_from_statistics, translation_statistics

HYP = ["the cat sat on the mat", "a dog ran", "in the beginning god created", "and it was so", "he said unto them"]
REF = [
    "the cat sat on a mat",
    "the dog ran away",
    "in the beginning god created the heaven",
    "and it was so",
    "he spake",
]


def test_statistics_of_two_halves_give_the_whole_corpus_scores():
    whole = corpus_scores(HYP, REF)
    for cut in (0, 2, 3, 5):
        parts = add_statistics(
            translation_statistics(HYP[:cut], REF[:cut]), translation_statistics(HYP[cut:], REF[cut:])
        )
        assert scores_from_statistics(parts) == whole
    # and against sacrebleu's own unrounded corpus BLEU
    s = translation_statistics(HYP[:2], REF[:2])
    s = add_statistics(s, translation_statistics(HYP[2:], REF[2:]))
    bleu = sacrebleu.BLEU()
    assert bleu._compute_score_from_stats(s["bleu"]).score == bleu.corpus_score(HYP, [REF]).score


def test_mean_of_part_bleus_is_not_the_corpus_bleu():
    # why statistics are summed: averaging per-part scores would be wrong here
    a, b = corpus_scores(HYP[:2], REF[:2])["bleu"], corpus_scores(HYP[2:], REF[2:])["bleu"]
    assert round((a + b) / 2, 2) != corpus_scores(HYP, REF)["bleu"]


def test_aer_counts_of_parts_add_to_the_whole():
    pairs = [
        ({(0, 0), (1, 2)}, {(0, 0)}, {(0, 0), (1, 1)}),
        ({(2, 2), (0, 1)}, {(2, 2), (1, 1)}, {(2, 2), (1, 1), (0, 1)}),
    ]
    counts = [aer_counts(p, s, q) for p, s, q in pairs]
    allp = {(i, *link) for i, (p, _, _) in enumerate(pairs) for link in p}
    alls = {(i, *link) for i, (_, s, _) in enumerate(pairs) for link in s}
    allq = {(i, *link) for i, (_, _, q) in enumerate(pairs) for link in q}
    assert (counts[0] + counts[1]).aer == aer_counts(allp, alls, allq).aer


def test_a_missing_sacrebleu_internal_is_named(monkeypatch):
    import pytest

    from attnkit.tasks.translation.sacrebleu_internals import SacrebleuInternalsError

    monkeypatch.setattr(sacrebleu, "BLEU", lambda: object())  # a sacrebleu whose BLEU lacks the internals
    with pytest.raises(SacrebleuInternalsError, match="_extract_corpus_statistics"):
        translation_statistics(HYP, REF)
