"""Attention rollout (Abnar & Zuidema 2020): how much each output position of a Transformer encoder
draws on each input token, through all the layers.

Each layer's head-averaged self-attention ``A_l (S, S)`` gets the identity added for the residual
connection and its rows renormalised, ``Â_l = rownorm(A_l + I)``; the rollout is their product from
the last layer down, ``R = Â_L · … · Â_1``, whose rows again sum to 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["attention_rollout", "residual_attention", "rollout_step"]


def residual_attention(attention: Tensor) -> Tensor:
    """``Â = rownorm(A + I)`` of ``attention (..., N, N)`` (one layer's, heads averaged, or a stack of layers):
    the attention with the residual connection's identity added and each row renormalised (for rows that sum
    to 1, ``½ (A + I)``): the edge weights that rollout multiplies and attention flow pushes through."""
    eye = torch.eye(attention.shape[-1], dtype=attention.dtype, device=attention.device)
    hat = attention + eye
    return hat / hat.sum(-1, keepdim=True)


def rollout_step(rollout: Tensor | None, attention: Tensor) -> Tensor:
    """``R_l = Â_l R_{l−1}``: the rollout through one more layer of ``attention (N, N)`` (heads averaged), from
    ``rollout`` through the layers below (None: none yet, ``R_0 = I``). One layer at a time, so a stream of
    layers never holds them all."""
    hat = residual_attention(attention)
    return hat if rollout is None else hat @ rollout.to(hat.dtype)


def attention_rollout(self_attention: Tensor) -> Tensor:
    """``(L, H, S, S)`` per-layer, per-head self-attention (or ``(L, S, S)`` already averaged) →
    ``(S, S)`` rollout (see the module docstring)."""
    if not isinstance(self_attention, Tensor) or self_attention.dim() not in (3, 4):
        raise ValueError(
            f"self_attention must be (L, H, S, S) or (L, S, S), got {getattr(self_attention, 'shape', None)}"
        )
    a = self_attention.mean(1) if self_attention.dim() == 4 else self_attention  # (L, S, S)
    if a.shape[-1] != a.shape[-2]:
        raise ValueError(f"self-attention maps must be square, got {tuple(a.shape)}")
    rollout = None
    for layer in a:  # first layer first: R_l = Â_l R_{l-1}
        rollout = rollout_step(rollout, layer)
    return rollout
