"""Transformer blocks from attnkit's own :class:`MultiHeadAttention` (no ``torch.nn.Transformer``).

Encoder layer: ``x = x + SelfAttn(x)``, ``x = x + FFN(x)``, each sub-layer with dropout and a
LayerNorm applied after the residual sum (post-norm, Vaswani et al.) or before the sub-layer
(pre-norm, ``norm_first=True``). Decoder layer: causal self-attention, cross-attention over the
encoder output ("memory"), feed-forward. Sub-module names follow ``torch.nn.TransformerEncoderLayer``
/ ``TransformerDecoderLayer`` (``self_attn``, ``multihead_attn``, ``linear1``, ``linear2``,
``norm1..3``), so weights copy across.

Masks use attnkit's convention (``True`` = may attend); padding masks are ``(B, N)`` with
``True`` at real tokens. Every layer returns its attention weights per head on request.
"""

from __future__ import annotations

from typing import NamedTuple

import torch.nn.functional as F
from torch import Tensor, nn

from .dropout import Dropout
from .kv_cache import KVCache
from .masks import key_mask
from .multihead import MultiHeadAttention

__all__ = [
    "DecoderLayerCache",
    "DecoderOutput",
    "EncoderOutput",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class _SublayerMixin:
    """What the encoder and decoder layers share: the feed-forward network, the norms and dropouts of
    their sub-layers, and the one residual wrapping of a sub-layer ``f`` (numbered ``i``):
    pre-norm ``x + dropout_i(f(norm_i(x)))``, post-norm ``norm_i(x + dropout_i(f(x)))``."""

    norm_first: bool

    def _init_ffn(self, d_model, dim_feedforward, dropout, activation, bias, layer_norm_eps, n_norms):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        self.dropout = Dropout(dropout)  # inside the FFN
        for i in range(1, n_norms + 1):
            setattr(self, f"norm{i}", nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _ACTIVATIONS[activation]

    def _ff(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def _ff_sublayer(self, x: Tensor) -> tuple[Tensor, None]:
        return self._ff(x), None

    def _residual(self, x: Tensor, i: int, sublayer) -> tuple[Tensor, Tensor | None]:
        """Sub-layer ``i`` around ``x (B, N, D)`` with its residual connection and norm (see the class
        docstring); ``sublayer(h) -> (out (B, N, D), weights or None)``; returns ``(x, weights)``."""
        norm, dropout = getattr(self, f"norm{i}"), getattr(self, f"dropout{i}")
        if self.norm_first:
            out, weights = sublayer(norm(x))
            return x + dropout(out), weights
        out, weights = sublayer(x)
        return norm(x + dropout(out)), weights


class TransformerEncoderLayer(_SublayerMixin, nn.Module):
    """Self-attention + feed-forward. ``forward(src (B, N, D), *, key_padding_mask=None, mask=None,
    need_weights=False) -> (out (B, N, D), weights (B, H, N, N) or None)``."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        *,
        activation: str = "relu",
        norm_first: bool = False,
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias)
        self._init_ffn(d_model, dim_feedforward, dropout, activation, bias, layer_norm_eps, n_norms=2)
        self.norm_first = norm_first

    def forward(
        self,
        src: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
    ):
        def sa(h):
            return self.self_attn(h, h, h, mask=mask, key_padding_mask=key_padding_mask, need_weights=need_weights)

        x, w = self._residual(src, 1, sa)
        x, _ = self._residual(x, 2, self._ff_sublayer)
        return x, w


class TransformerDecoderLayer(_SublayerMixin, nn.Module):
    """Causal self-attention, cross-attention over ``memory``, feed-forward.

    ``forward(tgt (B, T, D), memory (B, S, D), *, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, causal=True, cache=None, need_weights=False)`` returns
    ``(out (B, T, D), (self_weights (B, H, T, T'), cross_weights (B, H, T, S)) or (None, None))``.

    ``cache`` (a :class:`DecoderLayerCache`, for incremental decoding) holds this layer's
    self-attention keys/values and the cross-attention keys/values projected from ``memory`` once;
    with a cache, ``tgt`` is only the new position(s).
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        *,
        activation: str = "relu",
        norm_first: bool = False,
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias)
        self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias)
        self._init_ffn(d_model, dim_feedforward, dropout, activation, bias, layer_norm_eps, n_norms=3)
        self.norm_first = norm_first

    def new_cache(self, memory: Tensor | None = None) -> DecoderLayerCache:
        """This layer's empty caches; with ``memory (B, S, D)`` the cross-attention keys/values are
        projected now (once per sentence) instead of at the first step."""
        return DecoderLayerCache(self.self_attn.new_cache(), self.multihead_attn.new_cache(memory, static=True))

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        *,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        causal: bool = True,
        cache: DecoderLayerCache | None = None,
        need_weights: bool = False,
    ):
        self_cache = cross_cache = None
        if cache is not None:
            self_cache, cross_cache = cache

        def sa(h):
            return self.self_attn(
                h,
                h,
                h,
                mask=tgt_mask,
                key_padding_mask=tgt_key_padding_mask,
                causal=causal,
                need_weights=need_weights,
                cache=self_cache,
            )

        def ca(h):
            return self.multihead_attn(
                h,
                memory,
                memory,
                key_padding_mask=memory_key_padding_mask,
                need_weights=need_weights,
                cache=cross_cache,
            )

        x, ws = self._residual(tgt, 1, sa)
        x, wc = self._residual(x, 2, ca)
        x, _ = self._residual(x, 3, self._ff_sublayer)
        return x, (ws, wc)

    def step(self, x: Tensor, cache: DecoderLayerCache, memory_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One incremental decoding step in eval mode: ``x (B, 1, D)`` the newest position, ``cache`` this
        layer's caches (the self-attention keys/values are appended to; the cross-attention ones filled from
        the memory), ``memory_mask`` bool ``(A, 1, 1, S)`` for the cross cache's ``A`` rows, ``True`` at real
        source positions (or ``None``). The numbers of ``forward(x, memory, memory_key_padding_mask=...,
        causal=False, cache=cache)`` in eval mode: the same residual wrapping around
        :meth:`MultiHeadAttention.step_self` / :meth:`~MultiHeadAttention.step_cross`, without the attention's
        argument checks. Returns ``(out (B, 1, D), cross-attention weights (B, H, 1, S))``."""
        x, _ = self._residual(x, 1, lambda h: (self.self_attn.step_self(h, cache.self_attn), None))
        x, weights = self._residual(x, 2, lambda h: self.multihead_attn.step_cross(h, cache.cross_attn, memory_mask))
        x, _ = self._residual(x, 3, self._ff_sublayer)
        return x, weights


class DecoderLayerCache(NamedTuple):
    """One decoder layer's caches: growing self-attention keys/values, static cross-attention ones."""

    self_attn: KVCache
    cross_attn: KVCache

    def copy(self) -> DecoderLayerCache:
        """New cache objects for a new decoder step (the static cross cache is shared: it never changes)."""
        return DecoderLayerCache(self.self_attn.copy(), self.cross_attn)


class EncoderOutput(NamedTuple):
    """What :class:`TransformerEncoder` returns: the last layer's output, and each layer's self-attention
    weights when they were asked for (``None`` otherwise)."""

    output: Tensor  # (B, S, D)
    weights: list | None  # per layer (B, H, S, S)


class DecoderOutput(NamedTuple):
    """What :class:`TransformerDecoder` returns: the last layer's output, and each layer's self- and
    cross-attention weights when they were asked for (``None`` otherwise)."""

    output: Tensor  # (B, T, D)
    self_weights: list | None  # per layer (B, H, T, T); None entries for layers not asked
    cross_weights: list | None  # per layer (B, H, T, S); None entries for layers not asked


class _LayerStack(nn.Module):
    """``num_layers`` copies of ``layer_cls``, and a final LayerNorm when ``norm_first`` (pre-norm needs it)."""

    layer_cls: type

    def __init__(
        self,
        d_model: int,
        nhead: int,
        num_layers: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        *,
        activation: str = "relu",
        norm_first: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.layers = nn.ModuleList(
            self.layer_cls(
                d_model, nhead, dim_feedforward, dropout, activation=activation, norm_first=norm_first, bias=bias
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, bias=bias) if norm_first else None


class TransformerEncoder(_LayerStack):
    """``num_layers`` encoder layers; a final LayerNorm when ``norm_first`` (pre-norm needs it)."""

    layer_cls = TransformerEncoderLayer

    def forward(
        self,
        src: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> EncoderOutput:
        x, ws = src, []
        for layer in self.layers:
            x, w = layer(x, key_padding_mask=key_padding_mask, mask=mask, need_weights=need_weights)
            ws.append(w)
        if self.norm is not None:
            x = self.norm(x)
        return EncoderOutput(x, ws if need_weights else None)


class TransformerDecoder(_LayerStack):
    """``num_layers`` decoder layers; a final LayerNorm when ``norm_first``.

    ``cache``: a list with one :class:`DecoderLayerCache` per layer (make it with
    :meth:`new_cache`) for incremental decoding; positions are the caller's business.

    ``need_weights``: ``True`` returns every layer's weights; ``"last"`` only the last layer's, an
    ``int`` ``i`` only layer ``i``'s (0-based; e.g. the head supervised by guided alignment); the
    other layers keep the fused kernel, their entries being ``None``.
    """

    layer_cls = TransformerDecoderLayer

    def new_cache(self, memory: Tensor | None = None) -> list[DecoderLayerCache]:
        """Empty caches, one per layer; with ``memory (B, S, D)`` the cross-attention keys/values
        are projected now, once per sentence, instead of at the first step."""
        return [layer.new_cache(memory) for layer in self.layers]

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        *,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        causal: bool = True,
        cache: list | None = None,
        need_weights: bool | str | int = False,
    ) -> DecoderOutput:
        if cache is not None and len(cache) != len(self.layers):
            raise ValueError(f"cache must hold one DecoderLayerCache per layer ({len(self.layers)}), got {len(cache)}")
        last = len(self.layers) - 1
        one = need_weights if isinstance(need_weights, int) and not isinstance(need_weights, bool) else None
        if need_weights not in (True, False, "last") and not (one is not None and 0 <= one <= last):
            raise ValueError(
                f"need_weights must be True, False, 'last' or a layer index 0..{last}, got {need_weights!r}"
            )
        x, sws, cws = tgt, [], []
        for i, layer in enumerate(self.layers):
            want = need_weights is True or (need_weights == "last" and i == last) or i == one
            x, (sw, cw) = layer(
                x,
                memory,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                causal=causal,
                cache=None if cache is None else cache[i],
                need_weights=want,
            )
            sws.append(sw)
            cws.append(cw)
        if self.norm is not None:
            x = self.norm(x)
        keep = need_weights is not False
        return DecoderOutput(x, sws if keep else None, cws if keep else None)

    def step(
        self, tgt: Tensor, cache: list[DecoderLayerCache], memory_key_padding_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """One incremental decoding step in eval mode (what a search runs at every step): ``tgt (B, 1, D)``
        the newest position (embedded, positions added), ``cache`` one :class:`DecoderLayerCache` per layer
        with the cross-attention keys/values already projected (:meth:`new_cache` with the memory);
        ``memory_key_padding_mask (A, S)`` bool, ``True`` at real source tokens, one row per row of the
        cross caches. The numbers of ``forward(tgt, memory, memory_key_padding_mask=..., causal=False,
        cache=cache, need_weights="last")`` (:meth:`TransformerDecoderLayer.step`): ``(output (B, 1, D),
        the last layer's cross-attention weights (B, H, 1, S))``."""
        if self.training:
            raise ValueError("step is for decoding in eval mode; call model.eval() first (or use forward)")
        if len(cache) != len(self.layers) or any(c.cross_attn.empty for c in cache):
            raise ValueError(
                f"cache must hold one DecoderLayerCache per layer ({len(self.layers)}) with the cross-attention "
                "keys/values projected (new_cache(memory))"
            )
        m = None if memory_key_padding_mask is None else key_mask(memory_key_padding_mask, heads=True)  # (A, 1, 1, S)
        x = tgt
        for layer, layer_cache in zip(self.layers, cache):
            x, weights = layer.step(x, layer_cache, m)
        if self.norm is not None:
            x = self.norm(x)
        return x, weights
