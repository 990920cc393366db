"""Alignment heatmaps: the picture of Bahdanau et al. (2015), Figure 3.

Source words run along the top (rotated), target words down the left, one square cell per
(target, source) pair, darker for more weight.  Reading a row shows where the decoder looked
while emitting that target word; a near-diagonal band with local swaps (e.g. adjective-noun
order) is what a working attention model looks like.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._common import (
    DEFAULT_DPI,
    InchLayout,
    check_tokens,
    color_limits,
    new_figure,
    save_png,
    squeeze_leading,
    tex_safe,
    text_width_in,
    to_numpy,
)

__all__ = ["format_top_alignments", "plot_alignment", "plot_alignments"]

_TICK_PAD = 0.06  # inches between a tick label and the grid
_CBAR_PAD = 0.12  # inches between grid and colour bar
_CBAR_W = 0.14  # colour bar width
_CBAR_LABELS = 0.36  # room for the colour bar's tick labels
_MARGIN = 0.1


def _check_alignment(
    weights: Any, src_tokens: Any, tgt_tokens: Any, name: str = "weights"
) -> tuple[np.ndarray, list[str], list[str]]:
    """Validate a (T_tgt, T_src) weight matrix against its token lists."""
    src = check_tokens(src_tokens, "src_tokens")
    tgt = check_tokens(tgt_tokens, "tgt_tokens")
    w = squeeze_leading(to_numpy(weights, name), 2)
    if w.ndim != 2 or w.shape != (len(tgt), len(src)):
        raise ValueError(
            f"{name} has shape {tuple(w.shape)} but len(tgt_tokens)={len(tgt)} and "
            f"len(src_tokens)={len(src)}; expected (len(tgt_tokens), len(src_tokens)) = "
            f"({len(tgt)}, {len(src)})"
        )
    return w, src, tgt


@dataclass
class PanelGeometry:
    """Inch geometry of one alignment panel (title, labels, grid, colour bar)."""

    cell: float
    fontsize: float
    title_h: float
    top_labels: float
    left_labels: float
    grid_w: float
    grid_h: float

    @property
    def width(self) -> float:
        return self.left_labels + self.grid_w + _CBAR_PAD + _CBAR_W + _CBAR_LABELS

    @property
    def height(self) -> float:
        return self.title_h + self.top_labels + self.grid_h + _MARGIN


def panel_geometry(src: list[str], tgt: list[str], title: str | None) -> PanelGeometry:
    n = max(len(src), len(tgt), 1)
    # Square cells: large for short sentences, shrinking (down to a floor) for long ones so
    # an 80-word verse is still one readable picture.  Labels scale with the cell.
    cell = float(np.clip(12.0 / n, 0.17, 0.34))
    fontsize = float(np.clip(cell * 72 * 0.5, 5.5, 10.0))
    title_h = (fontsize + 2) * 2.0 / 72 if title else 0.0
    return PanelGeometry(
        cell=cell,
        fontsize=fontsize,
        title_h=title_h,
        top_labels=text_width_in(src, fontsize) + _TICK_PAD + 0.04,
        left_labels=text_width_in(tgt, fontsize) + _TICK_PAD + 0.04,
        grid_w=cell * max(len(src), 1),
        grid_h=cell * max(len(tgt), 1),
    )


def draw_alignment(
    lay: InchLayout,
    x: float,
    y: float,
    geo: PanelGeometry,
    w: np.ndarray,
    src: list[str],
    tgt: list[str],
    title: str | None,
    cmap: str,
    vmin: float | None,
    vmax: float | None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    gold: tuple | None = None,
) -> None:
    """Draw one alignment panel with its top-left corner at (x, y) inches."""
    lo, hi = color_limits(w, vmin, vmax)
    gx, gy = x + geo.left_labels, y + geo.title_h + geo.top_labels
    ax = lay.add_axes(gx, gy, geo.grid_w, geo.grid_h)
    im = ax.imshow(w, cmap=cmap, vmin=lo, vmax=hi, aspect="auto", interpolation="nearest")
    fs = geo.fontsize
    ax.xaxis.tick_top()
    ax.set_xticks(range(len(src)), [tex_safe(s) for s in src], rotation=90, fontsize=fs)
    ax.set_yticks(range(len(tgt)), [tex_safe(t) for t in tgt], fontsize=fs)
    ax.tick_params(length=0, pad=_TICK_PAD * 72)
    # Thin white lines between cells make individual pairs easy to pick out.
    ax.set_xticks(np.arange(-0.5, len(src), 1), minor=True)
    ax.set_yticks(np.arange(-0.5, len(tgt), 1), minor=True)
    if max(len(src), len(tgt)) <= 60:
        ax.grid(which="minor", color="white", linewidth=0.4, alpha=0.6)
    ax.tick_params(which="minor", length=0)
    if gold is not None:  # gold links (source, target): sure as squares, possible-only as dots
        sure, possible = set(gold[0]), set(gold[1]) - set(gold[0])
        if sure:
            ax.scatter(
                [i for i, _ in sure],
                [j for _, j in sure],
                marker="s",
                s=40,
                facecolors="none",
                edgecolors="#d62728",
                linewidths=1.2,
                label="sure",
            )
        if possible:
            ax.scatter(
                [i for i, _ in possible], [j for _, j in possible], marker="o", s=10, color="#ff7f0e", label="possible"
            )
        ax.set_xlim(-0.5, len(src) - 0.5)
        ax.set_ylim(len(tgt) - 0.5, -0.5)
    for side in ax.spines.values():
        side.set_linewidth(0.6)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=fs)
        ax.xaxis.set_label_position("top")
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=fs)
    cax = lay.add_axes(gx + geo.grid_w + _CBAR_PAD, gy, _CBAR_W, min(geo.grid_h, 3.0))
    cb = lay.fig.colorbar(im, cax=cax)
    cb.ax.tick_params(labelsize=min(fs, 8), length=2)
    cb.outline.set_linewidth(0.5)
    if title:
        lay.text(
            x + geo.left_labels + geo.grid_w / 2,
            y + geo.title_h * 0.3,
            tex_safe(title),
            ha="center",
            va="top",
            fontsize=fs + 2,
            fontweight="bold",
        )


def plot_alignment(
    weights: Any,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    path: Any,
    *,
    title: str | None = None,
    cmap: str = "gray_r",
    vmin: float | None = None,
    vmax: float | None = None,
    dpi: float = DEFAULT_DPI,
    sure=None,
    possible=None,
):
    """Draw a (T_tgt, T_src) attention matrix as an alignment heatmap and write it as a PNG.

    ``sure`` / ``possible``: gold links ``(source index, target index)`` drawn over the cells
    (sure as red squares, possible-only as orange dots), to compare attention with a gold standard.

    Source tokens label the top x axis (rotated 90 degrees), target tokens the y axis, with
    one square cell per pair and a colour bar; the figure size follows the token counts, so a
    long source sentence gives a wide picture.  The colour scale is [0, 1] when all weights
    lie in it (so pictures of different sentences compare), else the data range, unless
    ``vmin``/``vmax`` are given.  A leading batch dimension of size 1 is dropped.

    Returns ``path`` as a ``pathlib.Path``; parent folders are created.
    Raises ValueError if ``weights`` is not (len(tgt_tokens), len(src_tokens)).
    """
    w, src, tgt = _check_alignment(weights, src_tokens, tgt_tokens)
    geo = panel_geometry(src, tgt, title)
    fig = new_figure(geo.width + 2 * _MARGIN, geo.height + _MARGIN)
    gold = None if sure is None and possible is None else (sure or set(), (possible or set()) | (sure or set()))
    draw_alignment(InchLayout(fig), _MARGIN, _MARGIN, geo, w, src, tgt, title, cmap, vmin, vmax, gold=gold)
    return save_png(fig, path, dpi)


def plot_alignments(
    items: Sequence[Sequence[Any]],
    path: Any,
    ncols: int = 2,
    *,
    cmap: str = "gray_r",
    vmin: float | None = None,
    vmax: float | None = None,
    dpi: float = DEFAULT_DPI,
):
    """Draw several alignment heatmaps (one per sentence) into one PNG, ``ncols`` per row.

    ``items`` is a list of ``(weights, src_tokens, tgt_tokens, title)`` tuples (``title`` may
    be None or left off).  Each panel keeps its own square-cell size, so a long sentence is
    not squeezed to fit a short one; columns and rows take the size of their largest panel.
    Returns ``path``; raises ValueError naming ``items[i]`` when an entry's shape is wrong.
    """
    if isinstance(ncols, bool) or not isinstance(ncols, (int, np.integer)) or ncols < 1:
        raise ValueError(f"ncols must be a positive int, got {ncols!r}")
    if isinstance(items, (str, bytes)) or not hasattr(items, "__len__") or len(items) == 0:
        raise ValueError("items must be a non-empty list of (weights, src_tokens, tgt_tokens, title)")
    panels = []
    for i, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) not in (3, 4):
            raise ValueError(
                f"items[{i}] must be a (weights, src_tokens, tgt_tokens[, title]) "
                f"tuple, got {type(item).__name__} of length "
                f"{len(item) if hasattr(item, '__len__') else '?'}"
            )
        title = item[3] if len(item) == 4 else None
        w, src, tgt = _check_alignment(item[0], item[1], item[2], name=f"items[{i}] weights")
        panels.append((w, src, tgt, title, panel_geometry(src, tgt, title)))
    ncols = min(int(ncols), len(panels))
    nrows = -(-len(panels) // ncols)
    gap = 0.3
    col_w = [max(p[4].width for p in panels[c::ncols]) for c in range(ncols)]
    row_h = [max(p[4].height for p in panels[r * ncols : (r + 1) * ncols]) for r in range(nrows)]
    fig = new_figure(sum(col_w) + gap * (ncols - 1) + 2 * _MARGIN, sum(row_h) + gap * (nrows - 1) + 2 * _MARGIN)
    lay = InchLayout(fig)
    for i, (w, src, tgt, title, geo) in enumerate(panels):
        r, c = divmod(i, ncols)
        x = _MARGIN + sum(col_w[:c]) + gap * c
        y = _MARGIN + sum(row_h[:r]) + gap * r
        draw_alignment(lay, x, y, geo, w, src, tgt, title, cmap, vmin, vmax)
    return save_png(fig, path, dpi)


def format_top_alignments(weights: Any, src_tokens: Sequence[str], tgt_tokens: Sequence[str], k: int = 3) -> str:
    """Return a text table: for each target token, its top-``k`` source tokens with weights.

    Meant for a terminal (``--show-attention``), where a heatmap cannot be shown.  Ties are
    broken by source position; ``k`` is capped at the number of source tokens.  Example::

        target  | top 2 source (weight)
        --------+----------------------------
        God     | Dios 0.91    En 0.03
    """
    w, src, tgt = _check_alignment(weights, src_tokens, tgt_tokens)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    k = min(int(k), len(src))
    header_t = "target"
    header_s = f"top {k} source (weight)"
    rows: list[list[str]] = []
    for row in w:
        order = np.argsort(-row, kind="stable")[:k]
        rows.append([f"{src[j]} {row[j]:.2f}" for j in order])
    col_w = [max((len(r[c]) for r in rows), default=0) for c in range(k)]
    tw = max([len(header_t)] + [len(t) for t in tgt])
    lines = [f"{header_t:<{tw}} | {header_s}"]
    body = ["   ".join(cell.ljust(col_w[c]) for c, cell in enumerate(r)).rstrip() for r in rows]
    lines.append("-" * (tw + 1) + "+" + "-" * (max([len(header_s)] + [len(b) for b in body]) + 1))
    lines += [f"{t:<{tw}} | {b}" for t, b in zip(tgt, body)]
    return "\n".join(lines)
