"""Attention rollout (Abnar & Zuidema 2020): how much each output position of a Transformer encoder
draws on each input token, through all the layers.

Each layer's head-averaged self-attention ``A_l (S, S)`` gets the identity added for the residual
connection and its rows renormalised, ``Â_l = rownorm(A_l + I)``; the rollout is their product from
the last layer down, ``R = Â_L · … · Â_1``, whose rows again sum to 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["attention_rollout"]


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
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    rollout = eye
    for layer in a:  # first layer first: R_l = Â_l R_{l-1}
        hat = layer + eye
        rollout = (hat / hat.sum(-1, keepdim=True)) @ rollout
    return rollout
