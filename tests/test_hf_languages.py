"""A Hugging Face translator's languages (attnkit.hf.languages), which the explorer heads its panel with:
read from the tokenizer's config (Marian), the language tokens (M2M100/NLLB) or, last, the name."""

import json

import transformers

from attnkit.hf.languages import language_code, translator_languages
from attnkit.hf.seq2seq import HFSeq2Seq
from hf_tiny import build_tiny


def test_marian_languages_come_from_its_tokenizer_config(tmp_path):
    model, tok = build_tiny("marian")
    tok.save_pretrained(tmp_path)
    path = tmp_path / "tokenizer_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "source_lang": "es", "target_lang": "en"}))  # as the hub's opus-mt
    adapter = HFSeq2Seq(model, transformers.AutoTokenizer.from_pretrained(tmp_path), source=str(tmp_path))
    assert (adapter.config.src_lang, adapter.config.tgt_lang) == ("es", "en")


def test_m2m100_languages_come_from_its_language_tokens():
    model, tok = build_tiny("m2m_100")  # the source starts with __es__, the decoder is forced to __en__
    adapter = HFSeq2Seq(model, tok, source="m2m")
    assert (adapter.config.src_lang, adapter.config.tgt_lang) == ("es", "en")


def test_the_name_is_the_last_resort_and_unknown_stays_unknown():
    model, tok = build_tiny("marian")
    named = HFSeq2Seq(model, tok, source="/models/opus-mt-de-fr")
    assert (named.config.src_lang, named.config.tgt_lang) == ("de", "fr")
    assert translator_languages(tok, "/models/tiny-marian") == ("?", "?")
    assert [language_code(x) for x in ("__es__", "spa_Latn", "es_XX", "en", "</s>", None)] == [
        "es",
        "spa",
        "es",
        "en",
        None,
        None,
    ]
