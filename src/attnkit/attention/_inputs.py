"""Argument checks shared by the attention layers: a tensor's rank and last size, and a key padding
mask made to broadcast; each error names the argument and the shape seen against the one expected."""

from __future__ import annotations

import torch
from torch import Tensor

from .masks import key_mask


def _check_last_dim(name: str, t: Tensor, expected: int, shape_hint: str) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.shape[-1] != expected:
        raise ValueError(f"{name} must have shape {shape_hint} with last size {expected}, got {tuple(t.shape)}")


def _check_rank(name: str, t: Tensor, ranks: tuple[int, ...], shape_hint: str) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() not in ranks:
        raise ValueError(f"{name} must have shape {shape_hint}, got {tuple(t.shape)} ({t.dim()}-D)")


def _padding_to_mask(key_padding_mask: Tensor | None, batch: int, nk: int, *, heads: bool) -> Tensor | None:
    """Validate a ``(B, Nk)`` key padding mask (``True`` = real key) and make it broadcast."""
    if key_padding_mask is None:
        return None
    if key_padding_mask.dtype != torch.bool:
        raise TypeError(f"key_padding_mask must be bool (True = real token), got dtype {key_padding_mask.dtype}")
    if tuple(key_padding_mask.shape) != (batch, nk):
        raise ValueError(
            f"key_padding_mask must have shape (B, Nk) = {(batch, nk)}, got {tuple(key_padding_mask.shape)}"
        )
    return key_mask(key_padding_mask, heads=heads)
