"""The shipped English → Spanish Transformer: the Bible and its gold alignments read the other way, and the
second direction that `attnkit align --symmetrize` reads by default."""

import json

import pytest

from attnkit.alignment import AERCounts, aer_counts, invert, symmetrize
from attnkit.alignment.gold import DEV_VERSES, load_gold, parse_links
from attnkit.cli import main as cli_main
from attnkit.data.corpus import open_corpus
from attnkit.errors import InputError
from attnkit.pretrained import resolve_model, reverse_model
from attnkit.tasks.translation import Translator
from attnkit.tasks.translation.alignment import AttentionReading, ModelAligner
from attnkit.tasks.translation.alignment_evaluate import evaluate_alignment
from attnkit.tasks.translation.translation_quality import evaluate_translation


def test_the_shipped_pair_finds_each_other():
    assert reverse_model(resolve_model("transformer-es-en")) == "transformer-en-es"
    assert reverse_model(resolve_model("transformer-en-es")) == "transformer-es-en"
    assert reverse_model(resolve_model("rnnsearch-es-en")) is None  # no RNNsearch of the other direction
    assert reverse_model(resolve_model("captioner-soft")) is None
    assert reverse_model("hf:Helsinki-NLP/opus-mt-es-en") is None  # a hub name: no folder, no shipped partner
    tr = Translator.load("transformer-en-es")
    assert (tr.src_lang, tr.tgt_lang, tr.corpus, tr.spelling) == ("en", "es", "bible", "modern")


def _scored_aer(per_verse_links, verses):
    total = AERCounts()
    for links, v in zip(per_verse_links[DEV_VERSES:], verses[DEV_VERSES:]):
        total = total + aer_counts(links, v.sure, v.possible)
    return round(total.aer, 4)


def test_an_english_to_spanish_model_is_scored_on_the_gold_set_turned_around():
    verses = load_gold()
    r = evaluate_alignment("transformer-en-es", methods=("guided",), references=False, samples=50)
    assert "read the other way" in r["gold"]
    # by hand: the model reads each English verse and writes its Spanish; its (English, Spanish) links turned
    forward = ModelAligner(Translator.load("transformer-en-es"), AttentionReading("guided"))
    links = [invert(x) for x in forward.align([(v.target, v.source) for v in verses])]
    assert r["rows"][0]["aer"] == _scored_aer(links, verses)
    assert r["rows"][0]["aer"] < 0.3  # it aligns (the diagonal baseline is 0.69)


def test_two_models_symmetrised_equal_a_plain_combination(capsys):
    verses = load_gold()
    r = evaluate_alignment(
        "transformer-es-en", methods=("guided",), reverse_model="transformer-en-es", references=False, samples=50
    )
    es_en = list(ModelAligner(Translator.load("transformer-es-en"), AttentionReading("guided")).align(
        [(v.source, v.target) for v in verses]
    ))  # fmt: skip
    back = ModelAligner(Translator.load("transformer-en-es"), AttentionReading("guided"))
    en_es = list(back.align([(v.source, v.target) for v in verses], reverse=True))
    both = [symmetrize(f, b, "grow-diag-final-and") for f, b in zip(es_en, en_es)]
    assert r["rows"][0]["aer"] == _scored_aer(both, verses)
    assert "transformer-en-es" in r["rule"]


def test_align_symmetrize_reads_the_shipped_other_direction(tmp_path, capsys):
    verses = load_gold()[:4]
    src, tgt = tmp_path / "a.es", tmp_path / "a.en"
    src.write_text("".join(" ".join(v.source) + "\n" for v in verses))
    tgt.write_text("".join(" ".join(v.target) + "\n" for v in verses))
    argv = ["align", "--src", str(src), "--tgt", str(tgt), "--no-progress", "--symmetrize", "grow-diag-final-and"]
    assert cli_main(argv) == 0
    out, err = capsys.readouterr()
    assert "with transformer-en-es" in err
    got = [parse_links(line) for line in out.splitlines()]
    explicit = ["--reverse-model", "transformer-en-es"]
    assert cli_main([*argv, *explicit]) == 0
    assert [parse_links(line) for line in capsys.readouterr().out.splitlines()] == got
    # 'none': both ways from the one model's attention, as before there was a second model
    assert cli_main([*argv, "--reverse-model", "none"]) == 0
    out, err = capsys.readouterr()
    assert "transformer-en-es" not in err and len(out.splitlines()) == 4


def test_evaluate_translation_reads_the_bible_turned_around():
    r = evaluate_translation("transformer-en-es", limit=3)
    assert (r["src_lang"], r["tgt_lang"], r["n_sentences"]) == ("en", "es", 3)
    bible = open_corpus("bible").pairs("test", limit=3)
    r_by_hand = Translator.load("transformer-en-es").translate([p.tgt for p in bible])
    from attnkit.tasks.translation.metrics import corpus_scores

    assert r["bleu"] == corpus_scores([h.translation for h in r_by_hand], [p.src for p in bible])["bleu"]
    with pytest.raises(InputError, match="rewrites Spanish sources"):
        evaluate_translation("transformer-en-es", limit=3, modernize=True)
    assert json.dumps(r)  # a plain JSON report
