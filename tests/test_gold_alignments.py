"""The hand-made gold alignments are sound, and AER and its parts are computed right."""

import re

import pytest
import torch

from attnkit.alignment import AERCounts, aer_counts, argmax_links, diagonal_links, grow_diag_final_and, threshold_links
from attnkit.alignment.gold import DEV_VERSES, load_gold, parse_links, validate_gold
from attnkit.data.datasets.bible import load_pairs


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


def _plain(word):
    """``“Blessed`` → ``blessed``: the word without punctuation or quotes, lower-cased."""
    return re.sub(r"[^\w’'-]", "", word).strip("’'").lower()


def _links_of(gold, sure_only):
    """Every link of the set as (verse, spanish index, english index, spanish word, english word, is_sure)."""
    for v in gold:
        for i, j in sorted(v.sure if sure_only else v.possible):
            yield v, i, j, _plain(v.source[i]), _plain(v.target[j]), (i, j) in v.sure


_FUTURE_MODAL = {"shall", "will", "would", "should", "may", "might", "must", "can", "could", "let", "shalt", "wilt"}
_LEXICAL_MODAL = re.compile(r"^(pod|pued|pud|deb|necesari|volunt)")  # poder, deber, es necesario; voluntad
_HABER = re.compile(r"^(he|has|ha|hemos|hab[eé]is|han|hab[ií]a\w*|hub\w+|habr[áée]\w*|haya\w*|habi[ée]ndo\w*)$")
_EXISTENTIAL = {"hay", "había", "hubo", "habrá", "habría", "haya", "hubiese", "hubiera"}
_ES_PRONOUNS = {"yo", "tú", "él", "ella", "nosotros", "vosotros", "ellos", "ellas", "el", "los", "aquel", "quien", "mí",
                "alguno", "uno", "nadie", "ninguno", "cualquiera"}  # fmt: skip
_EN_SUBJECTS = {"i", "he", "she", "we", "they", "thou", "ye"}
_PREPOSITIONS_AND_ARTICLES = {"to", "at", "unto", "into", "toward", "towards", "on", "upon", "for", "in", "by", "from",
                              "with", "against", "after", "before", "as", "like", "of", "until", "the", "a", "an"}  # fmt: skip
_POSSESSIVES = {"my", "your", "his", "her", "its", "our", "their", "thy"}
_CLITIC_NOT_ARTICLE = {("Deut 25:12", 0)}  # "La cortarás": the object clitic (the possessor), not an article


def _all_links():
    return list(_links_of(load_gold(), sure_only=False))


# GUIDE.md's rules 8–15, where a word list can check them: no sure link where the rule says possible (or no
# link), and each check counts its instances, so that it cannot pass on an empty selection.


def test_rule_8_an_auxiliary_is_sure_only_when_it_translates_a_spanish_word():
    aux = [x for x in _all_links() if x[4] in _FUTURE_MODAL]
    bad = [x[1:] for x in aux if x[5] and not (_LEXICAL_MODAL.match(x[3]) or _HABER.match(x[3]))]
    assert len(aux) > 80 and sum(not x[5] for x in aux) > 70 and bad == []


def test_rule_9_existential_there_is_possible():
    there = [x for x in _all_links() if x[3] in _EXISTENTIAL and x[4] == "there"]
    assert len(there) >= 6 and not any(x[5] for x in there)


def test_rule_10_relatives_with_an_article():
    gold = load_gold()
    compound = 0
    for v in gold:  # el cual, la cual, los cuales: the article is possible
        words = [_plain(w) for w in v.source]
        for i in range(len(words) - 1):
            if words[i] in {"el", "la", "los", "las", "lo"} and words[i + 1] in {"cual", "cuales"}:
                compound += 1
                assert not any((i, j) in v.sure for j in range(len(v.target))), (v.ref, i)
    he_who = [(v, i) for v in gold for i in range(len(v.source) - 1)
              if _plain(v.source[i]) == "el" and _plain(v.source[i + 1]) == "que"
              and any(_plain(v.target[j]) == "he" and (i, j) in v.possible for j in range(len(v.target)))]  # fmt: skip
    assert compound >= 10 and len(he_who) >= 5
    assert all(any((i, j) in v.sure and _plain(v.target[j]) == "he" for j in range(len(v.target))) for v, i in he_who)


def test_rules_11_and_12_an_article_or_de_linked_to_a_possessive_is_possible():
    links = _all_links()
    art = [x for x in links if x[3] in {"el", "la", "los", "las"} and x[4] in _POSSESSIVES]
    art = [x for x in art if (x[0].ref, x[1]) not in _CLITIC_NOT_ARTICLE]
    gen = [
        x for x in links if x[3] in {"de", "del"} and (x[4] in _POSSESSIVES or re.search(r"[’']s$", x[0].target[x[2]]))
    ]
    assert len(art) >= 8 and len(gen) >= 15 and not any(x[5] for x in art + gen)


def test_rule_13_verse_initial_y_is_sure_only_to_a_verse_initial_and():
    y = [x for x in _all_links() if x[1] == 0 and x[3] == "y"]
    assert len(y) >= 10 and all(x[4] == "and" and x[2] == 0 for x in y if x[5])
    assert any(not x[5] and x[4] == "now" for x in y)


def test_rule_14_a_sure_link_from_a_goes_to_a_preposition_or_an_article():
    a_links = [x for x in _all_links() if x[3] in {"a", "á", "al"}]
    assert len(a_links) > 40 and all(x[4] in _PREPOSITIONS_AND_ARTICLES for x in a_links if x[5])


def test_rule_15_a_pro_drop_subject_is_possible():
    links = _all_links()
    subjects = [x for x in links if x[4] in _EN_SUBJECTS and x[3] not in _ES_PRONOUNS]
    assert len(subjects) > 80 and not any(x[5] for x in subjects)
    you = [x for x in links if x[4] == "you" and x[5]]  # sure only to a pronoun or a verb with a clitic (daros)
    assert all(x[3] in {"tú", "ti", "te", "os", "vosotros", "usted", "contigo"} or x[3].endswith(("te", "os"))
               for x in you)  # fmt: skip
