"""Attention layers (``torch.nn.Module``, batch-first) built on :func:`attend`.

This module holds the single-head layers:

- :class:`Attention`: a query (e.g. a decoder state) attends over a set of input vectors, with any
  score and optional learned key/value projections; keys can be prepared once and reused.
- :class:`SelfAttention`: one head of self-attention with learned Q/K/V projections, any score.

The other layers live in modules of their own and are importable from here too:
:class:`MultiHeadAttention` (:mod:`.multihead`), :class:`AttentionPooling` (:mod:`.pooling`),
:class:`SpatialSelfAttention` and :class:`SelfAttentiveEncoder` (:mod:`.self_attentive`),
:class:`KVCache` (:mod:`.kv_cache`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from ._inputs import _check_last_dim, _check_rank, _padding_to_mask
from .functional import AttentionOutput, HardAttention, attend, attend_hard
from .kv_cache import KVCache
from .masks import causal_mask, combine_masks
from .multihead import MultiHeadAttention
from .pooling import AttentionPooling
from .scores import ScoreModule, make_score
from .self_attentive import SelfAttentiveEncoder, SpatialSelfAttention

__all__ = [
    "Attention",
    "AttentionPooling",
    "KVCache",
    "MultiHeadAttention",
    "PreparedMemory",
    "SelfAttention",
    "SelfAttentiveEncoder",
    "SpatialSelfAttention",
]


class PreparedMemory(NamedTuple):
    """Keys prepared by the score (e.g. ``U h_j + b`` for additive) and the values, computed once."""

    keys: Tensor  # (B, Nk, *)
    values: Tensor  # (B, Nk, Dv)


class Attention(nn.Module):
    """A query attends over input vectors: ``c = Σ_j α_j v_j``, ``α = softmax_j f(q, k_j)``.

    This is the attention of the RNN encoder-decoder (query = decoder state ``s_{t-1}``, inputs =
    encoder states ``h_j``) and of Show, Attend and Tell (inputs = the CNN grid cells).

    Args:
        query_dim: size of the query vectors ``Dq``.
        key_dim: size of the input vectors ``Dk`` (default ``query_dim``).
        value_dim: size of the value vectors ``Dv`` (default ``key_dim``; values default to the keys).
        score: a score name (``additive`` by default) or a score module.
        hidden_dim: the additive score's tanh layer size (default ``query_dim``).
        key_proj_dim: if set, keys go through a learned ``Linear(key_dim, key_proj_dim)`` first.
        value_proj_dim: if set, values go through a learned ``Linear(value_dim, value_proj_dim)``.
        dropout: dropout on the attention weights while training.

    ``forward(query, inputs, values=None, *, key_padding_mask=None, mask=None, need_weights=False,
    hard=None, prepared=None)``: ``query (B, Dq)`` (one query each, as in a decoder step) or
    ``(B, Nq, Dq)``; ``inputs (B, Nk, Dk)``. Returns ``(context, weights)`` with context
    ``(B, Dv)`` or ``(B, Nq, Dv)`` and weights ``(B, Nk)`` or ``(B, Nq, Nk)``.
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        *,
        score: str | ScoreModule = "additive",
        hidden_dim: int | None = None,
        key_proj_dim: int | None = None,
        value_proj_dim: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        key_dim = query_dim if key_dim is None else key_dim
        value_dim = key_dim if value_dim is None else value_dim
        self.query_dim, self.key_dim, self.value_dim = query_dim, key_dim, value_dim
        self.key_proj = nn.Linear(key_dim, key_proj_dim) if key_proj_dim else None
        self.value_proj = nn.Linear(value_dim, value_proj_dim) if value_proj_dim else None
        scored_key_dim = key_proj_dim or key_dim
        self.score = make_score(score, query_dim, scored_key_dim, hidden_dim)
        self.dropout = dropout
        self.output_dim = value_proj_dim or value_dim

    def prepare(self, inputs: Tensor, values: Tensor | None = None) -> PreparedMemory:
        """Project the keys (and values) once; reuse the result for every query (decoder step)."""
        _check_rank("inputs", inputs, (3,), "(B, Nk, Dk)")
        _check_last_dim("inputs", inputs, self.key_dim, "(B, Nk, Dk)")
        if values is None:
            if self.value_dim != self.key_dim:
                raise ValueError(f"values are required: value_dim={self.value_dim} differs from key_dim={self.key_dim}")
            values = inputs
        _check_rank("values", values, (3,), "(B, Nk, Dv)")
        _check_last_dim("values", values, self.value_dim, "(B, Nk, Dv)")
        if values.shape[:2] != inputs.shape[:2]:
            raise ValueError(f"values {tuple(values.shape)} must match inputs {tuple(inputs.shape)} in (B, Nk)")
        keys = self.key_proj(inputs) if self.key_proj is not None else inputs
        keys = self.score.prepare_keys(keys)
        if self.value_proj is not None:
            values = self.value_proj(values)
        return PreparedMemory(keys, values)

    def forward(
        self,
        query: Tensor,
        inputs: Tensor | None = None,
        values: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
        hard: str | None = None,
        prepared: PreparedMemory | None = None,
    ):
        prepared, query, single, m = self._setup(query, inputs, values, key_padding_mask, mask, prepared)
        out = attend(
            query,
            prepared.keys,
            prepared.values,
            score=self._score_fn(),
            mask=m,
            hard=hard,
            need_weights=need_weights,
            dropout_p=self.dropout,
            training=self.training,
        )
        if single:
            out = type(out)(*(t.squeeze(1) if t is not None and t.dim() > 1 else t for t in out))
        return out

    def hard(
        self,
        query: Tensor,
        inputs: Tensor | None = None,
        values: Tensor | None = None,
        *,
        mode: str = "sample",
        key_padding_mask: Tensor | None = None,
        mask: Tensor | None = None,
        prepared: PreparedMemory | None = None,
        generator: torch.Generator | None = None,
    ) -> HardAttention:
        """Hard attention through this layer's score (:func:`attnkit.attention.attend_hard`): one
        input per query, sampled (``mode="sample"``) or the best (``"argmax"``); shapes as in forward."""
        prepared, query, single, m = self._setup(query, inputs, values, key_padding_mask, mask, prepared)
        out = attend_hard(
            query, prepared.keys, prepared.values, mode=mode, score=self._score_fn(), mask=m, generator=generator
        )
        if single:
            out = HardAttention(*(t.squeeze(1) for t in out))
        return out

    def _score_fn(self):
        score = self.score
        return score if score.is_dot_product else (lambda q, k: score.score_prepared(q, k))

    def _setup(self, query, inputs, values, key_padding_mask, mask, prepared):
        """Prepared keys, the query as ``(B, Nq, Dq)``, whether it was one per row, and the mask."""
        if prepared is None:
            if inputs is None:
                raise ValueError("pass inputs (B, Nk, Dk) or prepared=attention.prepare(inputs)")
            prepared = self.prepare(inputs, values)
        _check_rank("query", query, (2, 3), "(B, Dq) or (B, Nq, Dq)")
        _check_last_dim("query", query, self.query_dim, "(B, [Nq,] Dq)")
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(1)  # (B, 1, Dq)
        bsz, nk = prepared.values.shape[:2]
        if query.shape[0] != bsz:
            raise ValueError(
                f"query batch size {query.shape[0]} (shape {tuple(query.shape)}) != inputs batch size {bsz}"
            )
        return prepared, query, single, combine_masks(_padding_to_mask(key_padding_mask, bsz, nk, heads=False), mask)

    def raw_scores(self, query: Tensor, prepared: PreparedMemory, *, key_padding_mask: Tensor | None = None) -> Tensor:
        """The scores ``e = f(q, k_j)`` before the softmax, ``(B, Nk)`` or ``(B, Nq, Nk)``; keys a
        query may not attend get ``-inf``. The first of the three steps, for inspection."""
        _check_rank("query", query, (2, 3), "(B, Dq) or (B, Nq, Dq)")
        single = query.dim() == 2
        q = query.unsqueeze(1) if single else query  # (B, Nq, Dq)
        e = self.score.score_prepared(q, prepared.keys)  # (B, Nq, Nk)
        if key_padding_mask is not None:
            e = e.masked_fill(~key_padding_mask.unsqueeze(1), float("-inf"))
        return e.squeeze(1) if single else e


class SelfAttention(nn.Module):
    """One head of self-attention with learned projections ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V``.

    ``forward(x (B, N, E), *, key_padding_mask=None, mask=None, causal=False, need_weights=False)``
    returns ``(Y (B, N, Dv), weights (B, N, N) or None)``; any score (scaled dot by default).
    """

    def __init__(
        self,
        embed_dim: int,
        *,
        head_dim: int | None = None,
        value_dim: int | None = None,
        score: str | ScoreModule = "scaled_dot",
        hidden_dim: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        head_dim = embed_dim if head_dim is None else head_dim
        value_dim = head_dim if value_dim is None else value_dim
        self.embed_dim = embed_dim
        self.q_proj = nn.Linear(embed_dim, head_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, value_dim, bias=bias)
        self.score = make_score(score, head_dim, head_dim, hidden_dim)
        self.dropout = dropout

    def forward(
        self,
        x: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> AttentionOutput:
        _check_rank("x", x, (3,), "(B, N, E)")
        _check_last_dim("x", x, self.embed_dim, "(B, N, E)")
        bsz, n, _ = x.shape
        m = combine_masks(
            _padding_to_mask(key_padding_mask, bsz, n, heads=False),
            causal_mask(n, device=x.device) if causal else None,
            mask,
        )
        return attend(
            self.q_proj(x),
            self.k_proj(x),
            self.v_proj(x),
            score=self.score,
            mask=m,
            need_weights=need_weights,
            dropout_p=self.dropout,
            training=self.training,
        )
