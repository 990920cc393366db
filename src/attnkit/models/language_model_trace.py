"""attnkit's own language model traced block by block, natively: the
:class:`~attnkit.attention.block_trace.BlockTracer` of :class:`~attnkit.models.language_model.LanguageModel`.

The hook points are the model's own blocks (:class:`~attnkit.models.language_model.DecoderBlock`): a
forward hook on each, registered for one call and removed in ``finally``, sees the block's input and
output, and the weights the block's :class:`~attnkit.attention.CausalSelfAttention` really used (asked for
with ``need_weights``; the hook takes them out of the block's output, so the model holds no layer's
``(H, N, N)`` map after the hook has run). Each block is pre-norm (``m = r + a(N₁(r))``, ``out = m +
MLP(N₂(m))``, no MLP in an attention-only model), its values ``v^h = W_V^h N₁(r)`` repeated over the query
heads of their key/value group, and every replay is checked against the block's real output.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention.block_trace import (
    BlockLayout,
    BlockTracer,
    LayerRows,
    LMLayerParts,
    LMRecording,
    LMTrace,
    block_parts,
    check_replay,
    expand_kv,
    per_head_output,
)
from ..errors import TraceError
from ..hooks import thread_hooks
from .language_model import DecoderBlock, LanguageModel

__all__ = ["LanguageModelTracer"]


def block_layout(block: DecoderBlock) -> BlockLayout:
    """The :class:`~attnkit.attention.block_trace.BlockLayout` of one of attnkit's decoder blocks."""
    attn = block.self_attn
    nh, dh = attn.n_heads, attn.head_dim

    def values(u: Tensor):  # u (N, D)
        v = F.linear(u, attn.v_proj.weight, attn.v_proj.bias).view(u.shape[0], attn.n_kv_heads, dh).transpose(0, 1)
        return expand_kv(v, nh), per_head_output(attn.o_proj.weight, nh, dh), attn.o_proj.bias  # (H, N, Dh)

    def rest(m: Tensor, r: Tensor) -> Tensor:
        return m if block.mlp is None else m + block.mlp(block.post_attention_layernorm(m))

    return BlockLayout("pre", attn, block.input_layernorm, None, values, rest)


class _Rows(LayerRows):
    """A recorded layer's whole map over its first ``keys`` positions, taken once from the attention
    module itself (causal: a prefix's map is the whole map's top-left corner); rows read from it."""

    def __init__(self, rec: LMRecording, i: int, keys: int, layout: BlockLayout) -> None:
        super().__init__(rec, i, keys, layout, TraceError)
        with torch.no_grad():
            self._map = layout.attn(self.u[None, :keys], need_weights=True).weights[0]  # (H, K, K)

    def _weights(self, rows: Tensor, keys: int) -> Tensor:
        return self._map[:, rows, :keys]


class LanguageModelTracer(BlockTracer):
    """The blocks of ``model``, an attnkit :class:`~attnkit.models.language_model.LanguageModel` (eval mode)."""

    def __init__(self, model: LanguageModel):
        if not isinstance(model, LanguageModel):
            raise TypeError(f"model must be an attnkit LanguageModel, got {type(model).__name__}")
        self.model = model
        self.model_type = f"attnkit {model.config.shape}-shaped language"
        self.decoder = True
        self.n_layers = len(model.layers)

    def _watch(self, on_block: Callable[[int, Tensor, Tensor, Tensor | None], None]):
        """A block of forward hooks on every block, this thread's passes only (:func:`attnkit.hooks.thread_hooks`),
        calling ``on_block(i, input (N, D), output (N, D), weights or None)``; each hook hands the block's output
        on without its weights."""

        def watch(i: int):
            def hook(module, args, output):
                h, w = output
                on_block(i, args[0][0], h[0], None if w is None else w[0])
                return h, None

            return hook

        return thread_hooks((layer, watch(i)) for i, layer in enumerate(self.model.layers))

    @torch.no_grad()
    def trace(self, input_ids: Tensor, on_layer: Callable[[LMLayerParts], None]) -> LMTrace:
        self.check_ids(input_ids)
        seen: dict[str, Tensor] = {}

        def on_block(i: int, x: Tensor, y: Tensor, w: Tensor | None) -> None:
            if i == 0:
                seen["embedding"] = x
            parts = block_parts(block_layout(self.model.layers[i]), i, x, w)
            check_replay(parts.out, y, f"layer {i + 1}", self.model_type)
            on_layer(parts)
            seen["final"] = y

        with self._watch(on_block):
            out = self.model(input_ids[None], need_weights=True)
        return LMTrace(seen["embedding"], seen["final"], out.logits[0], self.model_type)

    @torch.no_grad()
    def record(self, input_ids: Tensor, *, logits_at: int | None = None) -> LMRecording:
        self.check_ids(input_ids)
        n = int(input_ids.shape[0])
        if logits_at is not None and (
            isinstance(logits_at, bool) or not isinstance(logits_at, int) or not 0 <= logits_at < n
        ):
            raise ValueError(f"logits_at must be a position in 0..{n - 1}, got {logits_at!r}")
        inputs: dict[int, Tensor] = {}
        outputs: dict[int, Tensor] = {}

        def on_block(i: int, x: Tensor, y: Tensor, w: Tensor | None) -> None:
            inputs[i], outputs[i] = x, y

        with self._watch(on_block):
            features = self.model(input_ids[None], features_only=True).features[0]  # (N, D)
        count = self.n_layers
        at = features if logits_at is None else features[logits_at : logits_at + 1]
        logits = self.model.lm_head(at)  # (N, V) or (1, V)
        trace = LMTrace(inputs[0], outputs[count - 1], logits if logits_at is None else None, self.model_type)
        return LMRecording(
            self.model,
            self.model_type,
            [inputs[i] for i in range(count)],
            [outputs[i] for i in range(count)],
            [],
            trace,
            None if logits_at is None else logits[0],
        )

    @torch.no_grad()
    def replay(self, rec: LMRecording, i: int) -> LMLayerParts:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < rec.n_layers:
            raise ValueError(f"i must be a layer index in 0..{rec.n_layers - 1}, got {i!r}")
        lay = block_layout(self.model.layers[i])
        x = rec.inputs[i]
        w = lay.attn(lay.pre_norm(x)[None], need_weights=True).weights[0]  # (H, N, N)
        parts = block_parts(lay, i, x, w)
        check_replay(parts.out, rec.outputs[i], f"layer {i + 1}", self.model_type)
        return parts

    def layer_rows(self, rec: LMRecording, i: int, keys: int) -> LayerRows:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < rec.n_layers:
            raise ValueError(f"i must be a layer index in 0..{rec.n_layers - 1}, got {i!r}")
        return _Rows(rec, i, keys, block_layout(self.model.layers[i]))

    def final_norm(self) -> nn.Module:
        return self.model.norm

    def unembedding(self) -> nn.Module:
        return self.model.lm_head
