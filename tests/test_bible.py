import json
import random
import re
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data import bible
from attnkit.data.datasets.bible import (
    CorruptCorpusError,
    Pair,
    SwordModuleNotFoundError,
    bible_path,
    clean_osis,
    fix_drop_caps,
    load_pairs,
    prepare_bible,
    split_of,
)


# ------------------------------------------------------------------ cleaning, on markup we saw
def test_note_between_words_leaves_a_space():
    raw = (
        '<w lemma="strong:H0430">God</w><note placement="foot"><reference type="annotateRef">'
        "1:1 </reference>The Hebrew word rendered “God” is “אֱלֹהִ֑ים” (Elohim).</note>"
        '<w lemma="strong:H1254">created</w> <w>the</w> <w>earth</w>. '
    )
    assert clean_osis(raw) == "God created the earth."


def test_added_words_are_kept_and_separated():
    raw = 'hay allí<transChange type="added">también</transChange>bdelio y piedra.'
    assert clean_osis(raw) == "hay allí también bdelio y piedra."
    assert clean_osis('que <transChange type="added">están</transChange>, y') == "que están, y"


def test_quotes_poetry_titles_and_entities():
    raw = (
        '<title canonical="true" type="psalm">A Psalm by David.</title> <lg sID="a"/> '
        '<l level="1" sID="b"/>Yahweh is my shepherd;<l eID="b"/> <l sID="c"/>I shall lack'
        ' nothing.<l eID="c"/><title type="x-heading">Editor heading</title>'
        "<speaker>Beloved</speaker>"
    )
    assert clean_osis(raw) == "A Psalm by David. Yahweh is my shepherd; I shall lack nothing."
    assert clean_osis('only born</q><note>n</note><q who="Jesus">Son, that') == "only born Son, that"
    assert clean_osis("“<q>Go</q>,” he said &amp; ¶left") == "“Go,” he said & left"


def test_glossary_after_book_end_is_cut():
    raw = (
        'Amen. <chapter eID="Rev.22"/><div canonical="true" eID="x" osisID="Rev" type="book"/>'
        '<div type="glossary"/>The following words used in the WEB'
    )
    assert clean_osis(raw) == "Amen."


def test_drop_caps():
    assert fix_drop_caps("EN el principio") == "En el principio"
    assert fix_drop_caps("Salmo de David. JEHOVÁ es mi pastor") == "Salmo de David. Jehová es mi pastor"
    assert fix_drop_caps("ALEPH. Bienaventurados") == "ALEPH. Bienaventurados"


_tag = st.sampled_from(
    [
        '<w lemma="x">',
        "</w>",
        "<note>n1 n2</note>",
        '<l sID="1"/>',
        "<q>",
        "</q>",
        '<transChange type="added">',
        "</transChange>",
        '<div type="x-p"/>',
    ]
)
_word = st.text(alphabet="abcdeñá,.;“”", min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_tag, _word, st.just(" ")), max_size=30))
def test_clean_never_leaves_markup_or_double_spaces(parts):
    out = clean_osis("".join(parts))
    assert "<" not in out and ">" not in out and "\x00" not in out
    assert "  " not in out and out == out.strip()
    assert clean_osis(out) == out  # idempotent on plain text


def test_clean_rejects_non_str():
    with pytest.raises(TypeError, match="raw"):
        clean_osis(b"<w>x</w>")


# ------------------------------------------------------------------ the real corpus
def _rows(home):
    lines = bible_path(home).read_text("utf-8").splitlines()
    return [line.split("\t") for line in lines[1:]]


def _by_ref(home):
    return {f"{r[1]} {r[2]}:{r[3]}": r for r in _rows(home)}


def test_real_verses_are_clean(bible_home):
    refs = _by_ref(bible_home)
    gen = refs["Gen 1:1"]
    assert gen[5] == "In the beginning, God created the heavens and the earth."
    assert "crió Dios" in gen[4] and gen[4].startswith("En el principio")  # RV 1909 spelling
    assert "his only born Son, that" in refs["John 3:16"][5]  # a footnote sat between the words
    assert refs["Ps 23:1"][5] == "A Psalm by David. Yahweh is my shepherd; I shall lack nothing."
    assert refs["Ps 23:1"][4].startswith("Salmo de David. Jehová es mi pastor")
    assert "allí también bdelio" in refs["Gen 2:12"][4]
    assert refs["Rev 22:21"][5].endswith("Amen.")  # glossary appended in the module is cut off


def test_no_markup_in_a_sample_of_verses(bible_home):
    rows = _rows(bible_home)
    sample = random.Random(0).sample(rows, 2000)
    for r in sample:
        for text in r[4:]:
            assert text and "<" not in text and ">" not in text and "&" not in text.replace("& ", "")
            assert "  " not in text and "\t" not in text and "¶" not in text
            assert not re.search(r"[a-z][A-Z][a-z]", text), text  # e.g. "Godcreated"-style joins


def test_pair_count_and_splits(bible_home):
    rows = _rows(bible_home)
    meta = json.loads(bible_path(bible_home).with_name("meta.json").read_text())
    assert 30_000 <= len(rows) <= 32_000
    assert meta["pairs"] == len(rows)
    counts = {s: sum(r[0] == s for r in rows) for s in bible.SPLITS}
    assert counts == meta["splits"]
    assert 0.9 < counts["train"] / len(rows) < 0.97
    assert counts["valid"] > 500 and counts["test"] > 500
    assert len({r[1] for r in rows}) == 66  # canonical books only, no deuterocanon


def test_splits_are_disjoint_by_chapter(bible_home):
    chapter_split = {}
    for r in _rows(bible_home):
        chapter_split.setdefault((r[1], r[2]), set()).add(r[0])
        assert r[0] == split_of(r[1], int(r[2]))
    assert all(len(s) == 1 for s in chapter_split.values())


def test_split_is_deterministic():
    assert [split_of("Gen", c) for c in range(1, 51)] == [split_of("Gen", c) for c in range(1, 51)]
    got = [split_of(b, c) for b in ("Gen", "Ps", "Matt") for c in range(1, 151)]
    assert set(got) == {"train", "valid", "test"}


def test_load_pairs(bible_home):
    test = load_pairs("test", home=bible_home)
    assert all(isinstance(p, Pair) and p.src and p.tgt for p in test)
    assert re.fullmatch(r"\w+ \d+:\d+", test[0].ref)
    assert load_pairs("train", home=bible_home, limit=5) == load_pairs("train", home=bible_home)[:5]
    with pytest.raises(ValueError, match="split"):
        load_pairs("dev", home=bible_home)
    with pytest.raises(ValueError, match="limit"):
        load_pairs("train", home=bible_home, limit=-1)


def test_prepare_is_cached(bible_home):
    path = bible_path(bible_home)
    before = path.stat().st_mtime_ns
    assert prepare_bible(bible_home, sword_path="/nonexistent") == path  # cached: sword not read
    assert path.stat().st_mtime_ns == before


# ------------------------------------------------------------------ errors
def test_missing_sword_folder(tmp_path):
    with pytest.raises(SwordModuleNotFoundError) as err:
        prepare_bible(tmp_path / "home", sword_path=tmp_path / "nosword")
    msg = str(err.value)
    assert "spaRV1909eb" in msg and str(tmp_path / "nosword") in msg and "sword-text-sparv" in msg
    assert isinstance(err.value, FileNotFoundError)


def test_missing_one_module_via_env(tmp_path, monkeypatch):
    sword = tmp_path / "sword"
    (sword / "mods.d").mkdir(parents=True)
    conf = bible.DEFAULT_SWORD_PATH / "mods.d" / "spaRV1909eb.conf"
    if not conf.is_file():
        pytest.skip("spaRV1909eb not installed")
    shutil.copy(conf, sword / "mods.d")
    shutil.copytree(
        bible.DEFAULT_SWORD_PATH / "modules/texts/ztext/spaRV1909eb", sword / "modules/texts/ztext/spaRV1909eb"
    )
    monkeypatch.setenv("ATTNKIT_SWORD_PATH", str(sword))
    with pytest.raises(SwordModuleNotFoundError, match="engWEB2015eb") as err:
        prepare_bible(tmp_path / "home")
    assert "sword-text-web" in str(err.value) and str(sword) in str(err.value)
    assert not bible_path(tmp_path / "home").exists()


def _write_corrupt(home, body):
    path = bible_path(home)
    path.parent.mkdir(parents=True)
    path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "bad_row, what",
    [
        ("train\tGen\t1\t2\tsolo español", "columns"),
        ("dev\tGen\t1\t2\tes\ten", "unknown split"),
        ("train\tGen\tone\t2\tes\ten", "integers"),
    ],
)
def test_corrupt_tsv_names_file_and_line(tmp_path, bad_row, what):
    header = "\t".join(bible.TSV_COLUMNS)
    path = _write_corrupt(tmp_path, f"{header}\ntrain\tGen\t1\t1\tes\ten\n{bad_row}\n")
    with pytest.raises(CorruptCorpusError, match=what) as err:
        load_pairs("train", home=tmp_path)
    assert f"{path}:3" in str(err.value)


def test_corrupt_header(tmp_path):
    path = _write_corrupt(tmp_path, "es\ten\nhola\thello\n")
    with pytest.raises(CorruptCorpusError, match="header") as err:
        load_pairs("train", home=tmp_path)
    assert f"{path}:1" in str(err.value)
