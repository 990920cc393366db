"""The one place attnkit touches ``sacrebleu``'s private internals: BLEU and chrF as sums of sufficient statistics, so scores of a corpus split across ranks combine exactly.

Corpus BLEU (Papineni et al., 2002) is not the mean of per-part BLEUs: it is computed from the
corpus totals of matched and candidate n-gram counts (n = 1..4) and the hypothesis and reference
lengths, ``BLEU = BP * exp(mean_n log(matches_n / totals_n))``. chrF (Popović, 2015) likewise
sums character and word n-gram statistics. Each rank therefore returns its statistic vectors,
the ranks' vectors are added, and the score is computed once from the sum: equal to the
single-process :func:`attnkit.tasks.translation.metrics.corpus_scores` to the last digit.

sacrebleu (2.x) computes these statistics in ``_extract_corpus_statistics`` and scores them in
``_compute_score_from_stats``; it has no public name for them, so both are reached here only,
failing with a :class:`SacrebleuInternalsError` naming the internal and the installed version when
one is missing.

**Version check.** At import the installed ``sacrebleu`` is compared with :data:`SUPPORTED` (the range
this module was written for; the project pins 2.6.0); outside it a :class:`UserWarning` is issued, not
an error: only combining split scores needs these internals.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from attnkit.errors import AttnkitError
from attnkit.version import installed_version, outside_range

__all__ = [
    "SUPPORTED",
    "SacrebleuInternalsError",
    "add_statistics",
    "check_version",
    "scores_from_statistics",
    "translation_statistics",
]

#: ``(minimum, below)``: the ``sacrebleu`` releases this module was written for (``>=2.0,<3``).
SUPPORTED = ("2.0", "3")


class SacrebleuInternalsError(AttnkitError, RuntimeError):
    """An internal of ``sacrebleu`` that attnkit relies on is missing (another version than :data:`SUPPORTED`)."""


def check_version() -> str | None:
    """Warn (one line) when the installed ``sacrebleu`` lies outside :data:`SUPPORTED`; return the message or None."""
    message = outside_range("sacrebleu", installed_version("sacrebleu"), *SUPPORTED)
    if message is not None:
        warnings.warn(f"{message}; combining split BLEU/chrF scores may fail", UserWarning, stacklevel=2)
    return message


check_version()


def _metrics():
    import sacrebleu

    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    for name in ("_extract_corpus_statistics", "_compute_score_from_stats"):
        if not (hasattr(bleu, name) and hasattr(chrf, name)):
            raise SacrebleuInternalsError(f"sacrebleu {sacrebleu.__version__} has no {name}, which attnkit needs")
    return bleu, chrf


def translation_statistics(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Summed BLEU and chrF statistics of some sentence pairs: ``{"bleu": [...], "chrf": [...], "n_sentences": n}``.

    Statistics of disjoint parts of a corpus add element-wise (see :func:`add_statistics`).
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu, chrf = _metrics()
    out = {"n_sentences": len(hypotheses)}
    for name, metric in (("bleu", bleu), ("chrf", chrf)):
        segs = metric._extract_corpus_statistics(list(hypotheses), [list(references)])  # (n_sentences, n_stats)
        out[name] = [int(sum(col)) for col in zip(*segs)] if segs else []
    return out


def add_statistics(a: dict, b: dict) -> dict:
    """Element-wise sum of two :func:`translation_statistics` results (an empty part adds nothing)."""
    out = {"n_sentences": a["n_sentences"] + b["n_sentences"]}
    for name in ("bleu", "chrf"):
        x, y = a[name], b[name]
        out[name] = [i + j for i, j in zip(x, y)] if x and y else list(x or y)
    return out


def scores_from_statistics(stats: dict) -> dict:
    """The scores :func:`attnkit.tasks.translation.metrics.corpus_scores` reports, from summed statistics."""
    if not stats["n_sentences"]:
        return {"bleu": 0.0, "chrf": 0.0, "n_sentences": 0}
    bleu, chrf = _metrics()
    bleu.num_refs = 1  # what corpus_score sets from its one reference stream; the signature names it
    return {
        "bleu": round(bleu._compute_score_from_stats(list(stats["bleu"])).score, 2),
        "chrf": round(chrf._compute_score_from_stats(list(stats["chrf"])).score, 2),
        "n_sentences": stats["n_sentences"],
        "bleu_signature": str(bleu.get_signature()),
    }
