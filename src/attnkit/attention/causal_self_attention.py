"""Causal multi-head self-attention with grouped-query heads, rotary positions and a key/value cache:
the attention of decoder-only language models (GPT-2, Llama).

``head_h = softmax(q_h k_g(h)ᵀ / √d_h + causal) v_g(h)``, ``out = Concat(head_1..head_H) W_O``.

**Grouped-query attention** (Ainslie et al. 2023, "GQA"): ``H`` query heads share ``H_kv`` key/value
heads, ``H / H_kv`` query heads per group; query head ``h`` reads key/value head ``h // (H / H_kv)``
(``H_kv = H``: plain multi-head attention; ``H_kv = 1``: multi-query attention). The cache holds
``H_kv`` heads, which is what GQA saves.

Separate ``q_proj``/``k_proj``/``v_proj``/``o_proj`` parameters (Hugging Face's Llama names), so an
export is a renaming and every checkpoint keeps its names; the forward pass concatenates the three
weights (a copy of ``(H + 2·H_kv)·D_h × D`` numbers) and projects once, ``x W_qkvᵀ``, one matrix
product over the batch's ``B·N`` rows instead of three. Masks follow attnkit's convention: ``True`` =
may attend.

When nothing needs the weights (training, scoring, decoding) the attention is one call of
:func:`torch.nn.functional.scaled_dot_product_attention` with ``is_causal=True`` (no mask tensor: the
kernel skips the blocks above the diagonal) and ``enable_gqa=True`` (the ``H_kv`` key/value heads
read in place, not repeated ``H / H_kv`` times). The general :func:`~attnkit.attention.attend`, with
an explicit causal mask, runs when the weights are asked for (the views), while training with dropout
(its faster dropout on the CPU), and for several new queries after a non-empty cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .dropout import uses_fast_dropout
from .functional import AttentionOutput, attend, fused_attention
from .kv_cache import KVCache
from .masks import causal_mask
from .positional import RotaryEmbedding

__all__ = ["CausalSelfAttention", "repeat_kv"]


def repeat_kv(x: Tensor, groups: int) -> Tensor:
    """``(B, H_kv, N, D) -> (B, H_kv · groups, N, D)``: each key/value head repeated for the
    ``groups`` query heads that share it (head ``h`` of the result is head ``h // groups``)."""
    if groups == 1:
        return x
    return x.repeat_interleave(groups, dim=1)


class CausalSelfAttention(nn.Module):
    """``(B, N, D) -> (B, N, D)`` causal self-attention, optionally rotary and grouped-query.

    ``forward(x, *, cache=None, need_weights=False)`` returns ``AttentionOutput(out, weights)``,
    ``weights (B, H, N, N_past + N)`` (row-stochastic, zero above the diagonal) when asked for.
    With a growing :class:`KVCache` (:meth:`new_cache`) this call's keys and values are appended
    and the ``N`` new queries (positions ``N_past ..``) attend over all cached positions.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        *,
        bias: bool = False,
        dropout: float = 0.0,
        rotary: RotaryEmbedding | None = None,
    ):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if not isinstance(n_heads, int) or n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(f"n_heads must be a positive int dividing d_model={d_model}, got {n_heads!r}")
        if not isinstance(n_kv_heads, int) or n_kv_heads <= 0 or n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads must be a positive int dividing n_heads={n_heads}, got {n_kv_heads!r}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.groups = n_heads // n_kv_heads
        self.dropout = dropout
        self.rotary = rotary
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)

    def new_cache(self) -> KVCache:
        """An empty growing key/value cache for incremental decoding."""
        return KVCache()

    def qkv_weight(self) -> tuple[Tensor, Tensor | None]:
        """``(W_qkv ((H + 2·H_kv)·D_h, D), b_qkv or None)``: the three projections stacked, queries first."""
        w = torch.cat((self.q_proj.weight, self.k_proj.weight, self.v_proj.weight))
        if self.q_proj.bias is None:
            return w, None
        return w, torch.cat((self.q_proj.bias, self.k_proj.bias, self.v_proj.bias))

    def forward(self, x: Tensor, *, cache: KVCache | None = None, need_weights: bool = False) -> AttentionOutput:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (B, N, {self.d_model}), got {tuple(x.shape)}")
        b, n, _ = x.shape
        past = 0 if cache is None else len(cache)
        hq, hkv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        qkv = F.linear(x, *self.qkv_weight())  # (B, N, (H + 2 Hkv) Dh)
        q, k, v = qkv.split((hq, hkv, hkv), dim=-1)
        q = q.view(b, n, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, N, Dh)
        k = k.view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, N, Dh)
        v = v.view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary(q, k, offset=past)
        if cache is not None:
            k, v = cache.extend(k, v)  # (B, Hkv, N_past + N, Dh)
        dropout_p = self.dropout if self.training else 0.0
        if not need_weights and (past == 0 or n == 1) and not uses_fast_dropout(q, dropout_p, self.training):
            # is_causal: query i sees keys 0..i (past == 0); one new query sees every cached key (no mask)
            ctx = fused_attention(
                q, k, v, None, dropout_p, None, is_causal=n > 1, enable_gqa=self.groups > 1
            )  # (B, H, N, Dh)
            weights = None
        else:
            ctx, weights = self._attend(q, k, v, past, need_weights)  # (B, H, N, Dh)
        out = self.o_proj(ctx.transpose(1, 2).reshape(b, n, self.n_heads * self.head_dim))  # (B, N, D)
        return AttentionOutput(out, weights if need_weights else None)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, past: int, need_weights: bool) -> AttentionOutput:
        """The general path (see the module docstring): key/value heads repeated, an explicit causal mask."""
        n = q.shape[-2]
        k, v = repeat_kv(k, self.groups), repeat_kv(v, self.groups)  # (B, H, N_past + N, Dh)
        mask = None if n == 1 else causal_mask(n, past + n, device=q.device)  # one new query sees all
        return attend(
            q,
            k,
            v,
            score="scaled_dot",
            mask=mask,
            need_weights=need_weights,
            dropout_p=self.dropout,
            training=self.training,
        )
