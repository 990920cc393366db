"""``attnkit evaluate explanations`` of a translator, verse by verse: one verse's scores as a JSON-able record,
and the report from every verse's record, equal to :func:`~attnkit.attribution.explanation_quality.evaluate_explanations`'s.

Every number of the report is a function of per-verse values, so the verses can be scored by different
processes (or in different runs) and combined exactly:

- the random floor is the mean of every target word's random-order deletion area, in verse order (each
  verse's random orders are drawn by :func:`~attnkit.attribution.explanation_quality.open_translator_run`
  from the one seeded generator, whichever verses a process scores);
- a method's AER, precision and recall come from its AER counts summed over the verses (integers: the
  sufficient statistics of AER, Och & Ney 2003), its deletion area is the mean of every target word's area in
  verse order, and its milliseconds the mean of the verses' seconds (the one value that is measured, not
  computed, so it differs between any two runs);
- its sanity score (cascading randomisation, Adebayo et al. 2018) is, stage by stage, the mean of the
  Spearman correlations of the sanity verses' rows; a verse's correlations need only that verse and the
  randomised copy, which every process re-draws from the same seed.

A record holds the floats as JSON writes them (the shortest text that reads back as the same double), so
the combined report is the one-process report to the last digit, the milliseconds aside.
"""

from __future__ import annotations

from ..alignment.aer import AERCounts
from .explanation_quality import (
    TranslatorRun,
    _run_methods,
    finish_report,
    method_row,
    sanity_rhos,
    sanity_summary,
)

__all__ = ["combine_verse_scores", "score_verse"]


def score_verse(run: TranslatorRun, k: int) -> dict:
    """Verse ``k``'s (0-based, of ``run.verses``) values: ``{"verse": k, "random": [areas], "methods": {m:
    {"counts": [|A∩S|, |A∩P|, |A|, |S|], "areas": [...], "seconds": s, "sanity": [[ρ, ...] per stage]}}}``,
    ``sanity`` only for the first ``run.sanity_verses`` verses."""
    if not 0 <= k < len(run.verses):
        raise ValueError(f"verse must be in 0..{len(run.verses) - 1}, got {k}")
    record: dict = {"verse": k, "random": run.random_areas(k), "methods": {}}
    for m in run.names:
        counts, areas, seconds, words = run.score_verse(m, k)
        entry = {"counts": [counts.a_and_s, counts.a_and_p, counts.a, counts.s], "areas": areas, "seconds": seconds}
        if k < run.sanity_verses:
            by_stage = sanity_rhos(run.tr.model, {k: words}, [k], run.attributions(m), run.seed, min_length=3)
            entry["sanity"] = [stage[0] for stage in by_stage]  # (stages, this verse's rows)
        record["methods"][m] = entry
    return record


def combine_verse_scores(run: TranslatorRun, records: list[dict]) -> dict:
    """The report of every verse's :func:`score_verse` record (in any order, each verse once), as
    :func:`~attnkit.attribution.explanation_quality.evaluate_explanations` makes it in one process."""
    import numpy as np

    by_verse = {int(r["verse"]): r for r in records}
    if sorted(by_verse) != list(range(len(run.verses))) or len(records) != len(run.verses):
        raise ValueError(f"the records must hold each of the {len(run.verses)} verses once, got {len(records)}")
    ordered = [by_verse[k] for k in range(len(run.verses))]
    report = run.report_head(float(np.mean([w for r in ordered for w in r["random"]])))

    def score(m: str) -> dict:
        counts = AERCounts()
        for r in ordered:
            counts = counts + AERCounts(*(int(c) for c in r["methods"][m]["counts"]))
        areas = [a for r in ordered for a in r["methods"][m]["areas"]]
        seconds = [r["methods"][m]["seconds"] for r in ordered]
        return method_row(counts, areas, seconds, report["random_area"])

    def sanity(m: str) -> dict:
        per_verse = [r["methods"][m]["sanity"] for r in ordered[: run.sanity_verses]]
        if not per_verse:
            return sanity_summary([])
        return sanity_summary([[rho for verse in per_verse for rho in verse[s]] for s in range(len(per_verse[0]))])

    _run_methods(report, run.names, None, score, sanity, None, None)
    return finish_report(report)
