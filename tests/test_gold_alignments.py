"""The hand-made gold alignments are sound, and AER and its parts are computed right."""

import pytest
import torch

from attnkit.alignment import AERCounts, aer_counts, argmax_links, diagonal_links, grow_diag_final_and, threshold_links
from attnkit.alignment.gold import DEV_VERSES, load_gold, parse_links, validate_gold
from attnkit.data.bible import load_pairs


def test_the_gold_set_is_complete_and_matches_the_corpus(bible_home):
    gold = load_gold()
    assert len(gold) == 150 and DEV_VERSES == 50
    corpus = {p.ref: (p.src, p.tgt) for p in load_pairs("test", home=bible_home)}
    assert validate_gold(gold, corpus) == []
    assert len({v.ref for v in gold}) == 150  # 150 different verses
    assert sum(len(v.source) > 40 for v in gold) >= 20  # long verses are there
    assert len({v.ref.split()[0] for v in gold}) >= 20  # spread over books
    assert sum(len(v.sure) for v in gold) > 3000


def test_the_validator_finds_each_kind_of_problem():
    gold = load_gold()[:2]
    bad = [
        gold[0],
        type(gold[1])(gold[1].ref, gold[1].source, gold[1].target, gold[1].sure | {(99, 0)}, gold[1].possible),
    ]
    problems = validate_gold(bad, {gold[0].ref: ("x y", gold[0].target and " ".join(gold[0].target))})
    assert any("out of range" in p for p in problems)
    assert any("sure links not in possible" in p for p in problems)
    assert any("tokens differ" in p for p in problems) and any("not a verse" in p for p in problems)
    with pytest.raises(ValueError, match="not a link"):
        parse_links("0-1 2_3", where="test")


def test_aer_by_hand():
    sure, possible = {(0, 0), (1, 1)}, {(0, 0), (1, 1), (2, 1)}
    c = aer_counts({(0, 0), (2, 1), (2, 2)}, sure, possible)
    assert (c.a_and_s, c.a_and_p, c.a, c.s) == (1, 2, 3, 2)
    assert c.precision == pytest.approx(2 / 3) and c.recall == pytest.approx(1 / 2)
    assert c.aer == pytest.approx(1 - 3 / 5)
    perfect = aer_counts(sure, sure, possible)
    assert perfect.aer == 0.0 and (perfect + c).a == 5
    assert AERCounts().aer == 0.0


def test_links_from_attention_and_the_diagonal():
    att = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])  # (target words, source words)
    assert argmax_links(att) == {(0, 0), (2, 1)}
    assert threshold_links(att, 0.2) == {(0, 0), (1, 0), (2, 1)}
    assert diagonal_links(4, 2) == {(1, 0), (3, 1)} and diagonal_links(2, 4) == {(0, 0), (0, 1), (1, 2), (1, 3)}


def test_grow_diag_final_and_textbook_case():
    fwd = {(0, 0), (1, 1), (2, 2), (3, 2)}
    rev = {(0, 0), (1, 1), (2, 2), (2, 3)}
    sym = grow_diag_final_and(fwd, rev)
    assert {(0, 0), (1, 1), (2, 2)} <= sym  # the intersection
    assert (3, 2) in sym and (2, 3) in sym  # neighbours of aligned points with an unaligned word
    assert grow_diag_final_and({(0, 1)}, {(5, 5)}) == {(0, 1), (5, 5)}  # final-and: both words unaligned


def test_evaluate_alignment_cli(capsys, bible_home, tmp_path):
    import json

    from attnkit.cli import main as cli_main

    assert (
        cli_main(
            [
                "--home",
                str(bible_home),
                "evaluate",
                "alignment",
                "--model",
                "rnnsearch-es-en",
                "--no-references",
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    row = r["rows"][0]
    assert r["scored_verses"] == 100 and 0.0 < row["aer"] < 0.7 and row["links"] > 1500
    assert cli_main(["evaluate", "alignment", "--model", "rnnencdec-es-en"]) == 2
    assert "has no attention" in capsys.readouterr().err
    assert cli_main(["evaluate", "alignment", "--head", "2"]) == 2
    assert "--head needs --layer" in capsys.readouterr().err
