"""One recorded layer of a decoder-only model replayed at chosen query positions only: what a top-down
walk over the layers (:mod:`attnkit.attribution.information_flow`) needs at a long prompt, where the
layer's whole ``(H, N, N)`` attention map (quadratic in the prompt's length) would be the largest thing
in memory.

The layer's attention module is rerun on its recorded input (:func:`~attnkit.hf.lm_decomposition.record_lm`)
and stopped at its call to ``transformers``' attention interface, which hands over the queries and keys
the model really uses (after its projections, rotary positions and query/key norms) and the mask it
built (causal, sliding window): :func:`~attnkit.hf.capture.watch_attention_call`. The weights of the
chosen rows ``R`` only are then computed as :mod:`attnkit.hf.capture` computes every row::

    α[:, R, :] = softmax(Q[R] Kᵀ · scaling + M[R])          # (H, |R|, K), K = max(R) + 1 keys

(keys after the last chosen row carry no weight in a decoder). The block is rebuilt at those rows
from its parts as :func:`~attnkit.hf.lm_decomposition.replay_layer` rebuilds it at every row (the
attention's output ``Σ_h α^h_i: v^h W_O^h + b_O``, the attention sub-block's result ``mid``, the
norm after the attention linearised at each row's real input, the MLP: all position-wise but the
mixing) and checked against the recorded output at those rows. Under ``eager`` attention, where the
module computes its weights itself, the whole map is captured once and its rows are read from it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor

from .capture import attention_sites, attention_weights, capture_attention, untraceable, watch_attention_call
from .lm_blocks import block_layout, layer_stack
from .lm_decomposition import LMRecording, check_replay, linearise_norm
from .transformers_internals import attention_implementation

__all__ = ["LMRowParts", "LayerRows"]


@dataclass
class LMRowParts:
    """One block at the query positions ``rows`` (sorted, 0-based) only: ``weights (H, k, K)`` (α of
    those rows over the keys ``0..K-1``, ``K = max(rows) + 1``), ``head_values (H, K, Dh)`` and ``w_o
    (H, Dh, D)`` (``f^h(u_j) = head_values[h, j] @ w_o[h]``), and ``residual``, ``mid``, ``out (k, D)``
    at the rows; ``scale (k, D)`` and ``center``: the linear part of the norm after the attention at
    each row's real input (None in a pre-norm block), as in
    :class:`~attnkit.hf.lm_decomposition.LMLayerParts`."""

    layer: int
    rows: list[int]
    weights: Tensor
    head_values: Tensor
    w_o: Tensor
    residual: Tensor
    mid: Tensor
    out: Tensor
    scale: Tensor | None = None
    center: bool = False


class _Taken(Exception):
    """Raised inside the attention module once its queries and keys are in hand: the rest is not needed."""


class LayerRows:
    """Layer ``i`` (0-based) of a recorded pass, ready to be replayed at any rows up to ``keys - 1``
    (:meth:`parts`): its queries and keys (or, under ``eager``, its whole map) and its values for the
    first ``keys`` positions, held until the object is dropped."""

    def __init__(self, rec: LMRecording, i: int, keys: int) -> None:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < rec.n_layers:
            raise ValueError(f"i must be a layer index in 0..{rec.n_layers - 1}, got {i!r}")
        n = int(rec.inputs[i].shape[0])
        if isinstance(keys, bool) or not isinstance(keys, int) or not 1 <= keys <= n:
            raise ValueError(f"keys must be a number of positions in 1..{n}, got {keys!r}")
        self.rec, self.i, self.keys = rec, i, keys
        layer = layer_stack(rec.model)[i]
        self.layout = lay = block_layout(rec.model_type, layer)
        x = rec.inputs[i]
        with torch.no_grad():
            u = x if lay.pre_norm is None else lay.pre_norm(x)  # (N, D)
            self.head_values, self.w_o, self.bias = lay.values(u[:keys])  # (H, K, Dh), (H, Dh, D)
            self._map: Tensor | None = None
            self._inputs: dict = {}
            args, kwargs = rec.calls[i]
            if attention_implementation(rec.model) == "sdpa":
                self._take_inputs(lay.attn, u, args, kwargs)
            else:  # eager: the module forms its weights itself; take them whole
                site = next(s for s in attention_sites(rec.model) if s.module is lay.attn)
                got: dict[str, Tensor] = {}
                with capture_attention(rec.model, lambda s, w: got.__setitem__("w", w[0]), sites=[site]):
                    lay.attn(u[None], *args, **kwargs)
                self._map = got["w"]  # (H, N, N)

    def _take_inputs(self, attn, u: Tensor, args: tuple, kwargs: dict) -> None:
        def record(module, query, key, attention_mask, kw):
            self._inputs.update(query=query, key=key, mask=attention_mask, kwargs=kw)
            raise _Taken

        with watch_attention_call(attn, record), contextlib.suppress(_Taken):  # stopped at the interface
            attn(u[None], *args, **kwargs)
        if not self._inputs:
            raise untraceable(
                self.rec.model,
                f"its attention modules ({type(attn).__name__}) do not call transformers' attention interface",
            )

    def _weights(self, rows: Tensor, keys: int) -> Tensor:
        """``(H, k, keys)``: α at ``rows`` over the first ``keys`` keys."""
        if self._map is not None:
            return self._map[:, rows, :keys].to(self.head_values.dtype)
        q, k, mask, kw = (self._inputs[n] for n in ("query", "key", "mask", "kwargs"))
        causal = kw.get("is_causal")
        causal = getattr(self.layout.attn, "is_causal", True) if causal is None else causal
        if mask is not None:
            mask = mask[..., rows, :keys]  # (B, 1 or H, k, keys)
        elif causal:  # sdpa's causal mask without a tensor: query i sees keys 0..i
            mask = torch.arange(keys, device=rows.device)[None, :] <= rows[:, None]  # (k, keys)
        bias = kw.get("position_bias")
        w = attention_weights(
            q[:, :, rows],
            k[:, :, :keys],
            mask,
            scaling=kw.get("scaling"),
            position_bias=None if bias is None else bias[..., rows, :keys],
        )
        return w[0].to(self.head_values.dtype)  # (H, k, keys)

    def parts(self, rows: list[int]) -> LMRowParts:
        """The block at ``rows`` (sorted positions, each below ``keys``), checked against the recorded
        output at those rows (one-line :class:`~attnkit.hf.loading.HFModelError` where the replay does
        not reproduce it)."""
        if not rows or rows != sorted(rows) or rows[0] < 0 or rows[-1] >= self.keys:
            raise ValueError(f"rows must be sorted positions in 0..{self.keys - 1}, got {rows!r}")
        lay, rec = self.layout, self.rec
        idx = torch.tensor(rows, dtype=torch.long, device=self.head_values.device)
        keys = rows[-1] + 1
        with torch.no_grad():
            weights = self._weights(idx, keys)  # (H, k, keys)
            v = self.head_values[:, :keys]  # (H, keys, Dh)
            attention = torch.einsum("hnk,hkd->nd", weights @ v, self.w_o)  # (k, D)
            if self.bias is not None:
                attention = attention + self.bias
            x = rec.inputs[self.i][idx]  # (k, D)
            mid = lay.mix(x, attention)
            scale, center = None, False
            if lay.post_norm is not None:  # linear given the statistics of its real input
                scale, center, _ = linearise_norm(lay.post_norm, attention if lay.kind == "sandwich" else x + attention)
            out = lay.rest(mid, x)
            check_replay(out, rec.outputs[self.i][idx], f"layer {self.i + 1}", rec.model_type)
        return LMRowParts(self.i, list(rows), weights, v, self.w_o, x, mid, out, scale, center)
