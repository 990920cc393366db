"""Attributions from the Transformer's own arithmetic (no gradients): attention × ‖value‖, value zeroing,
ALTI+. All read a :class:`~attnkit.attribution.trace.TransformerTrace`; all return ``(T, S)`` source
attributions for the target pieces under forced decoding.

- **attention × ‖value‖** (Kobayashi et al. 2020, "Attention is not only a weight"): the norm of what
  source piece j actually adds to target t's cross-attention output, ``‖Σ_h α^h_tj f^h(m_j)‖``, in one
  decoder layer; a large weight on a small vector counts for little.
- **value zeroing** (Mohebbi et al. 2023): zero source piece j's value vectors in one decoder layer's
  cross-attention (every head), run the rest of that layer, and take the cosine distance between
  target t's layer output with and without it: ``C_tj = 1 − cos(y_t, y_t^{¬j})``, computed as
  ``½‖y/|y| − y′/|y′|‖²``, which keeps its digits when the two are close (:mod:`attnkit.attribution.cosine`).
- **ALTI+** (Ferrando et al. 2022, "Towards Opening the Black Box of Neural Machine Translation"):
  every attention block's output is split into one term per input (:meth:`Block.terms`, plus the
  residual on the diagonal), each term's contribution is its closeness to the sum,
  ``c_ij = max(0, ‖x̃_i‖₁ − ‖x̃_i − T_i(x_j)‖₁)`` normalised over j (ALTI, Ferrando et al. 2022a),
  and the layers are composed: the encoder's contributions roll out to ``R_enc (S, S)``; a decoder
  layer mixes the target prefix through self-attention (``C^self``) and adds the encoder output
  through cross-attention (``c^x``, with the residual's share ``r``)::

      R^0 = [0 | I_T],   R^l = r ⊙ (C^self_l R^{l−1}) + [c^x_l R_enc | 0]      (T × (S + T))

  The source part of ``R^L`` is the attribution; its row sums are the source's share
  (``extra["source_share"]``). Biases are left out of the terms (they belong to no input); in a
  post-norm block each term goes through the LayerNorm's linear part, ``γ ⊙ (v − mean v) / σ``, with σ
  of the whole sum, so the terms still add up to the normalised output (less β). The feed-forward
  sub-layers act on each position alone and pass contributions through unchanged, as in ALTI.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import InputError
from .cosine import cosine_distance
from .trace import Block, TransformerTrace

__all__ = [
    "alti_contributions",
    "alti_plus",
    "attention_norm",
    "block_contributions",
    "closeness_shares",
    "value_zeroing",
]


def closeness_shares(terms: Tensor) -> Tensor:
    """ALTI's contribution of each term to its sum (Ferrando et al. 2022): ``terms (Nq, Nk, D)`` of ``x̃_i =
    Σ_j T_ij`` → ``(Nq, Nk)`` shares ``c_ij = max(0, ‖x̃_i‖₁ − ‖x̃_i − T_ij‖₁)``, each row normalised to sum to
    1: a term counts by how much closer to the sum it is than the sum without it. One formula for every
    block ALTI and ALTI+ read (attnkit's and Hugging Face's, encoder-decoder and decoder-only)."""
    total = terms.sum(1, keepdim=True)  # (Nq, 1, D): x̃_i
    c = (total.abs().sum(-1) - (total - terms).abs().sum(-1)).clamp_min(0.0)  # (Nq, Nk)
    return c / c.sum(-1, keepdim=True).clamp_min(torch.finfo(c.dtype).tiny)


def _layer_index(n: int, layer: int | None, name: str = "layer") -> int:
    """A 1-based layer number (or None = the last layer) → a 0-based index, checked."""
    if layer is None:
        return n - 1
    if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= n:
        raise InputError(f"{name} must be a layer number in 1..{n} (or none for the last), got {layer!r}")
    return layer - 1


def attention_norm(trace: TransformerTrace, *, layer: int | None = None) -> Tensor:
    """``(T, S)``: ``‖Σ_h α^h_tj f^h(m_j)‖₂`` in decoder layer ``layer`` (1-based; default the last)."""
    blk = trace.decoder[_layer_index(len(trace.decoder), layer)].cross_block
    return blk.terms().norm(dim=-1)  # (T, S)


def value_zeroing(trace: TransformerTrace, *, layer: int | None = None) -> Tensor:
    """``(T, S)``: ``1 − cos(y_t, y_t^{¬j})`` with source j's values zeroed in decoder layer ``layer``'s
    cross-attention (1-based; default the last); see the module docstring."""
    lt = trace.decoder[_layer_index(len(trace.decoder), layer)]
    blk = lt.cross_block
    terms = blk.terms()  # (T, S, D)
    full = blk.attention_output()  # (T, D)
    zeroed = full.unsqueeze(0) - terms.transpose(0, 1)  # (S, T, D): the attention output without key j
    summed = blk.residual.unsqueeze(0) + zeroed
    b = blk.post_norm(summed) if blk.post_norm is not None else summed
    y_without = lt.ffn(b)  # (S, T, D)
    return cosine_distance(lt.out.unsqueeze(0), y_without).transpose(0, 1)  # (S, T) → (T, S)


def block_contributions(blk: Block, *, residual_column: bool) -> Tensor:
    """ALTI's contributions of one attention block: ``(Nq, Nk)`` with the residual added to the diagonal
    term (self-attention), or ``(Nq, 1 + Nk)`` with the residual as column 0 (cross-attention). Rows sum to 1."""
    terms = blk.terms()  # (Nq, Nk, D)
    if residual_column:
        terms = torch.cat([blk.residual.unsqueeze(1), terms], dim=1)  # (Nq, 1 + Nk, D)
    else:
        n = min(terms.shape[0], terms.shape[1])
        idx = torch.arange(n, device=terms.device)
        terms = terms.clone()
        terms[idx, idx] += blk.residual[:n]
    if blk.post_norm is not None:  # the LayerNorm's linear part, with σ of the whole (biased) sum
        ln = blk.post_norm
        summed = blk.residual + blk.attention_output()  # (Nq, D): the LayerNorm's input
        sigma = (summed.var(-1, unbiased=False, keepdim=True) + ln.eps).sqrt()  # (Nq, 1)
        terms = (terms - terms.mean(-1, keepdim=True)) / sigma.unsqueeze(1)
        if ln.weight is not None:
            terms = terms * ln.weight
    return closeness_shares(terms)  # (Nq, Nk')


def alti_contributions(trace: TransformerTrace) -> tuple[Tensor, Tensor]:
    """ALTI+'s rollout: ``(R (T, S + T), R_enc (S, S))`` (see the module docstring)."""
    s = trace.memory.shape[0]
    r_enc = torch.eye(s, dtype=trace.memory.dtype, device=trace.memory.device)
    for blk in trace.encoder:
        r_enc = block_contributions(blk, residual_column=False) @ r_enc  # (S, S)
    t = trace.logits.shape[0]
    r = torch.cat([r_enc.new_zeros(t, s), torch.eye(t, dtype=r_enc.dtype, device=r_enc.device)], dim=1)
    for lt in trace.decoder:
        c_self = block_contributions(lt.self_block, residual_column=False)  # (T, T)
        c_cross = block_contributions(lt.cross_block, residual_column=True)  # (T, 1 + S)
        mixed = c_self @ r  # (T, S + T): a_t's contributions
        r = c_cross[:, :1] * mixed
        r[:, :s] += c_cross[:, 1:] @ r_enc
    return r, r_enc


def alti_plus(trace: TransformerTrace) -> tuple[Tensor, Tensor]:
    """``(source contributions (T, S), source share (T,))`` of ALTI+ (rows of the first sum to the second)."""
    r, _ = alti_contributions(trace)
    s = trace.memory.shape[0]
    return r[:, :s], r[:, :s].sum(-1)
