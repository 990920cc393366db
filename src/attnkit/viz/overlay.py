"""Caption attention over an image: the picture of Xu et al. (2015), Show, Attend and Tell, Fig. 2.

The original image comes first, then one panel per generated word showing where the soft
attention looked: the (h, w) grid of weights over CNN feature cells is upsampled to the
image size and blended over it.  An optional box per word (e.g. the ground-truth position of
the object the word names) is drawn on top, so a reader sees at a glance whether the model
looked at the right place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.patches import Rectangle

from ._common import DEFAULT_DPI, InchLayout, check_tokens, new_figure, save_png, tex_safe, to_numpy

__all__ = ["plot_caption_attention", "upsample_attention"]

_MODES = ("bilinear", "nearest")


def _check_size(size: Any, name: str) -> tuple[int, int]:
    try:
        a, b = (int(v) for v in size)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair of positive ints (h, w), got {size!r}") from None
    if a < 1 or b < 1:
        raise ValueError(f"{name} must be a pair of positive ints (h, w), got {size!r}")
    return a, b


def _attention_grid(alphas: Any, grid_shape: Any) -> np.ndarray:
    """Validate ``alphas`` ((T, h, w), or (T, L) with grid_shape (h, w)) and return (T, h, w)."""
    a = to_numpy(alphas, "alphas")
    if a.ndim == 3:
        if grid_shape is not None and tuple(_check_size(grid_shape, "grid_shape")) != a.shape[1:]:
            raise ValueError(
                f"alphas has shape {tuple(a.shape)} but grid_shape={tuple(grid_shape)}; "
                f"expected alphas of shape (T, {grid_shape[0]}, {grid_shape[1]})"
            )
        return a
    if a.ndim == 2:
        if grid_shape is None:
            raise ValueError(
                f"alphas has shape {tuple(a.shape)} (T, L): pass grid_shape=(h, w) with h * w == L == {a.shape[1]}"
            )
        h, w = _check_size(grid_shape, "grid_shape")
        if h * w != a.shape[1]:
            raise ValueError(
                f"alphas has shape {tuple(a.shape)} but grid_shape={(h, w)} gives h * w = {h * w}; expected L == h * w"
            )
        return a.reshape(a.shape[0], h, w)
    raise ValueError(f"alphas must have shape (T, h, w) or (T, L), got {tuple(a.shape)}")


def upsample_attention(
    alphas: Any, grid_shape: tuple[int, int] | None, size: tuple[int, int], mode: str = "bilinear"
) -> np.ndarray:
    """Upsample per-word attention grids to image resolution; returns float32 (T, H, W).

    ``alphas`` is (T, h, w), or (T, L) with ``grid_shape=(h, w)`` and L == h * w (the flat
    order of a CNN feature map, row-major).  ``size`` is the image's (H, W).  ``mode`` is
    ``"bilinear"`` (smooth, as in the paper's figures) or ``"nearest"`` (blocky, shows the
    true cell boundaries).  Uses ``torch.nn.functional.interpolate`` with align_corners=False,
    so cell (i, j) maps onto the image region [i*H/h, (i+1)*H/h) x [j*W/w, (j+1)*W/w).

    Each map is then rescaled so its mean equals the grid's mean: bilinear interpolation
    clamps at the borders and would otherwise inflate mass in edge cells, and keeping the
    mean makes the image-size map a density whose sum over a cell's region is that cell's
    weight times the pixels per cell.
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    grid = _attention_grid(alphas, grid_shape)
    H, W = _check_size(size, "size")
    t = torch.from_numpy(grid).to(torch.float64)[:, None]  # (T, 1, h, w)
    kw = {"align_corners": False} if mode == "bilinear" else {}
    up = F.interpolate(t, size=(H, W), mode=mode, **kw)[:, 0]
    src_mean = t.mean(dim=(-1, -2, -3))
    up_mean = up.mean(dim=(-1, -2))
    ok = up_mean.abs() > 1e-12
    scale = torch.where(ok, src_mean / torch.where(ok, up_mean, torch.ones_like(up_mean)), torch.ones_like(up_mean))
    return (up * scale[:, None, None]).to(torch.float32).numpy()


def _image_hwc(image: Any) -> np.ndarray:
    """Return ``image`` as float (H, W, 3) in [0, 1], from (H, W), (C, H, W) or (H, W, C)."""
    is_tensor = isinstance(image, torch.Tensor)
    integer = (
        image.dtype in (torch.uint8, torch.int16, torch.int32, torch.int64)
        if is_tensor
        else np.issubdtype(np.asarray(image).dtype, np.integer)
    )
    img = to_numpy(image, "image")
    if img.ndim == 3:
        chw = img.shape[0] in (1, 3, 4)
        hwc = img.shape[-1] in (1, 3, 4)
        if chw and (not hwc or is_tensor):  # torch images are channel-first by convention
            img = np.moveaxis(img, 0, -1)
        elif not hwc:
            raise ValueError(
                f"image has shape {tuple(img.shape)}; expected (H, W), (C, H, W) or (H, W, C) with C in 1, 3, 4"
            )
        img = img[..., :3]
        if img.shape[-1] == 1:
            img = img[..., 0]
    if img.ndim != 2 and img.ndim != 3:
        raise ValueError(f"image has shape {tuple(img.shape)}; expected (H, W), (C, H, W) or (H, W, C)")
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=-1)
    lo, hi = float(np.nanmin(img)), float(np.nanmax(img))
    if integer or (lo >= 0 and 1 < hi <= 255):
        img = img / 255.0
    elif lo < 0 or hi > 1:  # e.g. a mean/std-normalised tensor: stretch to [0, 1]
        img = (img - lo) / max(hi - lo, 1e-12)
    return np.clip(img, 0.0, 1.0)


def _check_boxes(boxes: Any, n: int) -> list:
    if boxes is None:
        return [None] * n
    if isinstance(boxes, (str, bytes)) or len(boxes) != n:
        raise ValueError(
            f"boxes must have one entry per word (len(words)={n}), "
            f"got {len(boxes) if hasattr(boxes, '__len__') else type(boxes).__name__}"
        )
    out = []
    for i, b in enumerate(boxes):
        if b is None:
            out.append(None)
            continue
        try:
            x0, y0, x1, y1 = (float(v) for v in b)
        except (TypeError, ValueError):
            raise ValueError(f"boxes[{i}] must be (x0, y0, x1, y1) or None, got {b!r}") from None
        out.append((x0, y0, x1, y1))
    return out


def plot_caption_attention(
    image: Any,
    words: Sequence[str],
    alphas: Any,
    path: Any,
    *,
    grid_shape: tuple[int, int] | None = None,
    boxes: Sequence[Any] | None = None,
    ncols: int = 5,
    upsample: str = "bilinear",
    cmap: str = "jet",
    alpha: float = 0.7,
    normalize: str = "shared",
    title: str | None = None,
    panel_size: float = 2.0,
    dpi: float = DEFAULT_DPI,
):
    """Draw the image, then one panel per word with its attention map blended over the image.

    ``image`` is (H, W), (C, H, W) or (H, W, C) (uint8 or float; torch tensors are read
    channel-first when ambiguous).  ``alphas`` is (T, h, w), or (T, L) with ``grid_shape``;
    T must equal ``len(words)``.  Each map is upsampled with :func:`upsample_attention`
    (``upsample="bilinear"`` or ``"nearest"``) and coloured with ``cmap``; its opacity grows
    with the weight (up to ``alpha``), so unattended parts of the image stay visible.  With
    ``normalize="shared"`` all maps use one scale (the largest weight of any word), so a
    diffuse map looks diffuse; ``"per_word"`` scales each map to its own peak instead.  ``boxes``, if given, holds one
    ``(x0, y0, x1, y1)`` pixel box (or None) per word, drawn as an outline: the ground-truth
    region the word refers to.  Panels flow ``ncols`` per row.

    Returns ``path``; raises ValueError naming ``alphas``/``words``/``boxes`` on bad shapes.
    """
    words = check_tokens(words, "words")
    img = _image_hwc(image)
    grid = _attention_grid(alphas, grid_shape)
    if grid.shape[0] != len(words):
        raise ValueError(
            f"alphas has shape {tuple(to_numpy(alphas, 'alphas').shape)} with "
            f"T={grid.shape[0]} maps but len(words)={len(words)}; expected T == len(words)"
        )
    if isinstance(ncols, bool) or not isinstance(ncols, (int, np.integer)) or ncols < 1:
        raise ValueError(f"ncols must be a positive int, got {ncols!r}")
    box_list = _check_boxes(boxes, len(words))
    if normalize not in ("shared", "per_word"):
        raise ValueError(f"normalize must be 'shared' or 'per_word', got {normalize!r}")
    H, W = img.shape[:2]
    maps = upsample_attention(grid, None, (H, W), upsample)
    if normalize == "shared":
        maps = maps / max(float(maps.max()), 1e-12)
    else:
        maps = maps / np.maximum(maps.max(axis=(1, 2), keepdims=True), 1e-12)
    maps = np.clip(maps, 0.0, 1.0)
    colormap = matplotlib.colormaps[cmap]

    n = len(words) + 1
    ncols = min(int(ncols), n)
    nrows = -(-n // ncols)
    pw = float(panel_size)
    ph = pw * H / W
    title_h, gap, margin = 0.32, 0.12, 0.08
    sup_h = 0.4 if title else 0.0
    fig = new_figure(
        2 * margin + ncols * pw + (ncols - 1) * gap, 2 * margin + sup_h + nrows * (ph + title_h) + (nrows - 1) * gap
    )
    lay = InchLayout(fig)
    if title:
        lay.text(lay.W / 2, margin, tex_safe(title), ha="center", va="top", fontsize=13, fontweight="bold")
    extent = (-0.5, W - 0.5, H - 0.5, -0.5)  # pixel-centre coordinates, so boxes line up
    for i in range(n):
        r, c = divmod(i, ncols)
        ax = lay.add_axes(margin + c * (pw + gap), margin + sup_h + r * (ph + title_h + gap) + title_h, pw, ph)
        ax.imshow(img, extent=extent, interpolation="nearest" if max(H, W) < 128 else "antialiased")
        ax.set_axis_off()
        if i == 0:
            ax.set_title("image", fontsize=11, fontstyle="italic", pad=4)
            continue
        rgba = colormap(maps[i - 1])
        rgba[..., 3] = alpha * np.sqrt(maps[i - 1])  # sqrt: weak-but-real attention still shows
        ax.imshow(rgba, extent=extent, interpolation="nearest")
        ax.set_title(tex_safe(words[i - 1]), fontsize=11, pad=4)
        b = box_list[i - 1]
        if b is not None:
            x0, y0, x1, y1 = b
            ax.add_patch(
                Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, edgecolor="white", linewidth=2.2)
            )
            ax.add_patch(
                Rectangle(
                    (x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, edgecolor="black", linewidth=0.8, linestyle="--"
                )
            )
    return save_png(fig, path, dpi)
