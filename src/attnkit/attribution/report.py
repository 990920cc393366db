"""An :class:`~attnkit.attribution.Attribution` for a terminal (a table of each target word's top sources)
and as a picture (a heatmap for translations, per-word overlays for captions): what ``attnkit explain`` prints."""

from __future__ import annotations

from pathlib import Path

from ..method_registry import REGISTRY
from .result import Attribution

__all__ = ["format_attribution", "plot_attribution"]


def _cell_name(index: int, grid: tuple[int, int]) -> str:
    return f"cell ({index // grid[1] + 1},{index % grid[1] + 1})"


def format_attribution(att: Attribution, *, k: int = 3, pieces: bool = False) -> str:
    """A heading (method, reference, time) and one line per target word (or piece): its ``k`` most
    important source words (or pieces, or grid cells) with their shares."""
    title, reference = REGISTRY[att.method].title, REGISTRY[att.method].reference
    took = f"{att.seconds:.2f} s" + (" with gradients" if att.needs_gradients else "")
    lines = [f"{att.method}: {title} ({reference}); {took}"]
    if att.extra.get("translation"):
        label = "forced target: " if att.extra.get("forced") else "translation: "
        if att.extra.get("kind") == "continuation":  # a decoder-only model's own continuation of the text
            label = "continuation: "
        lines.append(label + att.extra["translation"])
    if att.is_image:
        rows, cols, mat = att.target, [_cell_name(i, att.grid) for i in range(att.scores.shape[1])], att.scores
    elif pieces:
        rows, cols, mat = att.target, att.source, att.scores
    else:
        cols, rows, mat = att.word_scores()
    width = max([len("target"), *(len(r) for r in rows)])
    k = min(k, mat.shape[1])
    lines.append(f"{'target':<{width}} | top {k} sources (share)")
    lines.append("-" * (width + 1) + "+" + "-" * 40)
    for r, row in zip(rows, mat):
        top = row.topk(k)
        lines.append(
            f"{r:<{width}} | "
            + "   ".join(f"{cols[j]} {v:.2f}" for v, j in zip(top.values.tolist(), top.indices.tolist()))
        )
    delta = att.extra.get("convergence_delta")
    if delta:
        lines.append(
            f"integrated gradients: completeness gap max |Σ a − Δ| = {max(abs(d) for d in delta):.2g} nats; "
            f"quadrature points per piece {min(att.extra['steps'])}–{max(att.extra['steps'])}"
        )
    if "source_share" in att.extra:
        share = att.extra["source_share"]
        lines.append(f"ALTI+: the source's share of each target piece {min(share):.2f}–{max(share):.2f}")
    return "\n".join(lines)


def plot_attribution(att: Attribution, path: str | Path, *, pieces: bool = False) -> Path:
    """A translation's word (or piece) attribution heatmap, or a caption's per-word overlays, as a PNG."""
    title = f"{att.method} ({att.seconds:.2f} s)"
    if att.is_image:
        from ..viz import plot_caption_attention

        return plot_caption_attention(
            att.image[0], att.target, att.scores, path, grid_shape=att.grid, title=title, normalize="per_word"
        )
    from ..viz import plot_alignment

    if pieces:
        return plot_alignment(att.scores, att.source, att.target, path, title=title)
    src, tgt, words = att.word_scores()
    return plot_alignment(words, src, tgt, path, title=title)
