"""A Transformer translator's forward pass for one sentence pair, replayed block by block as the one
per-block record every decomposition reads (:class:`~attnkit.attention.block_trace.LMLayerParts`, the
record attnkit's language models and the Hugging Face models give too): attention × ‖value‖, value
zeroing, ALTI+ (:mod:`attnkit.attribution.decomposition`).

Every multi-head attention output is a sum over keys (Kobayashi et al. 2020)::

    Attn(x)_i = Σ_j Σ_h α^h_ij f^h(u_j) + b_O,      f^h(u) = (W_V^h u + b_V^h) W_O^h

with ``u`` the block's key/value input (``LN(x)`` in a pre-norm block, ``x`` in a post-norm one, the
encoder output ``m`` in cross-attention: the record's ``source``) and ``W_O^h`` head h's rows of the
output projection. Each record keeps ``α (H, Nq, Nk)``, each head's values and output rows, ``b_O``,
the residual stream the block adds to, the LayerNorm after the sum (post-norm) linearised at its real
input, and the rest of the layer, so the terms ``T_ij = Σ_h α^h_ij f^h(u_j)`` add up to the block's
output exactly.

:func:`trace_transformer` runs the model once with forward hooks on its encoder and decoder layers
(their real inputs and outputs), replays each layer from its real input with the model's own modules
(``encoder.layers[l].self_attn``, ``norm1`` ..., the decoder's ``multihead_attn``), in eval mode, for
one unpadded sentence, ``src (S,)``, ``tgt_in (T,)``, and refuses in one line (:class:`TraceError`)
where a replayed layer does not give the layer's real output
(:func:`~attnkit.attention.block_trace.trace_encoder_decoder`).

Other translation models take part through two members: ``decomposition_trace(src, tgt_in)``, giving
the same :class:`~attnkit.attention.block_trace.EncoderDecoderTrace` (with ``rows``/``cols``: the
positions that are the text's target pieces and source pieces, the rest being the model's special
tokens), and ``decomposition_refusal`` (None, or the one line saying why the decompositions are not
defined for the model). A Hugging Face encoder-decoder has them (:mod:`attnkit.hf.decomposition`);
:func:`trace_model` reads either kind.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention.block_trace import (
    BlockLayout,
    DecoderLayerParts,
    EncoderDecoderTrace,
    check_token_ids,
    per_head_output,
    softmax_weights,
    trace_encoder_decoder,
)
from ..hooks import thread_hooks

__all__ = [
    "DecoderLayerParts",
    "EncoderDecoderTrace",
    "TransformerTrace",
    "decomposable",
    "decomposition_refusal",
    "is_transformer",
    "trace_model",
    "trace_transformer",
]

TransformerTrace = EncoderDecoderTrace  # what trace_transformer gives (rows and cols: every position)


def is_transformer(model) -> bool:
    """Whether ``model`` is an attnkit encoder-decoder Transformer (the family these methods are defined on)."""
    from ..models.transformer import TransformerTranslator

    return isinstance(model, TransformerTranslator)


def _layout(mha, norm: nn.Module, rest, causal: bool, norm_first: bool) -> BlockLayout:
    """One attention sub-layer of attnkit's Transformer (:class:`~attnkit.attention.multihead.MultiHeadAttention`),
    ``norm`` before it (pre-norm) or after the sum (post-norm); ``rest(m, r)`` the rest of the layer."""
    nh, dh = mha.num_heads, mha.head_dim

    def heads(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:  # (N, D) -> (H, N, Dh)
        return F.linear(x, w, b).view(x.shape[0], nh, dh).transpose(0, 1)

    def values(u: Tensor):
        _, _, wv = mha._weights()
        _, _, bv = mha._biases()
        return heads(u, wv, bv), per_head_output(mha.out_proj.weight, nh, dh), mha.out_proj.bias

    def weights(u: Tensor, s: Tensor) -> Tensor:
        (wq, wk, _), (bq, bk, _) = mha._weights(), mha._biases()
        return softmax_weights(heads(u, wq, bq), heads(s, wk, bk), 1.0 / math.sqrt(dh), causal)

    if norm_first:
        return BlockLayout("pre", mha, norm, None, values, rest, weights)
    return BlockLayout("post", mha, None, norm, values, rest, weights)


def _ffn(layer: nn.Module, norm: nn.Module):
    """The feed-forward sub-layer after the attention sub-block's result ``m``: ``m + FFN(N(m))`` (pre-norm)
    or ``N(m + FFN(m))`` (post-norm)."""
    if layer.norm_first:
        return lambda m, r: m + layer._ff(norm(m))
    return lambda m, r: norm(m + layer._ff(m))


@torch.no_grad()
def trace_transformer(model, src: Tensor, tgt_in: Tensor) -> EncoderDecoderTrace:
    """Replay ``model`` (a :class:`attnkit.models.TransformerTranslator`) on ``src (S,)`` and
    ``tgt_in (T,)`` token ids (one sentence, no padding), in eval mode (see the module docstring)."""
    if not is_transformer(model):
        raise TypeError(f"model must be an attnkit TransformerTranslator, got {type(model).__name__}")
    check_token_ids(src=src, tgt_in=tgt_in)
    seen: dict[tuple[str, int], tuple[Tensor, Tensor]] = {}

    def watch(key):
        def hook(module, args, kwargs, output):
            x = args[0] if args else kwargs[next(iter(kwargs))]
            seen[key] = (x[0], output[0][0])  # (N, D) in and out: one sentence

        return hook

    watched = [(layer, watch(("enc", i))) for i, layer in enumerate(model.encoder.layers)]
    watched += [(layer, watch(("dec", i))) for i, layer in enumerate(model.decoder.layers)]
    memory: list[Tensor] = []  # (S, D): the decoder's memory, the encoder's output (after its final LayerNorm)
    watched.append((model.decoder, lambda m, a, kw, out: memory.append(a[1][0])))
    was_training = model.training
    model.eval()
    try:
        with thread_hooks(watched, with_kwargs=True):
            logits, _ = model(src[None], torch.tensor([src.shape[0]], device=src.device), tgt_in[None])
        encoder = [
            (
                _layout(layer.self_attn, layer.norm1, _ffn(layer, layer.norm2), False, layer.norm_first),
                *seen[("enc", i)],
            )
            for i, layer in enumerate(model.encoder.layers)
        ]
        decoder = [
            (
                _layout(layer.self_attn, layer.norm1, None, True, layer.norm_first),
                _layout(layer.multihead_attn, layer.norm2, _ffn(layer, layer.norm3), False, layer.norm_first),
                *seen[("dec", i)],
            )
            for i, layer in enumerate(model.decoder.layers)
        ]
        enc, dec = trace_encoder_decoder(encoder, decoder, memory[0], "attnkit Transformer")
    finally:
        model.train(was_training)
    return EncoderDecoderTrace(enc, dec, memory[0], logits[0])


def decomposition_refusal(model) -> str | None:
    """The model's own line on why the decompositions are not defined for it, or None."""
    return None if is_transformer(model) else getattr(model, "decomposition_refusal", None)


def decomposable(model) -> bool:
    """Whether the decomposition-based methods are defined for ``model``: attnkit's Transformer, or a
    model that traces its blocks (``decomposition_trace``) and does not refuse (see the module docstring)."""
    if is_transformer(model):
        return True
    return callable(getattr(model, "decomposition_trace", None)) and decomposition_refusal(model) is None


def trace_model(model, src: Tensor, tgt_in: Tensor) -> tuple[EncoderDecoderTrace, slice, slice]:
    """``(trace, rows, cols)`` for ``model`` on ``src (S,)`` and ``tgt_in (T,)``: the trace's target
    positions ``rows`` and source positions ``cols`` are the text's pieces (all of them for attnkit's
    Transformer; a Hugging Face model's traces also hold its special tokens)."""
    trace = trace_transformer(model, src, tgt_in) if is_transformer(model) else model.decomposition_trace(src, tgt_in)
    return trace, trace.rows, trace.cols
