"""A Hugging Face encoder-decoder's residual blocks, traced for the context-mixing decompositions
(attention-norm, value zeroing, ALTI+) and its full attention for rollout.

attnkit's decompositions (:mod:`attnkit.attribution.decomposition`) read every attention sub-layer as
a sum over its keys (Kobayashi et al. 2020)::

    out_i = N(r_i + Σ_j Σ_h α^h_ij f^h(u_j) + b_O),      f^h(u) = (W_V^h u + b_V^h) W_O^h

with ``r`` the residual stream the block adds to, ``u`` its key/value input and ``N`` the LayerNorm
after the sum (post-norm) or the identity (pre-norm, where ``u`` is ``LN(x)`` and ``r`` is ``x``).
The Bart-like families share one layer layout (``self_attn``, ``self_attn_layer_norm``,
``encoder_attn``, ``encoder_attn_layer_norm``, ``fc1``, ``fc2``, ``activation_fn``,
``final_layer_norm``; the attention modules' ``q_proj``/``k_proj``/``v_proj``/``out_proj`` and
``scaling``) and differ only in where the norms sit:

- post-norm: Marian, BART (``x ← LN(x + Attn(x))``, ``x ← LN(x + FFN(x))``);
- pre-norm: mBART, M2M100/NLLB, Pegasus (``x ← x + Attn(LN(x))``, ``x ← x + FFN(LN(x))``, and a
  final LayerNorm after each stack).

:func:`trace_seq2seq` runs the model once with forward hooks on every encoder and decoder layer
(their real inputs and outputs) and describes each attention sub-layer as a
:class:`~attnkit.attention.block_trace.BlockLayout` (its norms, its value projection and output rows,
its weights recomputed as ``softmax(q kᵀ · scaling)``, the rest of its layer);
:func:`~attnkit.attention.block_trace.trace_encoder_decoder` replays each layer from its real input
into the one per-block record every decomposition reads (the record attnkit's Transformer and the
language models give too) and checks that the replay gives the layer's real output: a family whose
blocks do not have this form fails the check with one line instead of being decomposed by guess. T5 (and mT5) are refused up
front: their RMSNorm scales without centering and has no bias, and a learned relative position bias
enters every attention score, so the decomposition above is not theirs.

Everything is over the model's full sequences, special tokens included (the source's ``</s>``,
BART's ``<s>``, M2M100's language code; the decoder's start and forced first token): they are real
inputs that the blocks mix. The trace's ``rows`` (the text's target positions) and ``cols`` (the text's
source pieces) say which of them attnkit shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..attention.block_trace import (
    BlockLayout,
    EncoderDecoderTrace,
    check_token_ids,
    per_head_output,
    softmax_weights,
    trace_encoder_decoder,
)
from ..hooks import thread_hooks
from .loading import HFModelError

__all__ = [
    "POST_NORM",
    "PRE_NORM",
    "FullAttention",
    "full_attention",
    "refusal",
    "trace_seq2seq",
]

POST_NORM = ("marian", "bart")
PRE_NORM = ("mbart", "m2m_100", "pegasus")
_T5 = (
    "its layers normalise with RMSNorm (a scale without centering or bias) and add a learned relative "
    "position bias to every attention score, so its blocks are not the LayerNorm blocks these "
    "decompositions split into per-input terms"
)
_NOT_DEFINED = {
    "t5": _T5,
    "mt5": _T5,
    "nllb-moe": "its feed-forward sub-layers are mixtures of experts, which attnkit does not trace",
}


def refusal(model_type: str) -> str | None:
    """Why the decompositions are not defined for ``model_type`` (one clause), or None where they are."""
    if model_type in POST_NORM or model_type in PRE_NORM:
        return None
    return _NOT_DEFINED.get(model_type, f"attnkit traces the blocks of {', '.join(POST_NORM + PRE_NORM)} models only")


def _layout(attn: nn.Module, norm: nn.Module, rest, causal: bool, post: bool) -> BlockLayout:
    """One attention sub-layer of the Bart-like layout: ``norm`` after the sum (post-norm) or before the
    attention (pre-norm); ``rest(m, r)`` the rest of the layer (None for a decoder's self-attention)."""
    nh, dh = int(attn.num_heads), int(attn.head_dim)

    def heads(proj: nn.Module, x: Tensor) -> Tensor:  # (N, D) -> (H, N, Dh)
        return proj(x).view(x.shape[0], nh, dh).transpose(0, 1)

    def values(u: Tensor):
        return heads(attn.v_proj, u), per_head_output(attn.out_proj.weight, nh, dh), attn.out_proj.bias

    def weights(u: Tensor, s: Tensor) -> Tensor:
        return softmax_weights(heads(attn.q_proj, u), heads(attn.k_proj, s), attn.scaling, causal)

    return BlockLayout(
        "post" if post else "pre", attn, None if post else norm, norm if post else None, values, rest, weights
    )


def _ffn(layer: nn.Module, post: bool):
    """The feed-forward sub-layer after the attention sub-block's result ``m``."""

    def ff(x: Tensor) -> Tensor:
        return layer.fc2(layer.activation_fn(layer.fc1(x)))

    if post:
        return lambda m, r: layer.final_layer_norm(m + ff(m))
    return lambda m, r: m + ff(layer.final_layer_norm(m))


def _pieces(adapter, src: Tensor, tgt_in: Tensor) -> tuple[slice, slice]:
    rows = slice(len(adapter.decoder_prefix) - 1, None)
    off = len(adapter.src_prefix)
    return rows, slice(off, off + src.shape[0])


@torch.no_grad()
def trace_seq2seq(adapter, src: Tensor, tgt_in: Tensor) -> EncoderDecoderTrace:
    """Trace ``adapter`` (an :class:`attnkit.hf.seq2seq.HFSeq2Seq`) on ``src (S,)`` and ``tgt_in (T,)``
    (one sentence's pieces, ``bos`` first in ``tgt_in``), in eval mode (see the module docstring).
    A family the decompositions are not defined for is an :class:`HFModelError`."""
    model_type = adapter.config.model_type
    reason = refusal(model_type)
    if reason is not None:
        raise HFModelError(f"the decompositions are not defined for {model_type} models: {reason}")
    check_token_ids(src=src, tgt_in=tgt_in)
    hf = adapter.hf
    encoder, decoder = hf.get_encoder(), hf.get_decoder()
    seen: dict[tuple[str, int], tuple[Tensor, Tensor]] = {}

    def watch(key):
        def hook(module, args, kwargs, output):
            x = args[0] if args else kwargs["hidden_states"]
            y = output[0] if isinstance(output, tuple) else output
            seen[key] = (x[0], y[0])  # (N, D) in and out: one sentence

        return hook

    watched = [(layer, watch(("enc", i))) for i, layer in enumerate(encoder.layers)]
    watched += [(layer, watch(("dec", i))) for i, layer in enumerate(decoder.layers)]
    watched.append((encoder, lambda m, a, kw, out: seen.__setitem__(("memory", 0), out[0][0])))
    was_training = adapter.training
    adapter.eval()
    try:
        with thread_hooks(watched, with_kwargs=True):
            out = adapter._run(src[None], torch.tensor([src.shape[0]], device=src.device), tgt_in[None])
        post = model_type in POST_NORM
        enc_layers = [
            (_layout(layer.self_attn, layer.self_attn_layer_norm, _ffn(layer, post), False, post), *seen[("enc", i)])
            for i, layer in enumerate(encoder.layers)
        ]
        dec_layers = [
            (
                _layout(layer.self_attn, layer.self_attn_layer_norm, None, True, post),
                _layout(layer.encoder_attn, layer.encoder_attn_layer_norm, _ffn(layer, post), False, post),
                *seen[("dec", i)],
            )
            for i, layer in enumerate(decoder.layers)
        ]
        memory = seen[("memory", 0)]  # (S', D): the encoder's output, after its final LayerNorm where it has one
        enc, dec = trace_encoder_decoder(enc_layers, dec_layers, memory, model_type, HFModelError)
        logits = adapter._logits_from(out.last_hidden_state[0] * adapter.feature_scale)  # (T', V)
    finally:
        adapter.train(was_training)
    rows, cols = _pieces(adapter, src, tgt_in)
    return EncoderDecoderTrace(enc, dec, memory, logits, rows, cols)


@dataclass
class FullAttention:
    """Every layer's and head's encoder self-attention ``enc_self (L, H, S', S')`` and cross-attention
    ``cross (L, H, T', S')`` over the model's full sequences (special tokens included), with the
    ``rows`` and ``cols`` of the text's target positions and source pieces."""

    enc_self: Tensor
    cross: Tensor
    rows: slice
    cols: slice


@torch.no_grad()
def full_attention(adapter, src: Tensor, tgt_in: Tensor) -> FullAttention:
    """The attention that rollout composes (Abnar & Zuidema 2020), captured from the running model
    (:mod:`attnkit.hf.capture`) for one sentence pair, special tokens kept: a rollout over the pieces
    alone would renormalise rows that gave weight to ``</s>`` as if they had not. Every family."""
    check_token_ids(src=src, tgt_in=tgt_in)
    got: dict[tuple[str, int], Tensor] = {}
    sites = [s for s in adapter.sites if s.kind in ("enc_self", "cross")]
    adapter._run(
        src[None],
        torch.tensor([src.shape[0]], device=src.device),
        tgt_in[None],
        lambda s, w: got.__setitem__((s.kind, s.layer), w[0]),
        sites,
    )

    def stack(kind):  # (L, H, Nq, Nk)
        return torch.stack([got[(kind, i)] for i in range(1 + max(k[1] for k in got if k[0] == kind))])

    rows, cols = _pieces(adapter, src, tgt_in)
    return FullAttention(stack("enc_self"), stack("cross"), rows, cols)
