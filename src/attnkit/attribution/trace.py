"""A Transformer translator's forward pass for one sentence pair, replayed block by block, keeping what
the decomposition-based methods need (attention × ‖value‖, value zeroing, ALTI+).

Every multi-head attention output is a sum over keys (Kobayashi et al. 2020)::

    Attn(x)_i = Σ_j Σ_h α^h_ij f^h(u_j) + b_O,      f^h(u) = (W_V^h u + b_V^h) W_O^h

with ``u`` the block's key/value input (``LN(x)`` in a pre-norm block, ``x`` in a post-norm one, the
encoder output ``m`` in cross-attention) and ``W_O^h`` head h's rows of the output projection. A
:class:`Block` keeps ``α (H, Nq, Nk)``, ``f (H, Nk, D)``, ``b_O``, the residual stream that the block
adds to, and (post-norm) the LayerNorm after the sum, so the terms ``T_ij = Σ_h α^h_ij f^h(u_j)``
(:meth:`Block.terms`) add up to the block's output exactly (a test checks it against the model).

The replay reads the model's own modules (``encoder.layers[l].self_attn``, ``norm1`` ..., the
decoder's ``multihead_attn``), in eval mode, for one unpadded sentence: ``src (S,)``, ``tgt_in (T,)``.

Other translation models take part through two members: ``decomposition_trace(src, tgt_in)``, giving
the same blocks as plain parts (fields named as :class:`Block`'s and :class:`DecoderLayerTrace`'s,
plus ``rows``/``cols``: the positions that are the text's target pieces and source pieces, the rest
being the model's special tokens), and ``decomposition_refusal`` (None, or the one line saying why the
decompositions are not defined for the model). A Hugging Face encoder-decoder has them
(:mod:`attnkit.hf.decomposition`); :func:`trace_model` reads either kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "Block",
    "DecoderLayerTrace",
    "TransformerTrace",
    "decomposable",
    "decomposition_refusal",
    "is_transformer",
    "trace_model",
    "trace_transformer",
]


def is_transformer(model) -> bool:
    """Whether ``model`` is an attnkit encoder-decoder Transformer (the family these methods are defined on)."""
    from ..models.transformer import TransformerTranslator

    return isinstance(model, TransformerTranslator)


@dataclass
class Block:
    """One attention sub-layer: ``out = post_norm(residual + Σ_j T_ij + b_O)`` (``post_norm`` is None
    in a pre-norm block). ``weights (H, Nq, Nk)``, ``values (H, Nk, D)`` = ``f^h(u_j)``,
    ``residual (Nq, D)``, ``out (Nq, D)``."""

    weights: Tensor
    values: Tensor
    out_bias: Tensor | None
    residual: Tensor
    post_norm: nn.LayerNorm | None
    out: Tensor

    def terms(self) -> Tensor:
        """``T (Nq, Nk, D)``, ``T_ij = Σ_h α^h_ij f^h(u_j)``: key j's share of the attention output."""
        return torch.einsum("hij,hjd->ijd", self.weights, self.values)

    def attention_output(self) -> Tensor:
        """``Σ_j T_ij + b_O`` ``(Nq, D)``: the attention sub-layer's output before the residual."""
        out = self.terms().sum(1)
        return out if self.out_bias is None else out + self.out_bias


@dataclass
class DecoderLayerTrace:
    """A decoder layer: causal self-attention block, cross-attention block, and the feed-forward
    sub-layer as a function of the cross block's output (value zeroing reruns it)."""

    self_block: Block
    cross_block: Block
    ffn: object  # callable (N, D) -> (N, D): the rest of the layer after the cross-attention block
    out: Tensor  # (T, D) the layer's output


@dataclass
class TransformerTrace:
    encoder: list[Block]  # one self-attention block per encoder layer
    decoder: list[DecoderLayerTrace]
    memory: Tensor  # (S, D) the encoder's output (after its final LayerNorm in pre-norm)
    logits: Tensor  # (T, V)


def _attention_block(mha, query_in: Tensor, kv_in: Tensor, residual: Tensor, post_norm, causal: bool) -> Block:
    """Replay ``mha(query_in, kv_in, kv_in)`` for unbatched ``(Nq, D)``/``(Nk, D)`` inputs, keeping α and f."""
    wq, wk, wv = mha._weights()
    bq, bk, bv = mha._biases()
    nh, dh = mha.num_heads, mha.head_dim
    nq, nk = query_in.shape[0], kv_in.shape[0]
    q = F.linear(query_in, wq, bq).view(nq, nh, dh).transpose(0, 1)  # (H, Nq, Dh)
    k = F.linear(kv_in, wk, bk).view(nk, nh, dh).transpose(0, 1)  # (H, Nk, Dh)
    v = F.linear(kv_in, wv, bv).view(nk, nh, dh).transpose(0, 1)  # (H, Nk, Dh)
    scores = q @ k.transpose(1, 2) / math.sqrt(dh)  # (H, Nq, Nk)
    if causal:
        allowed = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(-1)
    w_o = mha.out_proj.weight  # (D, H·Dh): out = concat_h(ctx_h) W_Oᵀ
    w_o_heads = w_o.view(w_o.shape[0], nh, dh).permute(1, 2, 0)  # (H, Dh, D)
    values = v @ w_o_heads  # (H, Nk, D): f^h(u_j)
    block = Block(weights, values, mha.out_proj.bias, residual, post_norm, residual)
    summed = residual + block.attention_output()
    block.out = post_norm(summed) if post_norm is not None else summed
    return block


@torch.no_grad()
def trace_transformer(model, src: Tensor, tgt_in: Tensor) -> TransformerTrace:
    """Replay ``model`` (a :class:`attnkit.models.TransformerTranslator`) on ``src (S,)`` and
    ``tgt_in (T,)`` token ids (one sentence, no padding), in eval mode (see the module docstring)."""
    if not is_transformer(model):
        raise TypeError(f"model must be an attnkit TransformerTranslator, got {type(model).__name__}")
    for name, ids in (("src", src), ("tgt_in", tgt_in)):
        if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.numel() == 0:
            raise ValueError(f"{name} must be a non-empty (N,) tensor of token ids, got {getattr(ids, 'shape', ids)}")
    was_training = model.training
    model.eval()
    try:
        x = model.positions(model.embedding(src[None]) * model.embed_scale)[0]  # (S, D)
        enc_blocks = []
        for layer in model.encoder.layers:
            if layer.norm_first:
                h = layer.norm1(x)
                blk = _attention_block(layer.self_attn, h, h, x, None, causal=False)
                x = blk.out + layer._ff(layer.norm2(blk.out))
            else:
                blk = _attention_block(layer.self_attn, x, x, x, layer.norm1, causal=False)
                x = layer.norm2(blk.out + layer._ff(blk.out))
            enc_blocks.append(blk)
        memory = model.encoder.norm(x) if model.encoder.norm is not None else x  # (S, D)
        z = model._embed_tgt(tgt_in[None])[0]  # (T, D)
        dec = []
        for layer in model.decoder.layers:
            if layer.norm_first:
                h = layer.norm1(z)
                sb = _attention_block(layer.self_attn, h, h, z, None, causal=True)
                cb = _attention_block(layer.multihead_attn, layer.norm2(sb.out), memory, sb.out, None, causal=False)
                ffn = lambda b, layer=layer: b + layer._ff(layer.norm3(b))
            else:
                sb = _attention_block(layer.self_attn, z, z, z, layer.norm1, causal=True)
                cb = _attention_block(layer.multihead_attn, sb.out, memory, sb.out, layer.norm2, causal=False)
                ffn = lambda b, layer=layer: layer.norm3(b + layer._ff(b))
            z = ffn(cb.out)
            dec.append(DecoderLayerTrace(sb, cb, ffn, z))
        final = model.decoder.norm(z) if model.decoder.norm is not None else z
        logits = F.linear(final, *model.output_layer())  # (T, V)
    finally:
        model.train(was_training)
    return TransformerTrace(enc_blocks, dec, memory, logits)


def decomposition_refusal(model) -> str | None:
    """The model's own line on why the decompositions are not defined for it, or None."""
    return None if is_transformer(model) else getattr(model, "decomposition_refusal", None)


def decomposable(model) -> bool:
    """Whether the decomposition-based methods are defined for ``model``: attnkit's Transformer, or a
    model that traces its blocks (``decomposition_trace``) and does not refuse (see the module docstring)."""
    if is_transformer(model):
        return True
    return callable(getattr(model, "decomposition_trace", None)) and decomposition_refusal(model) is None


def _block(parts) -> Block:
    return Block(parts.weights, parts.values, parts.out_bias, parts.residual, parts.post_norm, parts.out)


def trace_model(model, src: Tensor, tgt_in: Tensor) -> tuple[TransformerTrace, slice, slice]:
    """``(trace, rows, cols)`` for ``model`` on ``src (S,)`` and ``tgt_in (T,)``: the trace's target
    positions ``rows`` and source positions ``cols`` are the text's pieces (all of them for attnkit's
    Transformer; a Hugging Face model's traces also hold its special tokens)."""
    if is_transformer(model):
        return trace_transformer(model, src, tgt_in), slice(None), slice(None)
    parts = model.decomposition_trace(src, tgt_in)
    decoder = [DecoderLayerTrace(_block(d.self_block), _block(d.cross_block), d.ffn, d.out) for d in parts.decoder]
    trace = TransformerTrace([_block(b) for b in parts.encoder], decoder, parts.memory, parts.logits)
    return trace, parts.rows, parts.cols
