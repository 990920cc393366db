"""Shared helpers for the viz package: array conversion, token checks, text sizing, saving.

Every figure here is built on a bare ``matplotlib.figure.Figure`` (never pyplot), so no GUI
backend is ever touched and no global figure state leaks between calls; saving goes through
the Agg canvas.  Layouts are computed in inches from measured label sizes, so cells stay
square and tick labels never overlap, whatever the token counts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import text_to_path

from ..paths import atomic_writer

DEFAULT_DPI = 120


def to_numpy(x: Any, name: str) -> np.ndarray:
    """Convert a torch tensor, numpy array or nested list to a float64 numpy array.

    Tensors are detached and moved to the CPU first, so weights straight out of a model work.
    """
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return x.detach().to("cpu", torch.float64).numpy()
    except ImportError:  # pragma: no cover - torch is a hard dependency, but viz need not be
        pass
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"{name} must be a torch.Tensor or numpy array of numbers, got {type(x).__name__}: {e}"
        ) from None
    return arr


def squeeze_leading(arr: np.ndarray, ndim: int) -> np.ndarray:
    """Drop leading size-1 dims (a batch of one) until ``arr`` has ``ndim`` dims."""
    while arr.ndim > ndim and arr.shape[0] == 1:
        arr = arr[0]
    return arr


def check_tokens(tokens: Any, name: str) -> list[str]:
    """Return ``tokens`` as a list of str; reject a bare string (a common slip for a token list)."""
    if isinstance(tokens, (str, bytes)):
        raise TypeError(
            f"{name} must be a list of tokens, not a single string (did you mean {name}={str(tokens).split()!r}?)"
        )
    try:
        return [str(t) for t in tokens]
    except TypeError:
        raise TypeError(f"{name} must be a list of str, got {type(tokens).__name__}") from None


def tex_safe(s: str) -> str:
    """Escape ``$`` so a token such as ``$5`` is drawn literally, not parsed as mathtext."""
    return s.replace("$", r"\$")


def text_width_in(strings: Sequence[str], fontsize: float) -> float:
    """Width in inches of the widest of ``strings`` at ``fontsize`` (0 for none)."""
    if not strings:
        return 0.0
    prop = FontProperties(size=fontsize)
    widest = 0.0
    for s in set(strings):
        w, _, _ = text_to_path.get_text_width_height_descent(tex_safe(s) or " ", prop, ismath=False)
        widest = max(widest, w)
    return widest / 72.0


def prepare_path(path: Any) -> Path:
    """Return ``path`` as a Path, creating its parent folders."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def new_figure(width_in: float, height_in: float) -> Figure:
    """A white figure of the given size in inches, attached to an Agg canvas (no display)."""
    fig = Figure(figsize=(max(width_in, 0.5), max(height_in, 0.5)), facecolor="white")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: Any, dpi: float) -> Path:
    """Write ``fig`` as a PNG to ``path`` (parents created), atomically (:func:`attnkit.paths.atomic_writer`),
    and return the path.

    The dpi is lowered for very large figures so the PNG stays under ~8000 px a side.
    """
    p = prepare_path(path)
    w, h = fig.get_size_inches()
    dpi = min(float(dpi), 8000.0 / max(w, h, 1e-6))
    with atomic_writer(p) as f:  # a picture appears whole, or an earlier one of that name is kept
        fig.savefig(f, format="png", dpi=dpi, facecolor="white", bbox_inches="tight", pad_inches=0.08)
    return p


def color_limits(arr: np.ndarray, vmin: float | None, vmax: float | None) -> tuple[float, float]:
    """Colour limits: [0, 1] for probabilities (so figures compare), else the data range."""
    finite = arr[np.isfinite(arr)]
    lo = float(finite.min()) if finite.size else 0.0
    hi = float(finite.max()) if finite.size else 1.0
    if vmin is None:
        vmin = 0.0 if lo >= 0.0 else lo
    if vmax is None:
        vmax = 1.0 if (lo >= 0.0 and hi <= 1.0) else hi
    if vmax <= vmin:
        vmax = vmin + 1.0
    return vmin, vmax


class InchLayout:
    """Place axes on a figure by inch offsets from its top-left corner."""

    def __init__(self, fig: Figure):
        self.fig = fig
        self.W, self.H = fig.get_size_inches()

    def add_axes(self, x: float, y: float, w: float, h: float):
        return self.fig.add_axes((x / self.W, 1.0 - (y + h) / self.H, w / self.W, h / self.H))

    def text(self, x: float, y: float, s: str, **kw):
        return self.fig.text(x / self.W, 1.0 - y / self.H, s, **kw)
