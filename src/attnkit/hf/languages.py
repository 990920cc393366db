"""The source and target languages of a Hugging Face translator, so that the explorer and ``attnkit models``
can name them ("Translate Spanish → English") instead of showing "?".

Where a translator says them, in the order read (the first that names a side wins, side by side):

1. its tokenizer: Marian's ``source_lang``/``target_lang``, M2M100/NLLB/mBART's ``src_lang``/``tgt_lang``
   (attributes, else the keyword arguments its ``tokenizer_config.json`` gave it);
2. the language tokens it writes: the source's prefix or suffix tokens and the decoder's forced first
   token (M2M100's ``__es__``, NLLB's ``spa_Latn``, mBART's ``es_XX``);
3. as a last resort, the name: ``opus-mt-es-en`` (or any ``-xx-yy`` ending) of the hub name or folder.

A side nothing names is ``"?"``; the explorer then heads the panel a neutral "Translate"."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["UNKNOWN", "language_code", "translator_languages"]

UNKNOWN = "?"

# __en__ (M2M100), en_XX (mBART-50), eng_Latn (NLLB), or a bare ISO 639 code (en, eng)
_CODE = re.compile(r"^_*([a-z]{2,3})(?:_[A-Z][A-Za-z]{1,3})?_*$")
_NAME = re.compile(r"(?:opus-mt-|-)([a-z]{2,3})-([a-z]{2,3})/?$")


def language_code(value: Any) -> str | None:
    """The ISO 639 code in a tokenizer's language value or language token (``"__es__"`` → ``"es"``,
    ``"spa_Latn"`` → ``"spa"``, ``"es_XX"`` → ``"es"``, ``"es"`` → ``"es"``); None for anything else."""
    if not isinstance(value, str):
        return None
    m = _CODE.match(value.strip())
    return m.group(1) if m else None


def _from_tokenizer(tok: Any, keys: tuple[str, ...]) -> str | None:
    kwargs = getattr(tok, "init_kwargs", None)
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    for key in keys:
        for value in (getattr(tok, key, None), kwargs.get(key)):
            code = language_code(value)
            if code:
                return code
    return None


def _from_tokens(tokens: Iterable[str]) -> str | None:
    for token in tokens:  # a language token is the only special token of this shape
        if isinstance(token, str) and ("_" in token) and language_code(token):
            return language_code(token)
    return None


def translator_languages(
    tok: Any, name: str, *, source_tokens: Iterable[str] = (), target_tokens: Iterable[str] = ()
) -> tuple[str, str]:
    """``(source language, target language)`` of the Hugging Face translator whose tokenizer is ``tok``
    and whose hub name or folder is ``name``; ``source_tokens``: the special tokens its tokenizer puts
    around a source, ``target_tokens``: the decoder's forced first tokens. ``"?"`` for a side nothing names."""
    src = _from_tokenizer(tok, ("source_lang", "src_lang")) or _from_tokens(source_tokens)
    tgt = _from_tokenizer(tok, ("target_lang", "tgt_lang")) or _from_tokens(target_tokens)
    if not (src and tgt):
        m = _NAME.search(str(name))
        if m:
            src, tgt = src or m.group(1), tgt or m.group(2)
    return src or UNKNOWN, tgt or UNKNOWN
