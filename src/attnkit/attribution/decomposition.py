"""Context mixing from a Transformer's own arithmetic (no gradients): attention × ‖value‖, value zeroing,
ALTI and ALTI+, each written once over the one per-block record
(:class:`~attnkit.attention.block_trace.LMLayerParts`: :func:`block_attention_norm`,
:func:`block_value_zeroing`, :func:`alti_block`), which attnkit's Transformer and the Hugging Face
encoder-decoders (an :class:`~attnkit.attention.block_trace.EncoderDecoderTrace`) and the language
models (:mod:`attnkit.attribution.lm_mixing`) all give. The translators' readings here return ``(T, S)``
source attributions for the target pieces under forced decoding.

- **attention × ‖value‖** (Kobayashi et al. 2020, "Attention is not only a weight"): the norm of what
  source piece j actually adds to target t's cross-attention output, ``‖Σ_h α^h_tj f^h(m_j)‖``, in one
  decoder layer; a large weight on a small vector counts for little.
- **value zeroing** (Mohebbi et al. 2023): zero source piece j's value vectors in one decoder layer's
  cross-attention (every head), run the rest of that layer, and take the cosine distance between
  target t's layer output with and without it: ``C_tj = 1 − cos(y_t, y_t^{¬j})``, computed as
  ``½‖y/|y| − y′/|y′|‖²``, which keeps its digits when the two are close (:mod:`attnkit.attribution.cosine`).
- **ALTI+** (Ferrando et al. 2022, "Towards Opening the Black Box of Neural Machine Translation"):
  every attention block's output is split into one term per input (the record's ``mixing_terms``: the
  residual on the diagonal, or its own column in cross-attention), each term's contribution is its closeness to the sum,
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

from ..attention.block_trace import EncoderDecoderTrace, LMLayerParts
from ..errors import InputError
from .cosine import cosine_distance

__all__ = [
    "alti_block",
    "alti_contributions",
    "alti_plus",
    "attention_norm",
    "block_attention_norm",
    "block_value_zeroing",
    "closeness_shares",
    "value_zeroed_output",
    "value_zeroing",
]


def closeness_shares(terms: Tensor) -> Tensor:
    """ALTI's contribution of each term to its sum (Ferrando et al. 2022): ``terms (Nq, Nk, D)`` of ``x̃_i =
    Σ_j T_ij`` → ``(Nq, Nk)`` shares ``c_ij = max(0, ‖x̃_i‖₁ − ‖x̃_i − T_ij‖₁)``, each row normalised to sum to
    1: a term counts by how much closer to the sum it is than the sum without it."""
    total = terms.sum(1, keepdim=True)  # (Nq, 1, D): x̃_i
    c = (total.abs().sum(-1) - (total - terms).abs().sum(-1)).clamp_min(0.0)  # (Nq, Nk)
    return c / c.sum(-1, keepdim=True).clamp_min(torch.finfo(c.dtype).tiny)


# ---------------------------------------------------------------------------------------- one block
def block_attention_norm(parts: LMLayerParts) -> Tensor:
    """``(Nq, Nk)``: ``‖Σ_h α^h_ij f^h(u_j)‖₂``, what key j adds to the attention's output at i (before
    any norm after the attention, as Kobayashi et al. 2020 define it)."""
    return parts.terms().norm(dim=-1)


def value_zeroed_output(parts: LMLayerParts, j: int) -> Tensor:
    """``(Nq, D)``: the block's output (the rest of its layer rerun, norms recomputed) with key ``j``'s
    values zeroed in every head."""
    nk = parts.head_values.shape[1]
    if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < nk:
        raise ValueError(f"j must be a position in 0..{nk - 1}, got {j!r}")
    return parts.mlp(parts.mid_without(j))


def block_value_zeroing(parts: LMLayerParts) -> Tensor:
    """``(Nq, Nk)``: ``1 − cos(y_i, y_i^{¬j})`` (Mohebbi et al. 2023), one key at a time (bounded memory)."""
    cols = [cosine_distance(parts.out, value_zeroed_output(parts, j)) for j in range(parts.head_values.shape[1])]
    return torch.stack(cols, dim=1)  # (Nq, Nk)


def alti_block(parts: LMLayerParts) -> Tensor:
    """ALTI's contributions of one block, rows summing to 1: ``(N, N)`` with the residual added to the
    diagonal term (self-attention), ``(Nq, 1 + Nk)`` with the residual as column 0 (cross-attention);
    the terms of the block's result less its biases, through the norm after the attention at its real
    input's statistics (the record's ``mixing_terms``)."""
    return closeness_shares(parts.mixing_terms())


# ---------------------------------------------------------------------------------------- translators
def _layer_index(n: int, layer: int | None, name: str = "layer") -> int:
    """A 1-based layer number (or None = the last layer) → a 0-based index, checked."""
    if layer is None:
        return n - 1
    if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= n:
        raise InputError(f"{name} must be a layer number in 1..{n} (or none for the last), got {layer!r}")
    return layer - 1


@torch.no_grad()
def attention_norm(trace: EncoderDecoderTrace, *, layer: int | None = None) -> Tensor:
    """``(T, S)``: ``‖Σ_h α^h_tj f^h(m_j)‖₂`` in decoder layer ``layer``'s cross-attention (1-based; default the last)."""
    return block_attention_norm(trace.decoder[_layer_index(len(trace.decoder), layer)].cross_block)


@torch.no_grad()
def value_zeroing(trace: EncoderDecoderTrace, *, layer: int | None = None) -> Tensor:
    """``(T, S)``: ``1 − cos(y_t, y_t^{¬j})`` with source j's values zeroed in decoder layer ``layer``'s
    cross-attention (1-based; default the last), ``y`` that layer's output; see the module docstring."""
    return block_value_zeroing(trace.decoder[_layer_index(len(trace.decoder), layer)].cross_block)


@torch.no_grad()
def alti_contributions(trace: EncoderDecoderTrace) -> tuple[Tensor, Tensor]:
    """ALTI+'s rollout: ``(R (T, S + T), R_enc (S, S))`` (see the module docstring)."""
    s = trace.memory.shape[0]
    r_enc = torch.eye(s, dtype=trace.memory.dtype, device=trace.memory.device)
    for parts in trace.encoder:
        r_enc = alti_block(parts) @ r_enc  # (S, S)
    t = trace.logits.shape[0]
    r = torch.cat([r_enc.new_zeros(t, s), torch.eye(t, dtype=r_enc.dtype, device=r_enc.device)], dim=1)
    for lt in trace.decoder:
        c_self = alti_block(lt.self_block)  # (T, T)
        c_cross = alti_block(lt.cross_block)  # (T, 1 + S)
        mixed = c_self @ r  # (T, S + T): a_t's contributions
        r = c_cross[:, :1] * mixed
        r[:, :s] += c_cross[:, 1:] @ r_enc
    return r, r_enc


def alti_plus(trace: EncoderDecoderTrace) -> tuple[Tensor, Tensor]:
    """``(source contributions (T, S), source share (T,))`` of ALTI+ (rows of the first sum to the second)."""
    r, _ = alti_contributions(trace)
    s = trace.memory.shape[0]
    return r[:, :s], r[:, :s].sum(-1)
