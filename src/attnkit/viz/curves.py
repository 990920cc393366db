"""BLEU by source sentence length, one curve per model (Bahdanau et al. 2015, Figure 2)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from ._common import DEFAULT_DPI, new_figure, prepare_path, save_png

__all__ = ["bleu_by_length_figure", "plot_bleu_by_length"]


def plot_bleu_by_length(
    reports: Sequence[dict], path: str | os.PathLike, *, title: str | None = None, dpi: float = DEFAULT_DPI
) -> Path:
    """Plot BLEU per source-length bucket for each report of ``evaluate_translation``.

    Each report needs ``by_length`` (rows with ``bucket``, ``n``, ``bleu``) and ``model_type``
    (the legend label, with the overall BLEU to two decimals, as ``evaluate translation`` prints it and
    the tables quote it). Buckets with no sentence (``bleu`` None) are left out of a curve, and marked "–" on
    the axis: no score, rather than a point at 0.
    """
    fig = bleu_by_length_figure(reports, title=title)
    return save_png(fig, prepare_path(path), dpi)


def bleu_by_length_figure(reports: Sequence[dict], *, title: str | None = None) -> Figure:
    """The figure :func:`plot_bleu_by_length` writes."""
    if not reports:
        raise ValueError("reports must hold at least one evaluation report")
    fig = new_figure(6.4, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    buckets = [row["bucket"] for row in reports[0]["by_length"]]
    for rep in reports:
        rows = rep.get("by_length")
        if not rows:
            raise ValueError(f"report for {rep.get('model', '?')} has no 'by_length' rows")
        xs = [i for i, r in enumerate(rows) if r["n"] > 0 and r["bleu"] is not None]
        label = f"{rep.get('model_type', rep.get('model', '?'))} (BLEU {rep.get('bleu', float('nan')):.2f})"
        ax.plot(xs, [rows[i]["bleu"] for i in xs], marker="o", label=label)
    ns = [r["n"] for r in reports[0]["by_length"]]
    ax.set_xticks(range(len(buckets)))
    ax.set_xticklabels([f"{b}\n({n})" for b, n in zip(buckets, ns)], fontsize=8)
    ax.set_xlabel("source length in words (verses)")
    ax.set_ylabel("BLEU")
    ax.set_ylim(bottom=0)
    for i, n in enumerate(ns):
        if n == 0:  # no sentence of this length: no score
            ax.text(
                i, 0.02, "–", transform=ax.get_xaxis_transform(), ha="center", va="bottom", color="0.4", fontsize=14
            )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "BLEU by source sentence length (test split)", fontsize=10)
    return fig
