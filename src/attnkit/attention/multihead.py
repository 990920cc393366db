"""Multi-head attention with ``torch.nn.MultiheadAttention``'s parameters: per-head weights on request,
a key/value cache for incremental decoding, conversion to and from torch (:class:`MultiHeadAttention`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._inputs import _check_last_dim, _check_rank, _padding_to_mask
from .functional import AttentionOutput, attend, masked_softmax
from .kv_cache import KVCache
from .masks import causal_mask, check_mask, combine_masks, from_torch_mha_mask, to_torch_mha_mask

__all__ = ["MultiHeadAttention"]


def _attend_step(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """``softmax(q·kᵀ/√d)·v`` and the weights, for a decoder step: the very operations of
    :func:`attend`'s explicit path (the same numbers), without its argument checks, which cost as much
    as the products for one query (the layer made these shapes itself)."""
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)  # (B, H, Nq, Nk)
    weights = masked_softmax(scores, mask)
    return weights @ v, weights


def _detached(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.detach().float()


def _zero_width_linear(out_features: int, bias: bool) -> nn.Linear:
    """An ``nn.Linear`` reading zero features (an attention whose heads were all pruned): its output is its
    bias. Built without ``nn.Linear``'s initialisation, which warns on a zero-element weight."""
    lin = nn.Linear(1, out_features, bias=bias)
    lin.in_features = 0
    lin.weight = nn.Parameter(lin.weight.new_empty(out_features, 0))
    return lin


class MultiHeadAttention(nn.Module):
    """Multi-head attention: ``MultiHead(Q, K, V) = Concat(head_1..head_H) W_O``,
    ``head_h = softmax(Q W_Q^h (K W_K^h)ᵀ / √d_h) V W_V^h``.

    Batch-first. Parameters are laid out as in ``torch.nn.MultiheadAttention`` (``in_proj_weight``
    when ``kdim == vdim == embed_dim``, else ``q/k/v_proj_weight``; ``in_proj_bias``; ``out_proj``),
    so :meth:`from_torch` / :meth:`to_torch` copy weights one to one.

    ``forward(query, key=None, value=None, *, mask=None, key_padding_mask=None, causal=False,
    need_weights=False, average_weights=False, cache=None)``

    - ``query (B, Nq, E)``, ``key (B, Nk, kdim)``, ``value (B, Nk, vdim)``; key/value default to query.
      Unbatched ``(Nq, E)`` / ``(Nk, kdim)`` inputs work too (as in torch).
    - ``mask``: bool, ``True`` = may attend, ``(Nq, Nk)``, ``(B, Nq, Nk)`` or ``(B, H, Nq, Nk)``;
      ``key_padding_mask``: bool ``(B, Nk)``, ``True`` = real token. ``causal=True`` adds the causal mask.
    - returns ``(output (B, Nq, E), weights)``; weights are ``(B, H, Nq, Nk)`` per head (or
      averaged over heads to ``(B, Nq, Nk)``), ``None`` unless requested. Without weights the
      fused ``scaled_dot_product_attention`` kernel runs.
    - ``head_dim``: heads of this width, ``num_heads`` of them (0 included), instead of ``embed_dim /
      num_heads``: an attention with heads pruned (Michel et al. 2019), whose projections have
      ``inner_dim = num_heads · head_dim`` rows (``out_proj`` as many columns). With no heads the output is
      ``out_proj``'s bias at every position, and the weights ``(B, 0, Nq, Nk)``.
    - ``cache``: a :class:`KVCache` for incremental decoding (make one with :meth:`new_cache`). A
      growing cache (self-attention): this call's keys/values are appended and the query attends
      over all of them. A static cache (cross-attention): keys/values are projected on the first
      call (or by :meth:`new_cache` from the encoder output) and reused afterwards (``key``/
      ``value`` are then not read and may be ``None``). A static cache may hold one row per ``G``
      consecutive query rows (beam search's beams of one sentence): the query batch is then ``G``
      times the cache's, and ``key_padding_mask`` is per cache row.
      With a cache the attention runs as ``softmax(q·kᵀ/√d)·v`` in explicit products, not the fused
      kernel (faster on the CPU for the one query of a decoder step).
    - :meth:`step_self` / :meth:`step_cross`: that cached computation in eval mode without the argument
      checks, for a decoder layer's step (:meth:`attnkit.attention.TransformerDecoder.step`); ``forward``
      runs them too once its checks pass.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        head_dim: int | None = None,
    ):
        super().__init__()
        if not isinstance(embed_dim, int) or embed_dim <= 0:
            raise ValueError(f"embed_dim must be a positive int, got {embed_dim!r}")
        if head_dim is None:
            if not isinstance(num_heads, int) or num_heads <= 0:
                raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
            if embed_dim % num_heads != 0:
                raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
            head_dim = embed_dim // num_heads
        else:  # heads of a given width, as many as kept (a pruned attention: any number, none included)
            if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0:
                raise ValueError(f"head_dim must be a positive int, got {head_dim!r}")
            if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 0:
                raise ValueError(f"num_heads must be an int >= 0 with head_dim given, got {num_heads!r}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, head_dim
        inner = self.inner_dim = num_heads * head_dim  # the heads' concatenated width, out_proj's input
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout = dropout
        self.packed = self.kdim == embed_dim and self.vdim == embed_dim
        if self.packed:
            self.in_proj_weight = nn.Parameter(torch.empty(3 * inner, embed_dim))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = nn.Parameter(torch.empty(inner, embed_dim))
            self.k_proj_weight = nn.Parameter(torch.empty(inner, self.kdim))
            self.v_proj_weight = nn.Parameter(torch.empty(inner, self.vdim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * inner)) if bias else None
        self.out_proj = nn.Linear(inner, embed_dim, bias=bias) if inner else _zero_width_linear(embed_dim, bias)
        self._int8: dict | None = None  # int8 copies of the projections (quantize_projections_int8)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections and zero biases, as ``torch.nn.MultiheadAttention``."""
        if not self.inner_dim:  # no heads left: nothing to draw
            if self.in_proj_bias is not None:
                nn.init.zeros_(self.out_proj.bias)
            return
        if self.packed:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                nn.init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    # --- projections -------------------------------------------------------------------------
    def _weights(self) -> tuple[Tensor, Tensor, Tensor]:
        if self.packed:
            return self.in_proj_weight.chunk(3)
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    def _biases(self) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        if self.in_proj_bias is None:
            return None, None, None
        return self.in_proj_bias.chunk(3)

    def _split_heads(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, Dh)

    def quantize_projections_int8(self) -> None:
        """Run the query/key/value projections in int8 from now on (inference on the CPU): dynamic
        quantization as ``torch.ao.quantization.quantize_dynamic`` gives an ``nn.Linear`` (weights int8
        with one scale per output row, each call's input quantized on the fly), which it cannot do
        here by itself: the projections are parameters (``in_proj_weight``, packed as in
        ``torch.nn.MultiheadAttention``), not ``nn.Linear`` modules. The float parameters stay (the
        state dict is unchanged); :func:`attnkit.device.quantize_int8` calls this."""
        from ..int8 import int8_linear

        if not self.inner_dim:  # every head pruned: no projections to quantize
            return
        weights = dict(zip("qkv", self._weights()))
        biases = dict(zip("qkv", self._biases()))
        with torch.no_grad():
            proj = {n: int8_linear(weights[n].detach().float(), _detached(biases[n])) for n in "qkv"}
            if self.packed:  # the packed (3E, E) projection of self-attention: one int8 GEMM
                proj["qkv"] = int8_linear(self.in_proj_weight.detach().float(), _detached(self.in_proj_bias))
        self._int8 = proj

    def _linear(self, name: str, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        if self._int8 is not None:
            return self._int8[name](x)
        return F.linear(x, weight, bias)

    def project_query(self, query: Tensor) -> Tensor:
        """``(B, Nq, E) -> (B, H, Nq, Dh)``."""
        return self._split_heads(self._linear("q", query, self._weights()[0], self._biases()[0]))

    def project_kv(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """``(B, Nk, kdim), (B, Nk, vdim) -> (B, H, Nk, Dh)`` twice."""
        _, wk, wv = self._weights()
        _, bk, bv = self._biases()
        return self._split_heads(self._linear("k", key, wk, bk)), self._split_heads(self._linear("v", value, wv, bv))

    def _project_qkv(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.packed and query is key and key is value:
            b, n, _ = query.shape
            qkv = self._linear("qkv", query, self.in_proj_weight, self.in_proj_bias)  # (B, N, 3E): one GEMM
            # unbind, not indexing: its backward stacks the three gradients straight into qkv's layout, where
            # indexing's fills a zero (3, B, H, N, Dh) tensor per part and then copies it back (3 % of a step)
            q, k, v = qkv.view(b, n, 3, self.num_heads, self.head_dim).unbind(2)  # (B, N, H, Dh) each
            return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, N, Dh)
        k, v = self.project_kv(key, value)
        return self.project_query(query), k, v

    def new_cache(self, key: Tensor | None = None, value: Tensor | None = None, *, static: bool = False) -> KVCache:
        """An empty growing cache, or (``static=True``) a static one, filled now when ``key`` is given
        (cross-attention keys/values projected from the encoder output once per sentence)."""
        if key is None:
            return KVCache(static=static)
        k, v = self.project_kv(key, key if value is None else value)  # (B, H, Nk, Dh)
        return KVCache(k, v, static=True)

    # --- forward -----------------------------------------------------------------------------
    def _check(self, query: Tensor, key: Tensor | None, value: Tensor | None) -> None:
        _check_rank("query", query, (3,), "(B, Nq, embed_dim)")
        _check_last_dim("query", query, self.embed_dim, "(B, Nq, embed_dim)")
        if key is not None:
            _check_rank("key", key, (3,), "(B, Nk, kdim)")
            _check_last_dim("key", key, self.kdim, "(B, Nk, kdim)")
        if value is not None:
            _check_rank("value", value, (3,), "(B, Nk, vdim)")
            _check_last_dim("value", value, self.vdim, "(B, Nk, vdim)")
        if key is not None and value is not None and key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} must agree in (B, Nk)")
        if key is not None and key.shape[0] != query.shape[0]:
            raise ValueError(
                f"query batch size {query.shape[0]} (shape {tuple(query.shape)}) != key batch size {key.shape[0]} (shape {tuple(key.shape)})"
            )

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        average_weights: bool = False,
        cache: KVCache | None = None,
    ) -> AttentionOutput:
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (MultiHeadAttention.new_cache()), got {type(cache).__name__}")
        reuse = cache is not None and cache.static and not cache.empty
        if reuse:  # the cached keys/values stand for key and value: the arguments are not read
            key = value = None
        if key is None and not reuse:
            key = query
        if value is None and key is not None:
            value = key
        if isinstance(query, Tensor) and query.dim() == 2:  # unbatched (Nq, E), as torch accepts
            if (key is not None and key.dim() != 2) or (value is not None and value.dim() != 2):
                raise ValueError(f"unbatched query {tuple(query.shape)} needs unbatched (Nk, kdim) key and value")
            out = self.forward(
                query.unsqueeze(0),
                None if key is None else key.unsqueeze(0),
                None if value is None else value.unsqueeze(0),
                mask=mask,
                key_padding_mask=None if key_padding_mask is None else key_padding_mask.unsqueeze(0),
                causal=causal,
                need_weights=need_weights,
                average_weights=average_weights,
                cache=cache,
            )
            return AttentionOutput(out[0].squeeze(0), None if out[1] is None else out[1].squeeze(0))
        self._check(query, key, value)
        bsz, nq, _ = query.shape

        if reuse and cache.k.shape[0] != bsz:
            return self._forward_grouped(query, cache, mask, key_padding_mask, need_weights, average_weights)
        step = cache is not None and not self.training and mask is None and not causal  # a decoder step
        if step and reuse:
            m = _padding_to_mask(key_padding_mask, bsz, cache.k.shape[2], heads=True)
            out, weights = self.step_cross(query, cache, m)
            if not need_weights:
                return AttentionOutput(out, None)
            return AttentionOutput(out, weights.mean(dim=1) if average_weights else weights)
        if step and not cache.static and not need_weights and key is query and value is query:
            m = _padding_to_mask(key_padding_mask, bsz, len(cache) + nq, heads=True)
            return AttentionOutput(self.step_self(query, cache, m), None)
        if reuse:
            q, k, v = self.project_query(query), cache.k, cache.v
        else:
            q, k, v = self._project_qkv(query, key, value)
            if cache is not None:
                k, v = cache.extend(k, v)  # (B, H, N_past + Nq, Dh) for a growing cache
        nk = k.shape[2]

        m = _padding_to_mask(key_padding_mask, bsz, nk, heads=True)
        if mask is not None:
            check_mask(mask, (bsz, self.num_heads, nq, nk), name="mask")
            m = combine_masks(m, mask.unsqueeze(1) if mask.dim() == 3 else mask)
        if causal:
            m = combine_masks(m, causal_mask(nq, nk, device=query.device))

        # Incremental decoding (a cache, one query per row): the explicit q·kᵀ, softmax, ·v; for one
        # query the fused kernel is slower on the CPU (2x at 320 rows x 60 keys x 4 heads of 64, AVX2).
        if cache is not None and not self.training:
            ctx, weights = _attend_step(q, k, v, m)  # (B, H, Nq, Dh), (B, H, Nq, Nk)
        else:
            ctx, weights = attend(
                q,
                k,
                v,
                score="scaled_dot",
                mask=m,
                need_weights=need_weights,
                dropout_p=self.dropout,
                training=self.training,
            )  # (B, H, Nq, Dh)
        if not need_weights:
            weights = None
        out = self.out_proj(ctx.transpose(1, 2).reshape(bsz, nq, self.inner_dim))
        if weights is not None and average_weights:
            weights = weights.mean(dim=1)
        return AttentionOutput(out, weights)

    # --- incremental decoding in eval mode -----------------------------------------------------
    def step_self(self, query: Tensor, cache: KVCache, mask: Tensor | None = None) -> Tensor:
        """Self-attention for a decoder step (eval mode): ``query (B, Nq, E)`` the newest position(s), whose
        keys and values are appended to the growing ``cache`` and which attend over every cached position
        (``mask``: ``None``, or bool broadcasting to ``(B, H, Nq, N)``, ``True`` = may attend). What
        :meth:`forward` computes with ``cache=cache`` in eval mode, without its argument checks (the decoder
        layer made these shapes; :meth:`forward` calls this after its checks): ``(B, Nq, E)``, no weights."""
        bsz, nq, _ = query.shape
        q, k, v = self._project_qkv(query, query, query)  # (B, H, Nq, Dh) each
        k, v = cache.extend(k, v)  # (B, H, N, Dh)
        ctx, _ = _attend_step(q, k, v, mask)  # (B, H, Nq, Dh)
        return self.out_proj(ctx.transpose(1, 2).reshape(bsz, nq, self.inner_dim))

    def step_cross(self, query: Tensor, cache: KVCache, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Cross-attention for a decoder step (eval mode) over a filled static ``cache`` (the source's keys
        and values, one row per ``G`` query rows when beams share it, see :meth:`forward`); ``mask``: bool
        ``(A, 1, 1, S)`` for the cache's ``A`` rows, ``True`` at real source positions, or ``None``. What
        :meth:`forward` computes, without its checks: ``(out (B, Nq, E), weights (B, H, Nq, S))``."""
        bsz, nq, _ = query.shape
        a, h, nk, dh = cache.k.shape
        g = bsz // a
        q = self.project_query(query)  # (A·G, H, Nq, Dh)
        if g > 1:  # the beams' queries are more queries over their sentence's keys
            q = q.view(a, g, h, nq, dh).transpose(1, 2).reshape(a, h, g * nq, dh)  # (A, H, G·Nq, Dh)
        ctx, weights = _attend_step(q, cache.k, cache.v, mask)  # (A, H, G·Nq, Dh), (A, H, G·Nq, S)
        if g > 1:
            ctx = ctx.view(a, h, g, nq, dh).permute(0, 2, 3, 1, 4).reshape(bsz, nq, self.inner_dim)  # (B, Nq, H·Dh)
            weights = weights.view(a, h, g, nq, nk).transpose(1, 2).reshape(bsz, h, nq, nk)  # (B, H, Nq, S)
        else:
            ctx = ctx.transpose(1, 2).reshape(bsz, nq, self.inner_dim)
        return self.out_proj(ctx), weights

    def _forward_grouped(
        self,
        query: Tensor,
        cache: KVCache,
        mask: Tensor | None,
        key_padding_mask: Tensor | None,
        need_weights: bool,
        average_weights: bool,
    ) -> AttentionOutput:
        """Queries of ``G`` consecutive rows per row of a static cache: beam search's ``G`` beams of
        one sentence over that sentence's keys/values, which are then kept once per sentence
        instead of once per beam. Cross-attention has no mask between queries, so the beams' queries
        are simply more queries over the same keys: ``(A·G, H, Nq, Dh) -> (A, H, G·Nq, Dh)``, one
        attention per sentence (a small matrix product instead of ``G`` vector products).
        ``key_padding_mask`` is per cache row ``(A, Nk)``."""
        bsz, nq, _ = query.shape
        a, h, nk, dh = cache.k.shape
        if bsz % a:
            raise ValueError(
                f"query batch size {bsz} (shape {tuple(query.shape)}) must be a multiple of the cache's {a} rows"
            )
        if mask is not None:
            raise ValueError("mask is not supported when query rows share a static cache's rows; use key_padding_mask")
        g = bsz // a
        m = _padding_to_mask(key_padding_mask, a, nk, heads=True)
        if not self.training:
            out, weights = self.step_cross(query, cache, m)  # (B, Nq, E), (B, H, Nq, Nk)
        else:
            q = self.project_query(query)  # (A·G, H, Nq, Dh)
            q = q.view(a, g, h, nq, dh).transpose(1, 2).reshape(a, h, g * nq, dh)  # (A, H, G·Nq, Dh)
            ctx, weights = attend(
                q,
                cache.k,
                cache.v,
                score="scaled_dot",
                mask=m,
                need_weights=True,
                dropout_p=self.dropout,
                training=True,
            )
            ctx = ctx.view(a, h, g, nq, dh).permute(0, 2, 3, 1, 4).reshape(bsz, nq, self.inner_dim)  # (B, Nq, H·Dh)
            out = self.out_proj(ctx)
            weights = weights.view(a, h, g, nq, nk).transpose(1, 2).reshape(bsz, h, nq, nk)  # (B, H, Nq, Nk)
        if not need_weights:
            return AttentionOutput(out, None)
        return AttentionOutput(out, weights.mean(dim=1) if average_weights else weights)

    # --- torch interoperability ---------------------------------------------------------------
    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy a ``torch.nn.MultiheadAttention`` (either ``batch_first``) into an attnkit module.

        The result is batch-first. Modules with ``bias_k``/``bias_v`` or ``add_zero_attn`` have no
        attnkit equivalent and raise ``ValueError``.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"module must be torch.nn.MultiheadAttention, got {type(module).__name__}")
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("torch MultiheadAttention with add_bias_kv or add_zero_attn has no attnkit equivalent")
        ours = cls(
            module.embed_dim,
            module.num_heads,
            dropout=module.dropout,
            bias=module.in_proj_bias is not None,
            kdim=module.kdim,
            vdim=module.vdim,
        )
        ours = ours.to(device=module.out_proj.weight.device, dtype=module.out_proj.weight.dtype)
        missing, unexpected = ours.load_state_dict(
            {k: v for k, v in module.state_dict().items() if v is not None}, strict=False
        )
        if missing or unexpected:
            raise ValueError(f"cannot convert: missing {missing}, unexpected {unexpected}")
        return ours

    def to_torch(self, *, batch_first: bool = True) -> nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention`` with the same weights (and ``batch_first``); not for pruned heads
        (torch's module has ``embed_dim / num_heads``-wide heads filling ``embed_dim``)."""
        if self.inner_dim != self.embed_dim:
            raise ValueError(
                f"cannot convert: {self.num_heads} heads of {self.head_dim} (pruned) do not fill embed_dim "
                f"{self.embed_dim}, which torch.nn.MultiheadAttention needs"
            )
        theirs = nn.MultiheadAttention(
            self.embed_dim,
            self.num_heads,
            dropout=self.dropout,
            bias=self.in_proj_bias is not None,
            kdim=self.kdim,
            vdim=self.vdim,
            batch_first=batch_first,
            device=self.out_proj.weight.device,
            dtype=self.out_proj.weight.dtype,
        )
        theirs.load_state_dict(self.state_dict(), strict=True)
        return theirs

    # Mask converters kept beside the module for discoverability; the one conversion lives in masks.py.
    to_torch_mask = staticmethod(to_torch_mha_mask)
    from_torch_mask = staticmethod(from_torch_mha_mask)
