"""attnkit.data.spelling: the 1909 Reina-Valera's spelling and today's, rule by rule on real verses,
with round trips, idempotence and word counts as properties (hypothesis) and over the whole corpus."""

import re

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from attnkit.data.spelling import TO_1909, check_spelling, modernize, normalize_source, to_1909

WORD = re.compile(r"\w+")

# (rule, 1909 verse, the same verse in today's spelling): real verses of the corpus
VERSES = [
    (
        "criar is crear (God, heavens)",
        "En el principio crió Dios los cielos y la tierra.",
        "En el principio creó Dios los cielos y la tierra.",
    ),
    ("monosyllable fué", "Y dijo Dios: Sea la luz: y fué la luz.", "Y dijo Dios: Sea la luz: y fue la luz."),
    (
        "monosyllable vió",
        "Y vió Dios que la luz era buena: y apartó Dios la luz de las tinieblas.",
        "Y vio Dios que la luz era buena: y apartó Dios la luz de las tinieblas.",
    ),
    (
        "the word á",
        "Y llamó Dios á la luz Día, y á las tinieblas llamó Noche: y fué la tarde y la mañana un día.",
        "Y llamó Dios a la luz Día, y a las tinieblas llamó Noche: y fue la tarde y la mañana un día.",
    ),
    (
        "the word ó",
        "para saber si Jehová había prosperado ó no su viaje.",
        "para saber si Jehová había prosperado o no su viaje.",
    ),
    (
        "the word é",
        "visibles é invisibles; sean tronos, sean dominios",
        "visibles e invisibles; sean tronos, sean dominios",
    ),
    ("monosyllable fuí", "como yo fuí con Moisés, seré contigo", "como yo fui con Moisés, seré contigo"),
    (
        "enclitic and piés",
        "y dióles paja y forraje, y agua para lavar los piés de él",
        "y dioles paja y forraje, y agua para lavar los pies de él",
    ),
    (
        "enclitics",
        "Levantóse entonces Rebeca y sus mozas, y el criado tomó á Rebeca, y fuése.",
        "Levantose entonces Rebeca y sus mozas, y el criado tomó a Rebeca, y fuese.",
    ),
    (
        "demonstrative",
        "Y como una criada le vió que estaba sentado al fuego, fijóse en él, y dijo: Y éste con él estaba.",
        "Y como una criada le vio que estaba sentado al fuego, fijose en él, y dijo: Y este con él estaba.",
    ),
    ("hiatus oíd", "Y él les dijo: Oid ahora mis palabras", "Y él les dijo: Oíd ahora mis palabras"),
    (
        "archaic priesa",
        "Entonces Abraham fué de priesa á la tienda á Sara",
        "Entonces Abraham fue de prisa a la tienda a Sara",
    ),
    (
        "criar is raise (no creation in the verse)",
        "Mas siendo puesto al peligro, la hija de Faraón le tomó, y le crió como á hijo suyo.",
        "Mas siendo puesto al peligro, la hija de Faraón le tomó, y le crio como a hijo suyo.",
    ),
    (
        "criados after ser is crear",
        "Porque por él fueron criadas todas las cosas que están en los cielos",
        "Porque por él fueron creadas todas las cosas que están en los cielos",
    ),
    (
        "criado the servant stays",
        "Y dijo Abraham á un criado suyo, el más viejo de su casa",
        "Y dijo Abraham a un criado suyo, el más viejo de su casa",
    ),
    (
        "diacritics stay",
        "¿Quién es este varón? Tú, y sí, á mí, aún más; que te dé lo que sé",
        "¿Quién es este varón? Tú, y sí, a mí, aún más; que te dé lo que sé",
    ),
    ("capitals keep their case", "FUÉ Á DIÓ", "FUE A DIO"),
]


@pytest.mark.parametrize(("rule", "old", "new"), VERSES, ids=[v[0] for v in VERSES])
def test_modernize_rules_on_real_verses(rule, old, new):
    assert modernize(old) == new


@pytest.mark.parametrize(
    "word", ["Jehová", "árbol", "día", "oí", "país", "José", "Moisés", "Saúl", "cántaro", "diósela"]
)
def test_accents_todays_rules_need_stay(word):
    """Agudas ending in a vowel/n/s, llanas ending otherwise, esdrújulas, and hiatus keep the accent."""
    assert modernize(word) == word


def test_to_1909_rules():
    assert to_1909("En el principio creó Dios los cielos y la tierra.") == (
        "En el principio crió Dios los cielos y la tierra."
    )
    assert to_1909("Y llamó Dios a la luz Día, y fue la tarde.") == "Y llamó Dios á la luz Día, y fué la tarde."
    assert to_1909("Y dio y vio; o no, e hijos; fui") == "Y dió y vió; ó no, é hijos; fuí"
    assert to_1909("Fue creado. A la cual") == "Fué criado. A la cual"  # a capital A is 1909's own spelling
    # words the 1909 text writes both ways stay: the model has seen them
    assert to_1909("di, ti, este, solo, prisa, creo en ti") == "di, ti, este, solo, prisa, creo en ti"


def test_normalize_source_and_bad_spelling():
    assert normalize_source("fue a", "rv1909") == "fué á"
    assert normalize_source("fue a", "modern") == "fue a"
    with pytest.raises(ValueError, match="spelling"):
        check_spelling("1909")
    with pytest.raises(TypeError, match="text"):
        modernize(b"fue")
    with pytest.raises(TypeError, match="text"):
        to_1909(None)


# 1909 words that come back from today's spelling (criar's need a verse about creation: "Dios")
OLD_WORDS = [*sorted(set(TO_1909.values())), "la", "luz", "Dios", "y", "hijos", "de", ",", "."]
MODERN_WORDS = [*sorted(w for w in TO_1909 if not w.startswith("cread")), "la", "luz", "Dios", "y", "Fue", "A"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(OLD_WORDS), min_size=1, max_size=12))
def test_round_trip_from_1909(words):
    text = "Dios " + " ".join(words)
    assert to_1909(modernize(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(MODERN_WORDS), min_size=1, max_size=12))
def test_round_trip_from_modern(words):
    text = "Dios " + " ".join(words)
    assert modernize(to_1909(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("aeiouáéíóúüyhqgnsrclAÉÓ ,.¿?")), max_size=40))
def test_idempotent_and_word_count_kept(text):
    m, o = modernize(text), to_1909(text)
    assert modernize(m) == m
    assert to_1909(o) == o
    assert len(WORD.findall(m)) == len(WORD.findall(text)) == len(WORD.findall(o))
    assert modernize(text).lower() == modernize(text.lower()).lower()  # case never changes the rule


def test_whole_corpus(bible_home):
    """Every verse of the prepared corpus: the word count stays, modernize is idempotent, and every
    word whose modern form is in the 1909 table comes back as it was."""
    from attnkit.data.datasets.bible import load_pairs

    pairs = [p for split in ("train", "valid", "test") for p in load_pairs(split, home=bible_home)]
    changed = back = 0
    for p in pairs:
        m = modernize(p.src)
        assert modernize(m) == m, p.ref
        old, new, again = WORD.findall(p.src), WORD.findall(m), WORD.findall(to_1909(m))
        assert len(old) == len(new) == len(again), p.ref
        for o, n, a in zip(old, new, again):
            if o != n:
                changed += 1
                if n.lower() in TO_1909 and (len(n) > 1 or n.islower()):
                    assert a == o, (p.ref, o, n, a)
                    back += 1
    assert changed > 20_000  # á alone is ~19,000 tokens
    assert back / changed > 0.85  # á, fué, dió, vió, é, ó...: the forms the models most need
