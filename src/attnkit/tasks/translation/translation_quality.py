"""``attnkit evaluate translation``: BLEU/chrF of a model on a split of its corpus, or on the user's
own source and reference files, and BLEU by length."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from ...data.corpus import UnknownCorpusError, open_corpus
from ...data.datasets.bible import Pair
from ...data.parallel import ParallelDataError, read_parallel
from ...data.spelling import modernize as modern_spelling
from ...errors import InputError
from .generation import check_length_penalty
from .inference import Translator
from .lexical_shortlist import LexicalShortlist
from .metrics import bleu_by_length, corpus_scores


def evaluate_translation(
    model_dir: str | Path,
    *,
    split: str = "test",
    limit: int | None = None,
    beam_size: int = 1,
    home: str | Path | None = None,
    device: str | None = "cpu",
    dtype: str | torch.dtype | None = None,
    shortlist: LexicalShortlist | None = None,
    pairs: list[Pair] | None = None,
    normalize_spelling: bool = True,
    modernize: bool = False,
    length_penalty: float | None = None,
    translate_sources: Callable[..., list[str]] | None = None,
) -> dict:
    """BLEU/chrF of a model on a split of the corpus it was trained on (optionally its first
    ``limit`` pairs), or on ``pairs`` (e.g. :func:`read_test_files`), and BLEU by length; with
    ``shortlist``, searching each batch's lexical shortlist instead of the whole vocabulary.
    ``normalize_spelling``: rewrite the sources in the model's training spelling first (see
    :class:`Translator`); ``modernize``: score a copy of the sources in today's spelling;
    ``length_penalty``: beam search's GNMT ``α`` instead of the model's own (:mod:`.generation`);
    ``translate_sources``: see :func:`evaluate_translator`."""
    tr = Translator.load(model_dir, device=device, dtype=dtype)
    tr.normalize_spelling = normalize_spelling
    if length_penalty is not None:
        tr.length_penalty = check_length_penalty(length_penalty)
    report = evaluate_translator(
        tr,
        split=split,
        limit=limit,
        beam_size=beam_size,
        home=home,
        shortlist=shortlist is not None,
        options={"shortlist": shortlist},
        pairs=pairs,
        modernize=modernize,
        translate_sources=translate_sources,
    )
    return {"model": str(model_dir), "model_type": getattr(tr.model, "model_type", "?"), **report}


def evaluate_translator(
    tr,
    *,
    split: str = "test",
    limit: int | None = None,
    beam_size: int = 1,
    home: str | Path | None = None,
    shortlist: bool = False,
    options: dict | None = None,
    pairs: list[Pair] | None = None,
    modernize: bool = False,
    translate_sources: Callable[..., list[str]] | None = None,
) -> dict:
    """The report of :func:`evaluate_translation` (less ``model``/``model_type``) for a loaded
    translator of either engine: anything with ``translate(sources, beam_size=, truncate=, **options)``
    returning dicts with ``translation``. ``shortlist`` says whether ``options`` restrict the vocabulary.
    ``translate_sources(tr, sources, **kwargs)``, when given, returns the translations' texts in place of
    ``tr.translate`` (the same ones: e.g. :func:`.split_translation.translations_on_ranks` under torchrun)."""
    corpus_name = getattr(tr, "corpus", "bible")
    if pairs is None:
        try:
            corpus = open_corpus(corpus_name, home)
        except UnknownCorpusError as exc:
            raise UnknownCorpusError(
                f"the model was trained on corpus {corpus_name!r}, which is not prepared here ({exc}); "
                "or evaluate it on your own files with --src FILE --ref FILE"
            ) from None
        pairs = corpus.pairs(split, limit=limit)
        if corpus.turned_around(getattr(tr, "src_lang", None), getattr(tr, "tgt_lang", None)):
            pairs = [p._replace(src=p.tgt, tgt=p.src) for p in pairs]
        if not pairs:
            raise UnknownCorpusError(f"corpus {corpus_name!r} has no {split} pairs; give --src FILE --ref FILE")
    else:
        split = "files"
        pairs = pairs[:limit] if limit is not None else pairs
    if modernize and getattr(tr, "src_lang", "es") != "es":
        raise InputError(f"--modernize rewrites Spanish sources in today's spelling; this model reads {tr.src_lang}")
    if modernize:  # the same pairs, their sources in today's spelling
        pairs = [p._replace(src=modern_spelling(p.src)) for p in pairs]
    t0 = time.perf_counter()
    sources = [p.src for p in pairs]
    if translate_sources is None:
        hyps = tr.translate(sources, beam_size=beam_size, truncate=True, **(options or {}))
        out_text = [h.translation for h in hyps]
    else:
        out_text = translate_sources(tr, sources, beam_size=beam_size, truncate=True, **(options or {}))
    elapsed = time.perf_counter() - t0
    scores = corpus_scores(out_text, [p.tgt for p in pairs])
    return {
        "split": split,
        "src_lang": getattr(tr, "src_lang", "es"),
        "tgt_lang": getattr(tr, "tgt_lang", "en"),
        "beam_size": beam_size,
        # the engine's own: GNMT's α for attnkit, the β of score / L^β for CTranslate2 (greedy: none)
        "length_penalty": getattr(tr, "length_penalty", None) if beam_size > 1 else None,
        "shortlist": shortlist,
        "modernized": modernize,
        "input_spelling": getattr(tr, "spelling", "modern"),
        **scores,
        "sentences_per_s": round(len(pairs) / max(elapsed, 1e-9), 2),
        "by_length": bleu_by_length([p.src for p in pairs], out_text, [p.tgt for p in pairs]),
        "examples": [
            {"ref": p.ref, "source": p.src, "reference": p.tgt, "output": o} for p, o in list(zip(pairs, out_text))[:5]
        ],
    }


def read_test_files(src: str | Path, ref: str | Path) -> list[Pair]:
    """The pairs of a source file and its reference translations (aligned, one sentence a line; UTF-8
    with or without BOM, ``\\n`` or ``\\r\\n``, ``.gz`` too). Files of different lengths, or an
    empty source line, are a :class:`attnkit.data.parallel.ParallelDataError` naming file (and line)."""
    pairs = []
    for n, s, r in read_parallel((src, ref)):
        if not s.strip():
            raise ParallelDataError(f"{src}:{n}: empty source line (give one sentence a line)")
        pairs.append(Pair(s.strip(), r.strip(), f"{Path(src).name}:{n}"))
    return pairs
