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
(their real inputs and outputs), replays each layer from its real input with the module's own
weights, keeping ``α (H, Nq, Nk)``, ``f (H, Nk, D)``, ``b_O``, the residual and the post-norm, and
checks that the replay gives the layer's real output: a family whose blocks do not have this form
fails the check with one line instead of being decomposed by guess. T5 (and mT5) are refused up
front: their RMSNorm scales without centering and has no bias, and a learned relative position bias
enters every attention score, so the decomposition above is not theirs.

Everything is over the model's full sequences, special tokens included (the source's ``</s>``,
BART's ``<s>``, M2M100's language code; the decoder's start and forced first token): they are real
inputs that the blocks mix. :class:`Seq2SeqParts` says which rows (the text's target positions) and
columns (the text's source pieces) attnkit shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..hooks import thread_hooks
from .loading import HFModelError

__all__ = [
    "POST_NORM",
    "PRE_NORM",
    "BlockParts",
    "DecoderLayerParts",
    "FullAttention",
    "Seq2SeqParts",
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


@dataclass
class BlockParts:
    """One attention sub-layer, as :class:`attnkit.attribution.trace.Block` reads it:
    ``out = post_norm(residual + Σ_j Σ_h weights[h, :, j] values[h, j] + out_bias)``;
    ``weights (H, Nq, Nk)``, ``values (H, Nk, D)`` = ``f^h(u_j)``, ``residual (Nq, D)``, ``out (Nq, D)``."""

    weights: Tensor
    values: Tensor
    out_bias: Tensor | None
    residual: Tensor
    post_norm: nn.LayerNorm | None
    out: Tensor


@dataclass
class DecoderLayerParts:
    """A decoder layer: its self-attention and cross-attention blocks, ``ffn`` (the rest of the layer
    after the cross-attention block, ``(..., D) -> (..., D)``: value zeroing reruns it) and ``out (T', D)``."""

    self_block: BlockParts
    cross_block: BlockParts
    ffn: Callable[[Tensor], Tensor]
    out: Tensor


@dataclass
class Seq2SeqParts:
    """The traced model on one sentence pair: one block per encoder layer, one
    :class:`DecoderLayerParts` per decoder layer, the encoder output ``memory (S', D)`` (after the
    final LayerNorm in pre-norm), ``logits (T', V)``, and the ``rows`` (of ``T'``) and ``cols`` (of
    ``S'``) that are the text's target positions and source pieces."""

    encoder: list[BlockParts]
    decoder: list[DecoderLayerParts]
    memory: Tensor
    logits: Tensor
    rows: slice
    cols: slice


def _block(attn: nn.Module, query_in: Tensor, kv_in: Tensor, residual: Tensor, post_norm, causal: bool) -> BlockParts:
    """Replay the attention module ``attn`` on ``query_in (Nq, D)`` and ``kv_in (Nk, D)``, keeping α and f."""
    nh, dh = int(attn.num_heads), int(attn.head_dim)
    nq, nk = query_in.shape[0], kv_in.shape[0]
    q = attn.q_proj(query_in).view(nq, nh, dh).transpose(0, 1)  # (H, Nq, Dh)
    k = attn.k_proj(kv_in).view(nk, nh, dh).transpose(0, 1)  # (H, Nk, Dh)
    v = attn.v_proj(kv_in).view(nk, nh, dh).transpose(0, 1)  # (H, Nk, Dh)
    scores = (q @ k.transpose(1, 2)) * attn.scaling  # (H, Nq, Nk)
    if causal:
        allowed = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(-1)
    w_o = attn.out_proj.weight  # (D, H·Dh): out = concat_h(ctx_h) W_Oᵀ + b_O
    values = v @ w_o.view(w_o.shape[0], nh, dh).permute(1, 2, 0)  # (H, Nk, D): f^h(u_j)
    bias = attn.out_proj.bias
    summed = residual + torch.einsum("hij,hjd->id", weights, values)
    if bias is not None:
        summed = summed + bias
    out = post_norm(summed) if post_norm is not None else summed
    return BlockParts(weights, values, bias, residual, post_norm, out)


def _ff(layer: nn.Module, x: Tensor) -> Tensor:
    return layer.fc2(layer.activation_fn(layer.fc1(x)))


def _check(replayed: Tensor, real: Tensor, what: str, model_type: str) -> None:
    """The replay must give the layer's real output (to float rounding): else the blocks are not what
    the decomposition assumes, and nothing is decomposed."""
    scale = max(1.0, float(real.abs().max()))
    tol = 1e3 * torch.finfo(real.dtype).eps * scale
    err = float((replayed - real).abs().max())
    if not err <= tol:
        raise HFModelError(
            f"replaying {what} of this {model_type} model as residual attention blocks does not give its output "
            f"(max difference {err:.2g} > {tol:.2g}): the decompositions are not defined for its layers"
        )


def _pieces(adapter, src: Tensor, tgt_in: Tensor) -> tuple[slice, slice]:
    rows = slice(len(adapter.decoder_prefix) - 1, None)
    off = len(adapter.src_prefix)
    return rows, slice(off, off + src.shape[0])


def _check_ids(src: Tensor, tgt_in: Tensor) -> None:
    for name, ids in (("src", src), ("tgt_in", tgt_in)):
        if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.numel() == 0:
            raise ValueError(f"{name} must be a non-empty (N,) tensor of token ids, got {getattr(ids, 'shape', ids)}")


@torch.no_grad()
def trace_seq2seq(adapter, src: Tensor, tgt_in: Tensor) -> Seq2SeqParts:
    """Trace ``adapter`` (an :class:`attnkit.hf.seq2seq.HFSeq2Seq`) on ``src (S,)`` and ``tgt_in (T,)``
    (one sentence's pieces, ``bos`` first in ``tgt_in``), in eval mode (see the module docstring).
    A family the decompositions are not defined for is an :class:`HFModelError`."""
    model_type = adapter.config.model_type
    reason = refusal(model_type)
    if reason is not None:
        raise HFModelError(f"the decompositions are not defined for {model_type} models: {reason}")
    _check_ids(src, tgt_in)
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
        enc_blocks = []
        for i, layer in enumerate(encoder.layers):
            x, real = seen[("enc", i)]
            if post:
                blk = _block(layer.self_attn, x, x, x, layer.self_attn_layer_norm, causal=False)
                y = layer.final_layer_norm(blk.out + _ff(layer, blk.out))
            else:
                h = layer.self_attn_layer_norm(x)
                blk = _block(layer.self_attn, h, h, x, None, causal=False)
                y = blk.out + _ff(layer, layer.final_layer_norm(blk.out))
            _check(y, real, f"encoder layer {i + 1}", model_type)
            enc_blocks.append(blk)
        memory = seen[("memory", 0)]  # (S', D): the encoder's output, after its final LayerNorm where it has one
        dec = []
        for i, layer in enumerate(decoder.layers):
            z, real = seen[("dec", i)]
            if post:
                sb = _block(layer.self_attn, z, z, z, layer.self_attn_layer_norm, causal=True)
                cb = _block(layer.encoder_attn, sb.out, memory, sb.out, layer.encoder_attn_layer_norm, causal=False)

                def ffn(b, layer=layer):
                    return layer.final_layer_norm(b + _ff(layer, b))
            else:
                h = layer.self_attn_layer_norm(z)
                sb = _block(layer.self_attn, h, h, z, None, causal=True)
                cb = _block(
                    layer.encoder_attn, layer.encoder_attn_layer_norm(sb.out), memory, sb.out, None, causal=False
                )

                def ffn(b, layer=layer):
                    return b + _ff(layer, layer.final_layer_norm(b))

            y = ffn(cb.out)
            _check(y, real, f"decoder layer {i + 1}", model_type)
            dec.append(DecoderLayerParts(sb, cb, ffn, y))
        logits = adapter._logits_from(out.last_hidden_state[0] * adapter.feature_scale)  # (T', V)
    finally:
        adapter.train(was_training)
    rows, cols = _pieces(adapter, src, tgt_in)
    return Seq2SeqParts(enc_blocks, dec, memory, logits, rows, cols)


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
    _check_ids(src, tgt_in)
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
