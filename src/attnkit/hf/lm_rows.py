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

import torch
from torch import Tensor

from ..attention.block_trace import LayerRows, LMRecording, LMRowParts
from .capture import attention_sites, attention_weights, capture_attention, untraceable, watch_attention_call
from .lm_blocks import block_layout, layer_stack
from .loading import HFModelError
from .transformers_internals import attention_implementation

__all__ = ["HFLayerRows", "LMRowParts"]


class _Taken(Exception):
    """Raised inside the attention module once its queries and keys are in hand: the rest is not needed."""


class HFLayerRows(LayerRows):
    """:class:`~attnkit.attention.block_trace.LayerRows` of a Hugging Face model: under ``sdpa`` the layer's
    queries and keys taken once (its attention module stopped at the interface), each chunk's rows of α
    formed from them; under ``eager`` the whole map captured once (module docstring)."""

    def __init__(self, rec: LMRecording, i: int, keys: int) -> None:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < rec.n_layers:
            raise ValueError(f"i must be a layer index in 0..{rec.n_layers - 1}, got {i!r}")
        lay = block_layout(rec.model_type, layer_stack(rec.model)[i])
        super().__init__(rec, i, keys, lay, HFModelError)
        self._map: Tensor | None = None
        self._inputs: dict = {}
        args, kwargs = rec.calls[i]
        with torch.no_grad():
            if attention_implementation(rec.model) == "sdpa":
                self._take_inputs(lay.attn, self.u, args, kwargs)
            else:  # eager: the module forms its weights itself; take them whole
                site = next(s for s in attention_sites(rec.model) if s.module is lay.attn)
                got: dict[str, Tensor] = {}
                with capture_attention(rec.model, lambda s, w: got.__setitem__("w", w[0]), sites=[site]):
                    lay.attn(self.u[None], *args, **kwargs)
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
