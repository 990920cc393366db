"""Translation metrics: sacrebleu BLEU and chrF, and BLEU by source length (Bahdanau et al., Fig. 2)."""

from __future__ import annotations

from collections.abc import Sequence

LENGTH_BUCKETS = [(0, 10), (10, 20), (20, 30), (30, 40), (40, 50), (50, 60), (60, None)]


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """sacrebleu corpus BLEU and chrF (default settings: 13a tokenisation, chrF2)."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        return {"bleu": 0.0, "chrf": 0.0, "n_sentences": 0}
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu = bleu_metric.corpus_score(list(hypotheses), [list(references)])
    chrf = chrf_metric.corpus_score(list(hypotheses), [list(references)])
    return {
        "bleu": round(bleu.score, 2),
        "chrf": round(chrf.score, 2),
        "n_sentences": len(hypotheses),
        "bleu_signature": str(bleu_metric.get_signature()),
    }


def bleu_by_length(sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[str]) -> list[dict]:
    """Corpus BLEU per source-length bucket (in words): 0–10, 10–20, … 60+ (Bahdanau et al., Fig. 2).
    A bucket with no sentence has no score: its ``bleu`` and ``chrf`` are None (not 0, which would read as
    a model that got every sentence of that length wrong)."""
    rows = []
    for lo, hi in LENGTH_BUCKETS:
        idx = [i for i, s in enumerate(sources) if len(s.split()) >= lo and (hi is None or len(s.split()) < hi)]
        sc = (
            corpus_scores([hypotheses[i] for i in idx], [references[i] for i in idx])
            if idx
            else {"bleu": None, "chrf": None}
        )
        rows.append(
            {
                "bucket": f"{lo}-{hi}" if hi is not None else f"{lo}+",
                "n": len(idx),
                "bleu": sc["bleu"],
                "chrf": sc["chrf"],
            }
        )
    return rows
