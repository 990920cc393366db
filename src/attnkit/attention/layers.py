"""Attention layers (``torch.nn.Module``, batch-first) built on :func:`attend`.

- :class:`Attention`: a query (e.g. a decoder state) attends over a set of input vectors, with any
  score and optional learned key/value projections; keys can be prepared once and reused.
- :class:`SelfAttention`: one head of self-attention with learned Q/K/V projections, any score.
- :class:`MultiHeadAttention`: ``torch.nn.MultiheadAttention``-compatible parameters, per-head
  weights on request, key/value cache for incremental decoding, conversion to and from torch.
- :class:`AttentionPooling`: ``N_Q`` learned queries summarise ``N_X`` inputs.
- :class:`SpatialSelfAttention`: self-attention over the positions of a CNN feature map.
- :class:`SelfAttentiveEncoder`: self-attention over the states of an RNN, CNN or linear layer — ``H = L(X)``, ``c_i = Σ_j a_ij h_j``, output ``[h_i; c_i]``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .functional import AttentionOutput, HardAttention, attend, attend_hard, masked_softmax
from .kv_cache import KVCache
from .masks import (
    causal_mask,
    check_mask,
    combine_masks,
    from_torch_mha_mask,
    key_mask,
    padding_mask,
    to_torch_mha_mask,
)
from .scores import ScoreModule, canonical_score_name, make_score

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


def _attend_step(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """``softmax(q·kᵀ/√d)·v`` and the weights, for a decoder step: the very operations of
    :func:`attend`'s explicit path (the same numbers), without its argument checks, which cost as much
    as the products for one query (the layer made these shapes itself)."""
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)  # (B, H, Nq, Nk)
    weights = masked_softmax(scores, mask)
    return weights @ v, weights


def _detached(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.detach().float()


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
    - ``cache``: a :class:`KVCache` for incremental decoding (make one with :meth:`new_cache`). A
      growing cache (self-attention): this call's keys/values are appended and the query attends
      over all of them. A static cache (cross-attention): keys/values are projected on the first
      call (or by :meth:`new_cache` from the encoder output) and reused afterwards (``key``/
      ``value`` are then not read and may be ``None``). A static cache may hold one row per ``G``
      consecutive query rows (beam search's beams of one sentence): the query batch is then ``G``
      times the cache's, and ``key_padding_mask`` is per cache row.
      With a cache the attention runs as ``softmax(q·kᵀ/√d)·v`` in explicit products, not the fused
      kernel (faster on the CPU for the one query of a decoder step).
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
    ):
        super().__init__()
        if not isinstance(embed_dim, int) or embed_dim <= 0:
            raise ValueError(f"embed_dim must be a positive int, got {embed_dim!r}")
        if not isinstance(num_heads, int) or num_heads <= 0:
            raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout = dropout
        self.packed = self.kdim == embed_dim and self.vdim == embed_dim
        if self.packed:
            self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = nn.Parameter(torch.empty(embed_dim, embed_dim))
            self.k_proj_weight = nn.Parameter(torch.empty(embed_dim, self.kdim))
            self.v_proj_weight = nn.Parameter(torch.empty(embed_dim, self.vdim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim)) if bias else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self._int8: dict | None = None  # int8 copies of the projections (quantize_projections_int8)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections and zero biases, as ``torch.nn.MultiheadAttention``."""
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
        from ..decoding.output_layer import int8_linear

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
            qkv = qkv.view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, N, Dh)
            return qkv[0], qkv[1], qkv[2]
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
        out = self.out_proj(ctx.transpose(1, 2).reshape(bsz, nq, self.embed_dim))
        if weights is not None and average_weights:
            weights = weights.mean(dim=1)
        return AttentionOutput(out, weights)

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
        q = self.project_query(query)  # (A·G, H, Nq, Dh)
        q = q.view(a, g, h, nq, dh).transpose(1, 2).reshape(a, h, g * nq, dh)  # (A, H, G·Nq, Dh)
        m = _padding_to_mask(key_padding_mask, a, nk, heads=True)
        if self.training:
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
        else:
            ctx, weights = _attend_step(q, cache.k, cache.v, m)  # (A, H, G·Nq, Dh), (A, H, G·Nq, Nk)
        ctx = ctx.view(a, h, g, nq, dh).permute(0, 2, 3, 1, 4).reshape(bsz, nq, self.embed_dim)  # (B, Nq, E)
        out = self.out_proj(ctx)
        if not need_weights:
            return AttentionOutput(out, None)
        weights = weights.view(a, h, g, nq, nk).transpose(1, 2).reshape(bsz, h, nq, nk)  # (B, H, Nq, Nk)
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
        """A ``torch.nn.MultiheadAttention`` with the same weights (and ``batch_first``)."""
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


class SpatialSelfAttention(nn.Module):
    """Self-attention over the ``H×W`` positions of a CNN feature map (the "attention in ConvNets").

    ``f = W_f x``, ``g = W_g x``, ``h = W_h x`` (1×1 convolutions); every position attends over
    every other, ``o_i = Σ_j softmax_j(f_i·g_j) h_j``, and ``y = γ·W_o o + x`` with ``γ`` learned
    and starting at 0, so the block begins as the identity (Zhang et al., SAGAN).

    ``forward(x (B, C, H, W), need_weights=False) -> (y (B, C, H, W), weights (B, HW, HW) or None)``.
    """

    def __init__(
        self, channels: int, *, key_channels: int | None = None, value_channels: int | None = None, score: str = "dot"
    ):
        super().__init__()
        key_channels = key_channels or max(1, channels // 8)
        value_channels = value_channels or channels
        self.channels = channels
        self.f = nn.Conv2d(channels, key_channels, 1)
        self.g = nn.Conv2d(channels, key_channels, 1)
        self.h = nn.Conv2d(channels, value_channels, 1)
        self.o = nn.Conv2d(value_channels, channels, 1)
        self.gamma = nn.Parameter(torch.zeros(()))
        self.score = canonical_score_name(score)
        if self.score not in ("dot", "scaled_dot"):
            raise ValueError(f"score must be 'dot' or 'scaled_dot' for SpatialSelfAttention, got {score!r}")

    def forward(self, x: Tensor, need_weights: bool = False) -> AttentionOutput:
        _check_rank("x", x, (4,), "(B, C, H, W)")
        if x.shape[1] != self.channels:
            raise ValueError(f"x must have {self.channels} channels, got shape {tuple(x.shape)}")
        b, _, hgt, wid = x.shape
        q = self.f(x).flatten(2).transpose(1, 2)  # (B, HW, Ck)
        k = self.g(x).flatten(2).transpose(1, 2)  # (B, HW, Ck)
        v = self.h(x).flatten(2).transpose(1, 2)  # (B, HW, Cv)
        ctx, weights = attend(q, k, v, score=self.score, need_weights=need_weights)  # (B, HW, Cv)
        o = ctx.transpose(1, 2).reshape(b, -1, hgt, wid)
        return AttentionOutput(self.gamma * self.o(o) + x, weights)


class SelfAttentiveEncoder(nn.Module):
    """Self-attention over the hidden states of a base layer ``L``, each state extended with its context.

    ``H = (h_1..h_n) = L(X)`` where ``L`` is a GRU, an LSTM, a 1-D CNN or a position-wise linear
    layer; ``e_ij = f(h_i, h_j)``, ``a_ij = softmax_j(e_ij)``, ``c_i = Σ_j a_ij h_j``, and the
    output is ``X^next = ([h_1; c_1], …, [h_n; c_n])``.

    ``forward(x (B, N, D_in), lengths=None, need_weights=False) -> (y (B, N, 2·D_h), weights (B, N, N) or None)``
    where ``D_h = hidden_dim`` (×2 for a bidirectional RNN). Padded positions (from ``lengths``)
    are never attended to, and their outputs are zero.
    """

    BASES = ("gru", "lstm", "rnn", "cnn", "linear")

    def __init__(
        self,
        input_dim: int,
        hidden_dim: int,
        *,
        base: str = "gru",
        bidirectional: bool = False,
        num_layers: int = 1,
        kernel_size: int = 3,
        score: str | ScoreModule = "scaled_dot",
    ):
        super().__init__()
        if base not in self.BASES:
            raise ValueError(f"base must be one of {self.BASES}, got {base!r}")
        if base in ("cnn",) and kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd so outputs align with inputs, got {kernel_size}")
        self.base, self.input_dim = base, input_dim
        if base in ("gru", "lstm", "rnn"):
            rnn = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}[base]
            self.layer = rnn(
                input_dim, hidden_dim, num_layers=num_layers, batch_first=True, bidirectional=bidirectional
            )
            self.hidden_size = hidden_dim * (2 if bidirectional else 1)
        elif base == "cnn":
            self.layer = nn.Conv1d(input_dim, hidden_dim, kernel_size, padding=kernel_size // 2)
            self.hidden_size = hidden_dim
        else:
            self.layer = nn.Linear(input_dim, hidden_dim)
            self.hidden_size = hidden_dim
        self.score = make_score(score, self.hidden_size, self.hidden_size)
        self.output_dim = 2 * self.hidden_size

    def forward(self, x: Tensor, lengths: Tensor | None = None, need_weights: bool = False) -> AttentionOutput:
        _check_rank("x", x, (3,), "(B, N, D_in)")
        _check_last_dim("x", x, self.input_dim, "(B, N, D_in)")
        b, n, _ = x.shape
        valid = None
        if lengths is not None:
            if lengths.shape != (b,):
                raise ValueError(f"lengths must have shape (B,) = ({b},), got {tuple(lengths.shape)}")
            valid = padding_mask(lengths.to(x.device), n)  # (B, N)
        if self.base in ("gru", "lstm", "rnn"):
            if lengths is not None:
                packed = nn.utils.rnn.pack_padded_sequence(
                    x, lengths.cpu().clamp_min(1), batch_first=True, enforce_sorted=False
                )
                h, _ = self.layer(packed)
                h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=n)
            else:
                h, _ = self.layer(x)
        elif self.base == "cnn":
            xin = x if valid is None else x * valid.unsqueeze(-1)
            h = torch.relu(self.layer(xin.transpose(1, 2))).transpose(1, 2)  # (B, N, D_h)
        else:
            h = torch.tanh(self.layer(x))  # (B, N, D_h)
        if valid is not None:
            h = h * valid.unsqueeze(-1)
        m = key_mask(valid) if valid is not None else None  # (B, 1, N)
        c, weights = attend(h, h, h, score=self.score, mask=m, need_weights=need_weights)  # (B, N, D_h)
        if valid is not None:
            c = c * valid.unsqueeze(-1)
        return AttentionOutput(torch.cat([h, c], dim=-1), weights)  # (B, N, 2·D_h)
