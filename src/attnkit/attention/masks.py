"""Mask builders and checks, with one convention everywhere.

**Polarity: ``True`` means "may attend".** This is the convention of
:func:`torch.nn.functional.scaled_dot_product_attention` and x-transformers. A mask broadcasts
to the score tensor ``(B, [H,] Nq, Nk)``; a padding mask over keys ``(B, Nk)`` becomes
``(B, 1, Nk)`` (or ``(B, 1, 1, Nk)`` with heads) through :func:`key_mask`.

``torch.nn.MultiheadAttention`` uses the opposite polarity (``True`` = "ignore") for its
``key_padding_mask`` and boolean ``attn_mask``; the only place that conversion happens is
:func:`to_torch_mha_mask` (and its inverse :func:`from_torch_mha_mask`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "causal_mask",
    "check_mask",
    "combine_masks",
    "from_torch_mha_mask",
    "key_mask",
    "padding_mask",
    "to_torch_mha_mask",
]


def padding_mask(lengths: Tensor | Sequence[int], max_len: int | None = None) -> Tensor:
    """Boolean ``(B, max_len)`` mask, ``True`` at positions ``< lengths[b]`` (the real tokens).

    ``max_len`` defaults to ``max(lengths)``. Lengths must be non-negative and at most ``max_len``.
    """
    if not isinstance(lengths, Tensor):
        lengths = torch.as_tensor(list(lengths), dtype=torch.long)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {tuple(lengths.shape)}")
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be an integer tensor, got dtype {lengths.dtype}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got min {int(lengths.min())}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is None:
        max_len = longest
    elif max_len < longest:
        raise ValueError(f"max_len={max_len} is shorter than the longest length {longest}")
    positions = torch.arange(max_len, device=lengths.device)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)  # (B, max_len)


def causal_mask(nq: int, nk: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """Boolean ``(Nq, Nk)`` mask letting query ``i`` attend keys ``j <= i + (Nk - Nq)``.

    With ``Nq == Nk`` this is the usual lower-triangular mask. With ``Nk > Nq`` the queries are
    the *last* ``Nq`` positions of the sequence (incremental decoding with a key/value cache).
    """
    nk = nq if nk is None else nk
    if nq < 0 or nk < 0:
        raise ValueError(f"nq and nk must be >= 0, got nq={nq}, nk={nk}")
    if nk < nq:
        raise ValueError(f"causal_mask needs nk >= nq (the queries are the last positions), got nq={nq}, nk={nk}")
    return torch.ones(nq, nk, dtype=torch.bool, device=device).tril(diagonal=nk - nq)


def key_mask(mask: Tensor, *, heads: bool = False) -> Tensor:
    """Turn a ``(B, Nk)`` key padding mask into one that broadcasts over queries (and heads).

    Returns ``(B, 1, Nk)``, or ``(B, 1, 1, Nk)`` with ``heads=True``.
    """
    if mask.dim() != 2:
        raise ValueError(f"key padding mask must be (B, Nk), got shape {tuple(mask.shape)}")
    mask = mask.unsqueeze(1)
    return mask.unsqueeze(1) if heads else mask


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the masks that are not ``None`` (broadcasting); ``None`` if all are."""
    out = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else (out & m)
    return out


def to_torch_mha_mask(mask: Tensor | None) -> Tensor | None:
    """Convert an attnkit mask (``True`` = may attend) to ``torch.nn.MultiheadAttention``'s
    boolean convention (``True`` = ignore). The one place where the polarity flips."""
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got dtype {mask.dtype}")
    return ~mask


def from_torch_mha_mask(mask: Tensor | None) -> Tensor | None:
    """Inverse of :func:`to_torch_mha_mask`: a torch MHA boolean mask (``True`` = ignore) or
    additive float mask (``-inf`` = ignore) to attnkit's ``True`` = may attend."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return ~mask
    if mask.is_floating_point():
        return ~torch.isneginf(mask)
    raise TypeError(f"mask must be bool or float, got dtype {mask.dtype}")


def check_mask(mask: Tensor, score_shape: Sequence[int], *, name: str = "mask") -> Tensor:
    """Check that ``mask`` is boolean and broadcasts to ``score_shape``; return it unchanged.

    ``score_shape`` is ``(B, Nq, Nk)`` or ``(B, H, Nq, Nk)``. Raises ``TypeError`` for a wrong
    dtype and ``ValueError`` naming the shapes when it does not broadcast.
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of dtype bool, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must have dtype torch.bool (True = may attend), got {mask.dtype}; "
            "for a torch.nn.MultiheadAttention-style mask use attnkit.attention.masks.from_torch_mha_mask"
        )
    expected = tuple(score_shape)
    ok = mask.dim() <= len(expected) and all(m in (1, s) for m, s in zip(reversed(mask.shape), reversed(expected)))
    if not ok:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores "
            f"{expected} (expected (B, [H,] Nq, Nk) with 1s where it broadcasts)"
        )
    return mask
