"""Why a head attends where it does: one head's pre-softmax scores at one query split over the parts of the
residual stream, on the query side and on the key side (Elhage et al. 2021, "A Mathematical Framework for
Transformer Circuits": the QK circuit read term by term).

The residual stream entering layer ``l`` of attnkit's language model is a sum of parts::

    x_j = e_j (+ p_j) + Σ_{l' < l} [ Σ_h o^{l',h}_j + m^{l'}_j ] + b

the token embedding ``e``, the learned position embedding ``p`` (the gpt2 shape only), each earlier head's
output ``o^{l',h}_j = Σ_t α^{l',h}_jt v^{l',h}_t W_O^{l',h}`` (its columns of the output projection), each
earlier MLP's output ``m`` and the output projections' biases ``b``. The norm before the attention is read as
a linear map with its statistics held at their real input (:func:`~attnkit.attention.block_trace.linearise_norm`:
``N(t) = s_j ⊙ (t − mean t) + β`` for LayerNorm, ``N(t) = s_j ⊙ t`` for RMSNorm), exact at ``t = x_j``, so the
query ``q_i = R_i (W_Q N(x_i) + b_Q)`` and the key ``k_j = R_j (W_K N(x_j) + b_K)`` are sums over the parts
(``R`` the rotary rotation at each position, itself linear; β and the projections' biases joined to the
``bias`` part). The score is bilinear::

    s_ij = q_i · k_j / √d_h = Σ_a Σ_b q_i^(a) · k_j^(b) / √d_h

a ``(P, P)`` matrix of terms per key ``j`` (query part ``a`` × key part ``b``) whose sum is the score the model
used, exactly (up to rounding). Its sum over the query parts (:meth:`QKDecomposition.by_key_part`) says which
part of key ``j``'s residual stream drew the query there: for an induction head, the previous-token head's
output at the token after the earlier copy (K-composition, Olsson et al. 2022). The scores are only defined up
to a constant per query (the softmax ignores it), so :meth:`QKDecomposition.key_contrast` also gives each key
part's contribution to ``s_ij − mean_t s_it``, what raises key ``j`` above the keys the query sees.

Layers, heads and positions are 0-based here; part names number layers and heads from 1 (``L1H2``, ``MLP1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention.block_trace import linearise_norm
from ..attention.positional import rotate_half
from ..errors import TraceError
from ..models.language_model import LanguageModel
from ..models.language_model_trace import LanguageModelTracer

__all__ = ["QKDecomposition", "qk_decomposition", "residual_parts"]


@dataclass
class QKDecomposition:
    """Head ``head`` of layer ``layer`` at query position ``query`` (all 0-based): ``parts`` (``P`` names),
    ``terms (K, P, P)`` with ``terms[j, a, b] = q^(a) · k_j^(b) / √d_h`` over the keys ``j = 0..query``
    (``K = query + 1``), ``scores (K,)`` the pre-softmax scores the model computed and ``weights (K,)`` the
    attention the head really paid (their softmax)."""

    layer: int
    head: int
    query: int
    parts: list[str]
    terms: Tensor
    scores: Tensor
    weights: Tensor

    def by_key_part(self) -> Tensor:
        """``(K, P)``: each key part's contribution to each key's score, summed over the query parts."""
        return self.terms.sum(1)

    def by_query_part(self) -> Tensor:
        """``(K, P)``: each query part's contribution to each key's score, summed over the key parts."""
        return self.terms.sum(2)

    def key_contrast(self) -> Tensor:
        """``(K, P)``: each key part's contribution to ``s_j − mean_t s_t`` (the mean over the keys the query
        sees), what the softmax reads: :meth:`by_key_part` less its mean over the keys."""
        by = self.by_key_part()
        return by - by.mean(0, keepdim=True)

    def top_terms(self, key: int, k: int = 5) -> list[tuple[str, str, float]]:
        """The ``k`` largest terms at key ``key``: ``(query part, key part, value)``, largest first."""
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key <= self.query:
            raise ValueError(f"key must be a position in 0..{self.query}, got {key!r}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        flat = self.terms[key].flatten()  # (P·P,)
        order = flat.argsort(descending=True)[:k].tolist()
        n = len(self.parts)
        return [(self.parts[t // n], self.parts[t % n], float(flat[t])) for t in order]

    def to_dict(self) -> dict:
        """JSON-ready, layer and head numbered from 1 (positions stay 0-based)."""
        return {
            "layer": self.layer + 1,
            "head": self.head + 1,
            "query": self.query,
            "parts": list(self.parts),
            "scores": self.scores.tolist(),
            "weights": self.weights.tolist(),
            "by_key_part": self.by_key_part().tolist(),
            "by_query_part": self.by_query_part().tolist(),
            "terms": self.terms.tolist(),
        }


def _index(name: str, value, count: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
        raise ValueError(f"{name} must be an int in 0..{count - 1} (0-based), got {value!r}")
    return value


def _has_bias(model: LanguageModel, layer: int) -> bool:
    attn = model.layers[layer].self_attn
    norm = model.layers[layer].input_layernorm
    return (
        attn.q_proj.bias is not None
        or getattr(norm, "bias", None) is not None
        or any(model.layers[i].self_attn.o_proj.bias is not None for i in range(layer))
    )


@torch.no_grad()
def residual_parts(model: LanguageModel, ids: Tensor, layer: int) -> tuple[list[str], Tensor, Tensor]:
    """``(names, parts (N, P, D), x (N, D))``: the residual stream entering ``layer`` (0-based) on ``ids (N,)``
    split into its parts (module docstring; ``bias`` only where the model has biases), and the real stream
    ``x`` recorded in the model's own pass (:class:`~attnkit.models.language_model_trace.LanguageModelTracer`);
    the parts' sum is checked against it (:class:`~attnkit.errors.TraceError` where it is not ``x``)."""
    tracer = LanguageModelTracer(model)
    rec = tracer.record(ids)
    n = ids.shape[0]
    names, parts = ["embedding"], [model.embed_tokens(ids)]  # (N, D) each
    if model.embed_positions is not None:
        names.append("position")
        parts.append(model.embed_positions(torch.arange(n, device=ids.device)))
    bias = torch.zeros_like(parts[0])
    for i in range(layer):
        lp = tracer.replay(rec, i)  # checked against the layer's real output
        heads = torch.einsum("hij,hjk,hkd->hid", lp.weights, lp.head_values, lp.w_o)  # (H, N, D)
        for h in range(heads.shape[0]):
            names.append(f"L{i + 1}H{h + 1}")
            parts.append(heads[h])
        if lp.out_bias is not None:
            bias = bias + lp.out_bias
        if model.layers[i].mlp is not None:
            names.append(f"MLP{i + 1}")
            parts.append(lp.out - lp.mid)
    if _has_bias(model, layer):
        names.append("bias")
        parts.append(bias)
    stacked = torch.stack(parts, dim=1)  # (N, P, D)
    x = rec.inputs[layer]
    err = float((stacked.sum(1) - x).abs().max())
    tol = 1e3 * torch.finfo(x.dtype).eps * max(1.0, float(x.abs().max()))
    if not err <= tol:
        raise TraceError(
            f"the parts of layer {layer + 1}'s residual stream do not add up to it (max difference {err:.2g})"
        )
    return names, stacked, x


def _rotate(t: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE on ``t (..., Dh)`` with ``cos``, ``sin`` broadcast against it (linear in ``t``)."""
    return t * cos + rotate_half(t) * sin


@torch.no_grad()
def qk_decomposition(model: LanguageModel, ids: Tensor, layer: int, head: int, query: int) -> QKDecomposition:
    """The pre-softmax scores of head ``head`` of layer ``layer`` at position ``query`` of ``ids`` (``(N,)`` or
    ``(1, N)`` token ids), all 0-based, split into query-part × key-part terms (module docstring), in the
    model's dtype (a float64 model gives float64 terms). Only ``ids[: query + 1]`` is read: the attention is
    causal. The terms' sum is checked against the scores the attention module computes
    (:class:`~attnkit.errors.TraceError` where it is not them)."""
    if not isinstance(model, LanguageModel):
        raise TypeError(f"model must be an attnkit LanguageModel, got {type(model).__name__}")
    if not isinstance(ids, Tensor) or ids.dim() not in (1, 2) or (ids.dim() == 2 and ids.shape[0] != 1):
        raise ValueError(f"ids must be a (N,) or (1, N) tensor of token ids, got {getattr(ids, 'shape', ids)!r}")
    ids = ids.reshape(-1).long()
    cfg = model.config
    layer = _index("layer", layer, cfg.n_layers)
    head = _index("head", head, cfg.n_heads)
    query = _index("query", query, min(ids.shape[0], cfg.max_len))
    ids = ids[: query + 1].to(next(model.parameters()).device)  # (K,): keys 0..query
    was_training = model.training
    model.eval()
    try:
        names, parts, x = residual_parts(model, ids, layer)  # (K, P, D), (K, D)
        block = model.layers[layer]
        attn = block.self_attn
        scale, center, beta = linearise_norm(block.input_layernorm, x)  # (K, D), bool, (D,) or None
        normed = parts - parts.mean(-1, keepdim=True) if center else parts
        normed = normed * scale[:, None, :]  # (K, P, D): N's linear part at each position's real input
        if beta is not None:
            normed[:, -1] += beta  # β joins the bias part (the last one whenever the model has biases)
        dh, g = attn.head_dim, head // attn.groups
        w_q, w_k = attn.q_proj.weight[head * dh : (head + 1) * dh], attn.k_proj.weight[g * dh : (g + 1) * dh]
        q = normed[query] @ w_q.T  # (P, Dh)
        k = normed @ w_k.T  # (K, P, Dh)
        if attn.q_proj.bias is not None:
            q[-1] += attn.q_proj.bias[head * dh : (head + 1) * dh]
            k[:, -1] += attn.k_proj.bias[g * dh : (g + 1) * dh]
        u = block.input_layernorm(x)[None]  # (1, K, D): the module's own pass, for the real scores
        q_real = F.linear(u, attn.q_proj.weight, attn.q_proj.bias).view(1, -1, attn.n_heads, dh).transpose(1, 2)
        k_real = F.linear(u, attn.k_proj.weight, attn.k_proj.bias).view(1, -1, attn.n_kv_heads, dh).transpose(1, 2)
        if attn.rotary is not None:
            cos, sin = attn.rotary.cos_sin(query + 1, 0, device=q.device, dtype=q.dtype)  # (K, Dh)
            q = _rotate(q, cos[query], sin[query])
            k = _rotate(k, cos[:, None], sin[:, None])
            q_real, k_real = attn.rotary(q_real, k_real)  # (1, H, K, Dh), (1, Hkv, K, Dh)
        terms = torch.einsum("ad,jbd->jab", q, k) / math.sqrt(dh)  # (K, P, P)
        scores = k_real[0, g] @ q_real[0, head, query] / math.sqrt(dh)  # (K,)
        weights = attn(u, need_weights=True).weights[0, head, query]  # (K,): the head's real attention
    finally:
        model.train(was_training)
    err = float((terms.sum((1, 2)) - scores).abs().max())
    tol = 1e3 * torch.finfo(scores.dtype).eps * max(1.0, float(scores.abs().max()))
    if not err <= tol:
        raise TraceError(f"the QK terms of layer {layer + 1}, head {head + 1} do not add up to its scores ({err:.2g})")
    return QKDecomposition(layer, head, query, names, terms, scores, weights)
