"""Attention pooling: ``N_Q`` learned queries summarise a set of ``N_X`` inputs (:class:`AttentionPooling`)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._inputs import _check_rank
from .functional import AttentionOutput
from .multihead import MultiHeadAttention

__all__ = ["AttentionPooling"]


class AttentionPooling(nn.Module):
    """``N_Q`` learned query vectors attend over ``N_X`` inputs: ``(B, N_X, D) -> (B, N_Q, E)``.

    A set-to-fixed-size summary (a learned "CLS" when ``num_queries=1``), the
    "query-based attention" that turns N_X inputs into N_Q outputs.
    """

    def __init__(
        self, embed_dim: int, num_queries: int = 1, num_heads: int = 1, *, kdim: int | None = None, dropout: float = 0.0
    ):
        super().__init__()
        if num_queries < 1:
            raise ValueError(f"num_queries must be >= 1, got {num_queries}")
        self.queries = nn.Parameter(torch.randn(num_queries, embed_dim) / math.sqrt(embed_dim))
        self.attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout, kdim=kdim, vdim=kdim)

    def forward(
        self, x: Tensor, *, key_padding_mask: Tensor | None = None, need_weights: bool = False
    ) -> AttentionOutput:
        _check_rank("x", x, (3,), "(B, N_X, D)")
        q = self.queries.unsqueeze(0).expand(x.shape[0], -1, -1)  # (B, N_Q, E)
        return self.attn(q, x, x, key_padding_mask=key_padding_mask, need_weights=need_weights)
