"""Information-flow routes (Ferrando & Voita 2024, "Information flow routes: automatically interpreting
language models at scale"; the graph of the LM Transparency Tool) for a decoder-only model, from one
forward pass traced layer by layer (:func:`attnkit.hf.lm_decomposition.trace_lm`).

Every block writes to the residual stream as a sum, and each summand's importance for the sum is its
proximity to it (as in ALTI, Ferrando et al. 2022)::

    prox(t, s) = max(0, ‖s‖₁ − ‖s − t‖₁),     importance(t) = prox(t, s) / Σ_{t'} prox(t', s)

- the attention sub-block at position i: ``mid_i = r_i + Σ_h Σ_j α^h_ij f^h(u_j) + b_O``; the edges
  ``(head h, j → i)`` with ``t = α^h_ij f^h(u_j)`` and the residual ``t = r_i``, normalised together
  (the bias is in ``s`` but no edge);
- the MLP sub-block: ``out_i = mid_i + m_i``; the MLP node ``t = m_i`` and the residual ``t = mid_i``.

The graph is built top-down from the chosen position at the last layer: a position is on the graph at
a layer's output if it is the chosen one or a kept edge leaves it higher up; its MLP node is kept if
its importance is at least τ; its attention edges whose importance is at least τ are kept, and their
sources are on the graph at the layer's input, as is the position itself (its residual). Each layer's
edge importances (every target, every head) are computed as the layer runs and only those at least τ
are kept (a few per target for a usual τ), so no layer's ``(H, N, N)`` maps outlive it. ``τ = 0``
keeps every edge with a non-zero attention weight.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..hf.lm_decomposition import LMLayerParts, final_norm, require_decoder, trace_lm
from .lm_mixing import LensRow

__all__ = ["FlowEdge", "FlowNode", "InformationFlowGraph", "information_flow_routes"]

_CHUNK = 1 << 22  # elements of one (rows, N, D) block of terms


@dataclass(frozen=True)
class FlowEdge:
    """An attention edge (0-based ``layer``, ``head``; ``head`` None = the residual) from ``source`` to
    ``target`` position, with its ``weight`` (importance at the target, see the module docstring)."""

    layer: int
    head: int | None
    source: int
    target: int
    weight: float


@dataclass(frozen=True)
class FlowNode:
    """An MLP node (0-based ``layer``) at ``position`` with its importance ``weight``."""

    layer: int
    position: int
    weight: float


@dataclass
class InformationFlowGraph:
    """The routes to ``position``'s prediction ``token``: ``edges``, ``mlp_nodes``, the ``threshold``,
    the logit lens at the position (``lens``: embeddings, then one row per block) and the ``pieces``
    (the tokens' text, where given). :meth:`to_dict` numbers layers, heads and positions from 1."""

    position: int
    token: int
    threshold: float
    edges: list[FlowEdge]
    mlp_nodes: list[FlowNode]
    lens: list[LensRow]
    pieces: list[str] | None = None
    n_layers: int = 0
    n_heads: int = 0
    residual_shares: dict[tuple[int, int], float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready (1-based layers, heads and positions; ``head`` null = the residual)."""
        return {
            "position": self.position + 1,
            "token": self.token,
            "threshold": self.threshold,
            "layers": self.n_layers,
            "heads": self.n_heads,
            "pieces": self.pieces,
            "edges": [
                {
                    "layer": e.layer + 1,
                    "head": None if e.head is None else e.head + 1,
                    "source": e.source + 1,
                    "target": e.target + 1,
                    "weight": e.weight,
                }
                for e in self.edges
            ],
            "mlp_nodes": [
                {"layer": m.layer + 1, "position": m.position + 1, "weight": m.weight} for m in self.mlp_nodes
            ],
            "lens": [r.to_dict() for r in self.lens],
        }


def _prox(total: Tensor, parts: Tensor) -> Tensor:
    """``(..., K)``: ``max(0, ‖total‖₁ − ‖total − part‖₁)`` with ``total (..., D)``, ``parts (..., K, D)``."""
    return (total.abs().sum(-1, keepdim=True) - (total.unsqueeze(-2) - parts).abs().sum(-1)).clamp_min(0.0)


def _layer_importances(p: LMLayerParts, tau: float) -> dict:
    """One layer's kept attention edges (importance ≥ τ, α > 0) and every position's residual and MLP shares."""
    n, d = p.residual.shape
    heads = p.weights.shape[0]
    rows = max(1, _CHUNK // max(1, n * d))
    kept: list[tuple[int, int, int, float]] = []
    res_share = torch.empty(n, dtype=p.mid.dtype)
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        mid, r = p.mid[lo:hi], p.residual[lo:hi]  # (c, D)
        prox_h = torch.stack(
            [_prox(mid, p.weights[h, lo:hi, :, None] * p.values[h][None]) for h in range(heads)], dim=1
        )  # (c, H, N)
        prox_r = _prox(mid, r.unsqueeze(-2))[:, 0]  # (c,)
        z = (prox_h.sum((1, 2)) + prox_r).clamp_min(torch.finfo(mid.dtype).tiny)  # (c,)
        imp = prox_h / z[:, None, None]  # (c, H, N)
        res_share[lo:hi] = prox_r / z
        alive = (imp >= tau) & (p.weights[:, lo:hi].transpose(0, 1) > 0)
        for i, h, j in alive.nonzero().tolist():
            kept.append((lo + i, h, j, float(imp[i, h, j])))
    m = p.out - p.mid  # (N, D): the MLP's output
    prox_m = _prox(p.out, torch.stack([p.mid, m], dim=-2))  # (N, 2): residual, MLP
    share = prox_m / prox_m.sum(-1, keepdim=True).clamp_min(torch.finfo(m.dtype).tiny)
    return {"edges": kept, "residual": res_share, "mlp": share[:, 1], "heads": heads}


@torch.no_grad()
def information_flow_routes(
    model: nn.Module,
    input_ids: Tensor,
    *,
    position: int = -1,
    threshold: float = 0.04,
    pieces: list[str] | None = None,
    k: int = 5,
) -> InformationFlowGraph:
    """The information-flow graph of ``position``'s prediction (default the last position) with
    importance threshold ``threshold`` (τ, in [0, 1]; see the module docstring), the logit lens there
    (top ``k`` tokens), and the ``pieces`` (one per token, optional) carried into the result."""
    require_decoder(model, "information-flow routes")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a number in [0, 1], got {threshold!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive number of tokens, got {k!r}")
    n = int(input_ids.shape[-1]) if isinstance(input_ids, Tensor) else 0
    if isinstance(position, bool) or not isinstance(position, int) or not -n <= position < n:
        raise ValueError(f"position must be a position in 0..{n - 1} (or negative from the end), got {position!r}")
    if pieces is not None and len(pieces) != n:
        raise ValueError(f"pieces must have one text per token ({n}), got {len(pieces)}")
    pos = position % n
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise ValueError("model must have a language-model head (a ...ForCausalLM model)")
    per_layer: list[dict] = []
    outs: list[Tensor] = []

    def on_layer(p: LMLayerParts) -> None:
        per_layer.append(_layer_importances(p, float(threshold)))
        outs.append(p.out[pos])

    trace = trace_lm(model, input_ids, on_layer)
    predicted = int(trace.logits[pos].argmax())
    norm = final_norm(model)
    lens = []
    for layer, x in enumerate([trace.embedding[pos], *outs]):
        logits = head(norm(x[None]))[0]  # (V,)
        top = logits.topk(min(k, logits.shape[0]))
        lens.append(
            LensRow(layer, top.indices.tolist(), top.values.tolist(), 1 + int((logits > logits[predicted]).sum()))
        )

    active = {pos}
    edges: list[FlowEdge] = []
    nodes: list[FlowNode] = []
    shares: dict[tuple[int, int], float] = {}
    for layer in range(len(per_layer) - 1, -1, -1):
        info = per_layer[layer]
        for i in sorted(active):
            w = float(info["mlp"][i])
            if w >= threshold:
                nodes.append(FlowNode(layer, i, w))
        sources = set(active)  # each position's residual carries it down
        for i, h, j, w in info["edges"]:
            if i in active:
                edges.append(FlowEdge(layer, h, j, i, w))
                sources.add(j)
        for i in sorted(active):
            shares[(layer, i)] = float(info["residual"][i])
            edges.append(FlowEdge(layer, None, i, i, shares[(layer, i)]))
        active = sources
    return InformationFlowGraph(
        pos,
        predicted,
        float(threshold),
        edges,
        nodes,
        lens,
        pieces,
        len(per_layer),
        per_layer[0]["heads"] if per_layer else 0,
        shares,
    )
