"""Context mixing, direct logit attribution and the logit lens for decoder-only and encoder-only
language models, from the blocks a :class:`~attnkit.attention.block_trace.BlockTracer` traces (one forward
pass, layer by layer). Attention-norm, value zeroing and ALTI read every layer's token
representations of both kinds; ALTI-Logit, direct logit attribution and the logit lens read a
decoder's next-token prediction and refuse an encoder-only model in one line.

- **attention-norm** (Kobayashi et al. 2020, "Attention is not only a weight"): ``‖T_ij‖₂`` with
  ``T_ij = Σ_h α^h_ij f^h(u_j)``, what token j adds to the attention's output at position i in one
  layer (before any norm after the attention, as Kobayashi et al. define it).
- **value zeroing** (Mohebbi et al. 2023, "Quantifying context mixing in Transformers"): zero token
  j's value vectors in one layer (every head), run the rest of that layer (its norms recomputed), and
  take ``C_ij = 1 − cos(y_i, y_i^{¬j})``, computed as ``½‖y/|y| − y′/|y′|‖²`` so that it keeps its
  digits when the two are close (:mod:`attnkit.attribution.cosine`). The replay is exact: the zeroed layer output equals
  rerunning the model with that value zeroed.
- **ALTI** (Ferrando et al. 2022, "Measuring the mixing of contextual information in the
  Transformer"): each layer's output ``mid_i = Σ_j T_ij + r_i (+ b_O)`` is split into one term per
  input (the residual added to the diagonal term, the bias left out: it belongs to no token); a
  norm after the attention (BERT's post-norm LayerNorm, Gemma 2's and OLMo 2's RMSNorm) is applied to
  each term with its input's real statistics (σ or RMS), the way the paper decomposes BERT; a term's
  contribution is its closeness to the sum, ``c_ij = max(0, ‖x̃_i‖₁ − ‖x̃_i − T̃_ij‖₁)``,
  normalised over j; the MLP acts on each position alone and passes contributions through; the
  layers roll out, ``R = C_L ⋯ C_1``.
- **ALTI-Logit** (Ferrando et al. 2023): each input token's share of the predicted token's logit,
  each block's update read as a logit and sent to the input tokens by ALTI's rollout of the layers
  below (:func:`alti_logit`).
- **direct logit attribution** (as in the circuits literature, e.g. Elhage et al. 2021; Ferrando &
  Voita 2024): the final residual at a position is a sum of the embedding, every head's output,
  every attention bias and every MLP block's output; the final norm is *linearised at the real
  final residual* (its σ or RMS held fixed, :class:`~attnkit.attention.block_trace.NormLinear`), so
  each term's logit is ``W_U[token] · N_lin(term)`` and the terms plus the norm's bias term add up to
  the model's own logit exactly (before the final soft cap, for a model that caps its logits:
  Gemma 2). A term's direct effect ignores what later layers do with it.
- **the logit lens** (nostalgebraist 2020): each block's residual read through the final norm and
  the unembedding: the top-k tokens and the rank of the model's own prediction per layer.

The per-block formulas of attention-norm, value zeroing and ALTI are written once, over the one
per-block record, in :mod:`attnkit.attribution.decomposition` (the translators read them too);
this module re-exports them under the names the language-model readings use.

Layers and heads are 0-based in the tensors here; whatever shows them to a user numbers from 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..attention.block_trace import BlockTracer, LMLayerParts
from .decomposition import alti_block, value_zeroed_output
from .decomposition import block_attention_norm as attention_norm
from .decomposition import block_value_zeroing as value_zeroing
from .tracers import block_tracer

__all__ = [
    "AltiLogit",
    "DirectLogitAttribution",
    "LensRow",
    "alti",
    "alti_block",
    "alti_logit",
    "attention_norm",
    "direct_logit_attribution",
    "lens_rows",
    "logit_lens",
    "value_zeroed_output",
    "value_zeroing",
]


@torch.no_grad()
def alti(model: nn.Module, input_ids: Tensor) -> Tensor:
    """``(N, N)``: ALTI rolled out through every layer: row i is how much each input token makes up the
    last layer's representation at position i (rows sum to 1)."""
    state: dict[str, Tensor] = {}

    def on_layer(parts: LMLayerParts) -> None:
        c = alti_block(parts)
        state["r"] = c if "r" not in state else c @ state["r"]

    block_tracer(model).trace(input_ids, on_layer)
    return state["r"]


@dataclass
class DirectLogitAttribution:
    """The direct logit attribution of ``token`` at ``position`` (0-based): ``heads (L, H)``,
    ``out_biases (L,)`` (each attention's ``b_O``; zeros where it has none), ``mlps (L,)``,
    ``embedding`` (token and position embeddings), ``norm_bias`` (the final LayerNorm's β; 0 for
    RMSNorm); they sum to ``logit``, the model's own (before the final soft cap where it has one)."""

    position: int
    token: int
    heads: Tensor
    out_biases: Tensor
    mlps: Tensor
    embedding: float
    norm_bias: float
    logit: float

    def total(self) -> float:
        """The sum of every term (equals :attr:`logit`)."""
        return float(self.heads.sum() + self.out_biases.sum() + self.mlps.sum()) + self.embedding + self.norm_bias

    def to_dict(self) -> dict:
        """JSON-ready, layers and heads numbered from 1 (``heads[l-1][h-1]``)."""
        return {
            "position": self.position + 1,
            "token": self.token,
            "logit": self.logit,
            "embedding": self.embedding,
            "norm_bias": self.norm_bias,
            "layers": [
                {
                    "layer": li + 1,
                    "heads": self.heads[li].tolist(),
                    "out_bias": float(self.out_biases[li]),
                    "mlp": float(m),
                }
                for li, m in enumerate(self.mlps.tolist())
            ],
        }


def _position(n: int, position: int) -> int:
    if isinstance(position, bool) or not isinstance(position, int) or not -n <= position < n:
        raise ValueError(f"position must be a position in 0..{n - 1} (or negative from the end), got {position!r}")
    return position % n


@torch.no_grad()
def direct_logit_attribution(
    model: nn.Module, input_ids: Tensor, *, position: int = -1, token: int | None = None
) -> DirectLogitAttribution:
    """Each head's and MLP block's direct contribution to ``token``'s logit at ``position`` (default:
    the last position and the model's own prediction there), see the module docstring."""
    tracer = block_tracer(model)
    head = tracer.require_decoder("direct logit attribution")
    pos = _position(int(input_ids.shape[-1]) if isinstance(input_ids, Tensor) else 0, position)
    heads, biases, mlps = [], [], []

    def on_layer(parts: LMLayerParts) -> None:
        heads.append(parts.head_terms(pos))  # (H, D)
        biases.append(parts.bias_at(pos))  # (D,)
        mlps.append(parts.out[pos] - parts.mid[pos])  # (D,)

    trace = tracer.trace(input_ids, on_layer)
    tok = int(trace.logits[pos].argmax()) if token is None else token
    if not isinstance(tok, int) or not 0 <= tok < head.weight.shape[0]:
        raise ValueError(f"token must be a token id in 0..{head.weight.shape[0] - 1}, got {token!r}")
    lin = tracer.final_norm_linear(trace.final[pos])
    w_u = head.weight[tok]  # (D,)

    def logit(t: Tensor) -> Tensor:  # (..., D) -> (...)
        return lin(t) @ w_u

    hb = head.bias[tok] if getattr(head, "bias", None) is not None else 0.0
    nb = float(lin.bias @ w_u) if lin.bias is not None else 0.0
    return DirectLogitAttribution(
        pos,
        tok,
        torch.stack([logit(h) for h in heads]),  # (L, H)
        torch.stack([logit(b) for b in biases]),  # (L,)
        torch.stack([logit(m) for m in mlps]),  # (L,)
        float(logit(trace.embedding[pos])),
        nb + float(hb),
        _uncapped_logit(tracer, trace.logits, trace.final, pos, tok),
    )


def _uncapped_logit(tracer: BlockTracer, logits: Tensor, final: Tensor, pos: int, tok: int) -> float:
    """The model's own logit of ``tok`` at ``pos``; before the final soft cap where the model caps its
    logits (the terms are linear and add up to that one)."""
    if not tracer.softcap:
        return float(logits[pos, tok])
    return float(tracer.unembedding()(tracer.final_norm()(final[pos][None]))[0, tok])


@dataclass
class LensRow:
    """One block's residual through the final norm and unembedding at a position: ``layer`` (1-based;
    0 = the embeddings), the ``top`` token ids and their ``logits``, and the ``rank`` (1 = top) of
    the model's own prediction."""

    layer: int
    top: list[int]
    logits: list[float]
    rank: int

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"layer": self.layer, "top": self.top, "logits": self.logits, "rank": self.rank}


@torch.no_grad()
def logit_lens(model: nn.Module, input_ids: Tensor, *, position: int = -1, k: int = 5) -> list[LensRow]:
    """The logit lens at ``position`` (default the last): one :class:`LensRow` for the embeddings and
    one per block. The last block's row is the model's own output."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive number of tokens, got {k!r}")
    tracer = block_tracer(model)
    tracer.require_decoder("the logit lens")
    pos = _position(int(input_ids.shape[-1]) if isinstance(input_ids, Tensor) else 0, position)
    rows: list[Tensor] = []

    def on_layer(parts: LMLayerParts) -> None:
        rows.append(parts.out[pos])

    trace = tracer.trace(input_ids, on_layer)
    return lens_rows(tracer, [trace.embedding[pos], *rows], int(trace.logits[pos].argmax()), k)


def lens_rows(model: nn.Module, residuals: list[Tensor], predicted: int, k: int) -> list[LensRow]:
    """One :class:`LensRow` per residual ``(D,)`` (the embeddings first), read as the model reads its
    last one (:meth:`~attnkit.attention.block_trace.BlockTracer.logits`), with the rank of ``predicted``."""
    tracer = block_tracer(model)
    out = []
    for layer, x in enumerate(residuals):
        logits = tracer.logits(x[None])[0]  # (V,)
        top = logits.topk(min(k, logits.shape[0]))
        rank = 1 + int((logits > logits[predicted]).sum())
        out.append(LensRow(layer, top.indices.tolist(), top.values.tolist(), rank))
    return out


@dataclass
class AltiLogit:
    """ALTI-Logit of ``token`` at ``position``: ``tokens (N,)`` each input token's contribution to the
    logit, ``biases`` (the attention biases' and the final norm's, which belong to no token); they sum
    to ``logit``, the model's own (before the final soft cap where it has one)."""

    position: int
    token: int
    tokens: Tensor
    biases: float
    logit: float


@torch.no_grad()
def alti_logit(model: nn.Module, input_ids: Tensor, *, position: int = -1, token: int | None = None) -> AltiLogit:
    """ALTI-Logit (Ferrando et al. 2023, "Explaining how Transformers use context to build predictions"):
    every block's update of the residual at ``position`` is split by the token it comes from and
    read as a logit through the final norm linearised at the real final residual (as
    :func:`direct_logit_attribution`). Layer l's attention term from source j', ``Σ_h α^h_{pj'}
    f^h(u_j')``, goes to input token j in proportion to ALTI's rollout of the layers below,
    ``R^{l−1}[j', j]``; the MLP's update at the position goes by ``R^l[p, j]``; the embedding at the
    position is its own token's. The rollout rows sum to 1, so the tokens' contributions and the
    biases add up to the logit. One ``(N, N)`` rollout and one ``(N, D)`` sum are held across layers."""
    tracer = block_tracer(model)
    head = tracer.require_decoder("ALTI-Logit")
    pos = _position(int(input_ids.shape[-1]) if isinstance(input_ids, Tensor) else 0, position)
    state: dict[str, Tensor] = {}

    def on_layer(p: LMLayerParts) -> None:
        n = p.residual.shape[0]
        if "r" not in state:
            state["r"] = torch.eye(n, dtype=p.mid.dtype, device=p.mid.device)
            state["a"] = p.residual.new_zeros(p.residual.shape)  # (N, D): what each input token adds at pos
            state["a"][pos] += p.residual[pos]  # the embedding
            state["b"] = p.residual.new_zeros(p.residual.shape[-1])
        below = state["r"]
        from_sources = p.source_terms(pos)  # (N, D): by source j'
        state["a"] += below.T @ from_sources
        state["b"] += p.bias_at(pos)
        state["r"] = alti_block(p) @ below  # (N, N)
        state["a"] += torch.outer(state["r"][pos], p.out[pos] - p.mid[pos])  # the MLP's update

    trace = tracer.trace(input_ids, on_layer)
    tok = int(trace.logits[pos].argmax()) if token is None else token
    if not isinstance(tok, int) or not 0 <= tok < head.weight.shape[0]:
        raise ValueError(f"token must be a token id in 0..{head.weight.shape[0] - 1}, got {token!r}")
    lin = tracer.final_norm_linear(trace.final[pos])
    w_u = head.weight[tok]
    biases = float(lin(state["b"]) @ w_u)
    if lin.bias is not None:
        biases += float(lin.bias @ w_u)
    if getattr(head, "bias", None) is not None:
        biases += float(head.bias[tok])
    logit = _uncapped_logit(tracer, trace.logits, trace.final, pos, tok)
    return AltiLogit(pos, tok, lin(state["a"]) @ w_u, biases, logit)
