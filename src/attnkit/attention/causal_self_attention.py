"""Causal multi-head self-attention with grouped-query heads, rotary positions and a key/value cache:
the attention of decoder-only language models (GPT-2, Llama).

``head_h = softmax(q_h k_g(h)ᵀ / √d_h + causal) v_g(h)``, ``out = Concat(head_1..head_H) W_O``.

**Grouped-query attention** (Ainslie et al. 2023, "GQA"): ``H`` query heads share ``H_kv`` key/value
heads, ``H / H_kv`` query heads per group; query head ``h`` reads key/value head ``h // (H / H_kv)``
(``H_kv = H``: plain multi-head attention; ``H_kv = 1``: multi-query attention). The cache holds
``H_kv`` heads, which is what GQA saves.

Separate ``q_proj``/``k_proj``/``v_proj``/``o_proj`` (Hugging Face's Llama names), so an export is a
renaming. Masks follow attnkit's convention: ``True`` = may attend.
"""

from __future__ import annotations

from torch import Tensor, nn

from .functional import AttentionOutput, attend
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

    def forward(self, x: Tensor, *, cache: KVCache | None = None, need_weights: bool = False) -> AttentionOutput:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (B, N, {self.d_model}), got {tuple(x.shape)}")
        b, n, _ = x.shape
        past = 0 if cache is None else len(cache)
        q = self.q_proj(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, N, Dh)
        k = self.k_proj(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, N, Dh)
        v = self.v_proj(x).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary(q, k, offset=past)
        if cache is not None:
            k, v = cache.extend(k, v)  # (B, Hkv, N_past + N, Dh)
        k, v = repeat_kv(k, self.groups), repeat_kv(v, self.groups)  # (B, H, N_past + N, Dh)
        mask = None if n == 1 else causal_mask(n, past + n, device=x.device)  # one new query sees all
        ctx, weights = attend(
            q,
            k,
            v,
            score="scaled_dot",
            mask=mask,
            need_weights=need_weights,
            dropout_p=self.dropout,
            training=self.training,
        )  # (B, H, N, Dh)
        out = self.o_proj(ctx.transpose(1, 2).reshape(b, n, self.n_heads * self.head_dim))  # (B, N, D)
        return AttentionOutput(out, weights if need_weights else None)
