"""Per-layer, per-head attention maps for multi-head models (Vaswani et al. 2017).

A grid with one row per layer and one column per head shows how heads specialise (previous
token, diagonal, a few "anchor" tokens...).  Rows and columns are labelled with layer and
head numbers counting from 1 (``layer 1``, ``head 1``), as everywhere a user sees them.
``plot_transformer_heads`` stacks the three kinds a Transformer has (encoder self-attention,
decoder self-attention, cross-attention) in one PNG and ends with the head-averaged
cross-attention as an alignment, the Transformer's counterpart of Bahdanau's Figure 3.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np

from ._common import (
    DEFAULT_DPI,
    InchLayout,
    check_tokens,
    new_figure,
    save_png,
    squeeze_leading,
    tex_safe,
    text_width_in,
    to_numpy,
)
from .heatmap import draw_alignment, panel_geometry

__all__ = ["MAX_LABELLED_TOKENS", "plot_heads", "plot_transformer_heads"]

MAX_LABELLED_TOKENS = 40  # above this many tokens, tick labels would be unreadable: drop them
_GAP = 0.07  # inches between panels of one block
_MARGIN = 0.1
_BLOCK_GAP = 0.3
_CBAR_W, _CBAR_PAD, _CBAR_LABELS = 0.12, 0.12, 0.4


def _layers(attn: Any, name: str) -> list[tuple[str, np.ndarray]]:
    """Normalise the accepted inputs to a list of (row label, (H, Tq, Tk) array).

    Accepted: an (L, H, Tq, Tk) or (H, Tq, Tk) tensor/array; a list/tuple with one
    (H, Tq, Tk) per layer; a dict mapping a name to (H, Tq, Tk) (one row) or (L, H, Tq, Tk)
    (one row per layer, labelled ``name i``, ``i`` from 1).  Rows of a tensor or list are labelled
    ``layer 1`` … ``layer L``.  A leading batch of size 1 is dropped.
    """

    def arr(x: Any, label: str) -> np.ndarray:
        a = squeeze_leading(to_numpy(x, label), 3)
        return a

    def expected(a: np.ndarray, label: str) -> ValueError:
        return ValueError(f"{label} has shape {tuple(a.shape)}; expected (H, Tq, Tk) per layer or (L, H, Tq, Tk)")

    rows: list[tuple[str, np.ndarray]] = []
    if isinstance(attn, Mapping):
        if not attn:
            raise ValueError(f"{name} is an empty dict")
        for key, val in attn.items():
            label = f"{name}[{key!r}]"
            a = squeeze_leading(to_numpy(val, label), 4)
            if a.ndim == 3:
                rows.append((str(key), a))
            elif a.ndim == 4:
                rows += [(f"{key} {i + 1}", a[i]) for i in range(a.shape[0])]
            else:
                raise expected(a, label)
    elif isinstance(attn, (list, tuple)):
        if not attn:
            raise ValueError(f"{name} is an empty list")
        for i, val in enumerate(attn):
            a = arr(val, f"{name}[{i}]")
            if a.ndim != 3:
                raise expected(a, f"{name}[{i}]")
            rows.append((f"layer {i + 1}", a))
    else:
        a = squeeze_leading(to_numpy(attn, name), 4)
        if a.ndim == 3:
            a = a[None]
        if a.ndim != 4:
            raise expected(a, name)
        rows = [(f"layer {i + 1}", a[i]) for i in range(a.shape[0])]
    tq, tk = rows[0][1].shape[1:]
    for label, a in rows:
        if a.shape[1:] != (tq, tk):
            raise ValueError(
                f"{name}: every layer must have the same (Tq, Tk); {label} has shape "
                f"{tuple(a.shape)} but the first layer has (H, {tq}, {tk})"
            )
    return rows


def _check_len(tokens: Any, n: int, tok_name: str, attn_name: str, axis: str, shape: tuple) -> list[str] | None:
    if tokens is None:
        return None
    toks = check_tokens(tokens, tok_name)
    if len(toks) != n:
        raise ValueError(
            f"{attn_name} has per-layer shape {shape} (H, Tq, Tk) but "
            f"len({tok_name})={len(toks)}; expected {axis} == {len(toks)}"
        )
    return toks


@dataclass
class _Block:
    title: str | None
    rows: list[tuple[str, np.ndarray]]
    q: list[str] | None
    k: list[str] | None
    labelled: bool
    fs: float
    pw: float
    ph: float
    title_h: float
    head_h: float
    bottom: float
    left: float
    head_titles: list[str] | None = None  # the column titles; default "head 1", "head 2"...

    @property
    def ncols(self) -> int:
        return max(a.shape[0] for _, a in self.rows)

    @property
    def grid_w(self) -> float:
        return self.ncols * self.pw + (self.ncols - 1) * _GAP

    @property
    def height(self) -> float:
        n = len(self.rows)
        return self.title_h + self.head_h + n * self.ph + (n - 1) * _GAP + self.bottom

    @property
    def right(self) -> float:
        return _CBAR_PAD + _CBAR_W + _CBAR_LABELS


def _block(rows, q, k, title) -> _Block:
    tq, tk = rows[0][1].shape[1:]
    n = max(tq, tk)
    labelled = q is not None and k is not None and n <= MAX_LABELLED_TOKENS
    fs = 8.0 if n <= 12 else 7.0 if n <= 24 else 5.5
    if labelled:
        cell = fs * 1.35 / 72  # one text line per cell: labels never overlap
        pw, ph = max(tk * cell, 0.5), max(tq * cell, 0.5)
    else:
        side = 1.5
        pw, ph = max(side * tk / n, 0.35), max(side * tq / n, 0.35)
    row_label_w = (fs + 1) * 1.8 / 72
    left = row_label_w + (text_width_in(q, fs) + 0.06 if labelled else 0.0)
    bottom = text_width_in(k, fs) + 0.08 if labelled else 0.0
    return _Block(
        title=title,
        rows=rows,
        q=q,
        k=k,
        labelled=labelled,
        fs=fs,
        pw=pw,
        ph=ph,
        title_h=0.34 if title else 0.0,
        head_h=(fs + 1) * 1.7 / 72,
        bottom=bottom,
        left=left,
    )


def _draw_block(lay: InchLayout, x_grid: float, y: float, b: _Block, cmap: str) -> None:
    """Draw block ``b`` with its panel grid starting at x_grid inches, its top at y."""
    data = np.concatenate([a.reshape(-1) for _, a in b.rows])
    finite = data[np.isfinite(data)]
    vmin = min(0.0, float(finite.min())) if finite.size else 0.0
    vmax = float(finite.max()) if finite.size else 1.0
    vmax = vmax if vmax > vmin else vmin + 1.0
    if b.title:
        lay.text(
            x_grid + b.grid_w / 2, y + 0.06, tex_safe(b.title), ha="center", va="top", fontsize=11, fontweight="bold"
        )
    top = y + b.title_h + b.head_h
    im = None
    last = len(b.rows) - 1
    for r, (label, a) in enumerate(b.rows):
        for h in range(a.shape[0]):
            ax = lay.add_axes(x_grid + h * (b.pw + _GAP), top + r * (b.ph + _GAP), b.pw, b.ph)
            im = ax.imshow(a[h], cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
            ax.tick_params(length=0, labelsize=b.fs, pad=2)
            if b.labelled and h == 0:
                ax.set_yticks(range(len(b.q)), [tex_safe(t) for t in b.q])
            else:
                ax.set_yticks([])
            if b.labelled and r == last:
                ax.set_xticks(range(len(b.k)), [tex_safe(t) for t in b.k], rotation=90)
            else:
                ax.set_xticks([])
            if h == 0:
                ax.set_ylabel(tex_safe(label), fontsize=b.fs + 1)
            if r == 0:
                ax.set_title(b.head_titles[h] if b.head_titles else f"head {h + 1}", fontsize=b.fs + 1, pad=3)
            for s in ax.spines.values():
                s.set_linewidth(0.5)
    grid_h = len(b.rows) * b.ph + (len(b.rows) - 1) * _GAP
    cax = lay.add_axes(x_grid + b.grid_w + _CBAR_PAD, top, _CBAR_W, min(grid_h, 2.5))
    cb = lay.fig.colorbar(im, cax=cax)
    cb.ax.tick_params(labelsize=7, length=2)
    cb.outline.set_linewidth(0.5)


def _render(blocks: list[_Block], path: Any, cmap: str, dpi: float, title: str | None, alignment: tuple | None = None):
    left = max(b.left for b in blocks)
    width = max(left + b.grid_w + b.right for b in blocks)
    sup_h = 0.45 if title else 0.0
    height = sup_h + sum(b.height for b in blocks) + _BLOCK_GAP * (len(blocks) - 1)
    if alignment is not None:
        w, src, tgt, a_title = alignment
        geo = panel_geometry(src, tgt, a_title)
        width = max(width, geo.width)
        height += _BLOCK_GAP + geo.height
    fig = new_figure(width + 2 * _MARGIN, height + 2 * _MARGIN)
    lay = InchLayout(fig)
    y = _MARGIN
    if title:
        lay.text((width + 2 * _MARGIN) / 2, y, tex_safe(title), ha="center", va="top", fontsize=13, fontweight="bold")
        y += sup_h
    for b in blocks:
        _draw_block(lay, _MARGIN + left, y, b, cmap)
        y += b.height + _BLOCK_GAP
    if alignment is not None:
        x = _MARGIN + max(0.0, left + blocks[0].grid_w / 2 - (geo.left_labels + geo.grid_w / 2)) if blocks else _MARGIN
        x = min(x, _MARGIN + width - geo.width)
        draw_alignment(lay, max(x, _MARGIN), y, geo, w, src, tgt, a_title, cmap, 0.0, None)
    return save_png(fig, path, dpi)


def plot_heads(
    attn: Any,
    path: Any,
    *,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    title: str | None = None,
    cmap: str = "viridis",
    dpi: float = DEFAULT_DPI,
    kv_groups: Sequence[int] | None = None,
):
    """Draw a grid of attention maps, one row per layer and one column per head, as a PNG.

    ``attn`` is an (L, H, Tq, Tk) (or single-layer (H, Tq, Tk)) tensor/array, a list with one
    (H, Tq, Tk) per layer, or a dict mapping a row name to (H, Tq, Tk) or (L, H, Tq, Tk).
    Queries run down each map, keys across.  ``query_tokens``/``key_tokens`` label the first
    column's rows and the last row's columns when both are given and the maps have at most
    ``MAX_LABELLED_TOKENS`` (40) tokens; beyond that labels are dropped (they would overlap).
    All maps share one colour scale, from 0 to the largest weight, so heads compare.
    ``kv_groups``: each head's key/value group (1-based) under grouped-query attention; the column
    titles then read ``head 3 · kv 2``.

    Returns ``path``; raises ValueError naming ``attn`` or the token list on shape mismatch.
    """
    rows = _layers(attn, "attn")
    h, tq, tk = rows[0][1].shape
    q = _check_len(query_tokens, tq, "query_tokens", "attn", "Tq", (h, tq, tk))
    k = _check_len(key_tokens, tk, "key_tokens", "attn", "Tk", (h, tq, tk))
    block = _block(rows, q, k, None)
    if kv_groups is not None:
        groups = list(kv_groups)
        if len(groups) != block.ncols or any(isinstance(g, bool) or not isinstance(g, Integral) for g in groups):
            raise ValueError(f"kv_groups must hold one int group number per head ({block.ncols}), got {groups!r}")
        block.head_titles = [f"head {i + 1} · kv {g}" for i, g in enumerate(groups)]
    return _render([block], path, cmap, dpi, title)


def plot_transformer_heads(
    enc_self: Any,
    dec_self: Any,
    cross: Any,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    path: Any,
    *,
    title: str | None = None,
    alignment_layer: int | None = -1,
    cmap: str = "viridis",
    dpi: float = DEFAULT_DPI,
):
    """Draw a Transformer's attention in one PNG: encoder self, decoder self, cross, alignment.

    ``enc_self`` is (L, H, S, S), ``dec_self`` (L, H, T, T), ``cross`` (L, H, T, S) (or any
    form :func:`plot_heads` accepts), with S = len(src_tokens) and T = len(tgt_tokens); any of
    them may be None to leave that block out.  The last panel is the cross-attention of layer
    ``alignment_layer`` averaged over heads, drawn as an alignment heatmap with source words on
    top and target words down the side: a layer number ``1..L`` (1-based, as the picture's
    labels), or a negative one counting from the last (``-1``, the default: the last layer);
    ``None``: averaged over all layers too.

    Returns ``path``; raises ValueError naming the offending argument on shape mismatch.
    """
    src = check_tokens(src_tokens, "src_tokens")
    tgt = check_tokens(tgt_tokens, "tgt_tokens")
    specs = [
        ("enc_self", enc_self, src, src, "encoder self-attention"),
        ("dec_self", dec_self, tgt, tgt, "decoder self-attention"),
        ("cross", cross, tgt, src, "cross-attention (decoder → encoder)"),
    ]
    blocks, cross_rows = [], None
    for name, attn, q, k, label in specs:
        if attn is None:
            continue
        rows = _layers(attn, name)
        h, tq, tk = rows[0][1].shape
        if (tq, tk) != (len(q), len(k)):
            qn, kn = (
                ("src_tokens", "src_tokens")
                if name == "enc_self"
                else ("tgt_tokens", "tgt_tokens")
                if name == "dec_self"
                else ("tgt_tokens", "src_tokens")
            )
            raise ValueError(
                f"{name} has per-layer shape {(h, tq, tk)} (H, Tq, Tk) but "
                f"len({qn})={len(q)} and len({kn})={len(k)}; expected "
                f"(H, {len(q)}, {len(k)})"
            )
        blocks.append(_block(rows, q, k, label))
        if name == "cross":
            cross_rows = rows
    if not blocks:
        raise ValueError("enc_self, dec_self and cross are all None; nothing to draw")
    alignment = None
    if cross_rows is not None:
        if alignment_layer is None:
            w = np.mean([a.mean(axis=0) for _, a in cross_rows], axis=0)
            a_title = f"cross-attention, mean over {len(cross_rows)} layers and heads"
        else:
            n = len(cross_rows)
            if (
                not isinstance(alignment_layer, (int, np.integer))
                or isinstance(alignment_layer, bool)
                or alignment_layer == 0
                or not -n <= alignment_layer <= n
            ):
                raise ValueError(
                    f"alignment_layer must be a layer number in 1..{n} (cross has {n} layers), "
                    f"a negative one from the last (-1..-{n}), or None; got {alignment_layer!r}"
                )
            # a layer number counts from 1; a negative one is already a Python index from the end
            label, a = cross_rows[alignment_layer - 1 if alignment_layer > 0 else alignment_layer]
            w = a.mean(axis=0)
            a_title = f"cross-attention, {label}, mean over {a.shape[0]} heads"
        alignment = (w, src, tgt, a_title)
    return _render(blocks, path, cmap, dpi, title, alignment)
