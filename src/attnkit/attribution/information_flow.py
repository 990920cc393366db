"""Information-flow routes (Ferrando & Voita 2024, "Information flow routes: automatically interpreting
language models at scale"; the graph of the LM Transparency Tool) for a decoder-only model, from one
forward pass and a top-down replay of its layers (the model's :class:`~attnkit.attention.block_trace.BlockTracer`).

Every block writes to the residual stream as a sum, and each summand's importance for the sum is its
proximity to it (as in ALTI, Ferrando et al. 2022)::

    prox(t, s) = max(0, ‖s‖₁ − ‖s − t‖₁),     importance(t) = prox(t, s) / Σ_{t'} prox(t', s)

- the attention sub-block at position i: ``mid_i = r_i + Σ_h Σ_j α^h_ij f^h(u_j) + b_O``; the edges
  ``(head h, j → i)`` with ``t = α^h_ij f^h(u_j)`` and the residual ``t = r_i``, normalised together
  (the bias is in ``s`` but no edge);
- the MLP sub-block: ``out_i = mid_i + m_i``; the MLP node ``t = m_i`` and the residual ``t = mid_i``.

The graph is built top-down from the chosen position at the last layer, as the paper does: a position
is on the graph at a layer's output if it is the chosen one or a kept edge leaves it higher up; its
MLP node is kept if its importance is at least τ; its attention edges whose importance is at least τ
are kept, and their sources are on the graph at the layer's input, as is the position itself (its
residual carries it down, whatever its importance; the residual is drawn as an edge, like the others, only
where its importance is at least τ, and each reached position's share is kept in ``residual_shares``). The model runs once as it runs without attnkit, keeping each layer's input and computing
the chosen position's logits only (:meth:`~attnkit.attention.block_trace.BlockTracer.record`); then, from the
last layer down, each layer is replayed **only at the positions the graph has reached there**
(:meth:`~attnkit.attention.block_trace.BlockTracer.layer_rows`: its attention module rerun up to the kernel for its queries
and keys, the reached rows of α formed in chunks of at most ``_ROWS`` elements, the block rebuilt at
those rows and checked against the recorded output), so one position's routes cost about one forward
pass more, never build a layer's ``(H, N, N)`` map, and drop each layer's residuals once walked. ``τ = 0`` keeps
every edge with a non-zero attention weight, and then every earlier position is reached.

:func:`information_flow_stream` yields the graph as the walk builds it: one :class:`FlowLayer` (that
layer's kept edges and MLP nodes) as each layer is finished, last layer first, then the whole
:class:`InformationFlowGraph`; :func:`information_flow_routes` is that stream collected, so a view
that draws layers as they arrive and one that waits for the graph read the same numbers.

Where a norm follows the attention (Gemma 2/3, OLMo 2: ``mid_i = r_i + P(a_i)``) each head's term is
carried through its linear part at ``a_i``'s real RMS, so the terms still add up to ``mid_i``. The
routes read a decoder's prediction: an encoder-only model is refused in one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..attention.block_trace import BlockTracer, LMRecording, LMRowParts
from .lm_mixing import LensRow, lens_rows
from .tracers import block_tracer

__all__ = [
    "FlowEdge",
    "FlowLayer",
    "FlowNode",
    "InformationFlowGraph",
    "information_flow_routes",
    "information_flow_stream",
]

_CHUNK = 1 << 22  # elements of one (rows, N, D) block of terms
_ROWS = 1 << 24  # elements of one chunk of attention rows (H, rows, K)


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


def _edge_dict(e: FlowEdge) -> dict:
    return {
        "layer": e.layer + 1,
        "head": None if e.head is None else e.head + 1,
        "source": e.source + 1,
        "target": e.target + 1,
        "weight": e.weight,
    }


def _node_dict(m: FlowNode) -> dict:
    return {"layer": m.layer + 1, "position": m.position + 1, "weight": m.weight}


@dataclass(frozen=True)
class FlowLayer:
    """One layer's part of the graph (0-based ``layer``), as the top-down walk finishes it: its kept
    attention ``edges`` (the residual ones included), its kept ``mlp_nodes`` and each reached
    position's residual share (``residual_shares``, by position). :meth:`to_dict` numbers from 1."""

    layer: int
    edges: list[FlowEdge]
    mlp_nodes: list[FlowNode]
    residual_shares: dict[int, float]

    def to_dict(self) -> dict:
        """JSON-ready: ``{"layer", "edges", "mlp_nodes"}`` as in :meth:`InformationFlowGraph.to_dict`."""
        return {
            "layer": self.layer + 1,
            "edges": [_edge_dict(e) for e in self.edges],
            "mlp_nodes": [_node_dict(m) for m in self.mlp_nodes],
        }


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
            "edges": [_edge_dict(e) for e in self.edges],
            "mlp_nodes": [_node_dict(m) for m in self.mlp_nodes],
            "lens": [r.to_dict() for r in self.lens],
        }


def _prox(total: Tensor, parts: Tensor) -> Tensor:
    """``(..., K)``: ``max(0, ‖total‖₁ − ‖total − part‖₁)`` with ``total (..., D)``, ``parts (..., K, D)``."""
    return (total.abs().sum(-1, keepdim=True) - (total.unsqueeze(-2) - parts).abs().sum(-1)).clamp_min(0.0)


def _row_importances(p: LMRowParts, tau: float) -> dict:
    """One layer's importances at ``p.rows`` only (the positions the graph has reached): the kept
    attention edges (importance ≥ τ, α > 0) into them, and their residual and MLP shares.

    Head by head, each head's ``f^h (K, D)`` is formed once and its terms ``α^h_ij f^h(u_j)`` (through
    the norm after the attention where the block has one) are compared with ``mid_i`` for the rows in
    chunks of at most ``_CHUNK`` elements; keys after the last row (α = 0 in a decoder) are not formed."""
    d = p.residual.shape[1]
    heads, k, keys = p.weights.shape  # (H, k, K)
    mid = p.mid  # (k, D)
    prox_h = mid.new_zeros(k, heads, keys)  # (k, H, K)
    rows = max(1, _CHUNK // max(1, keys * d))
    cols = max(1, _CHUNK // max(1, rows * d))
    for h in range(heads):
        f = p.head_values[h] @ p.w_o[h]  # (K, D): f^h(u_j)
        for lo in range(0, k, rows):
            hi = min(k, lo + rows)
            for c0 in range(0, keys, cols):
                c1 = min(keys, c0 + cols)
                t = p.weights[h, lo:hi, c0:c1, None] * f[None, c0:c1]  # (r, c, D)
                if p.scale is not None:
                    if p.center:
                        t = t - t.mean(-1, keepdim=True)
                    t = t * p.scale[lo:hi, None, :]
                prox_h[lo:hi, h, c0:c1] = _prox(mid[lo:hi], t)
        del f
    prox_r = _prox(mid, p.residual.unsqueeze(-2))[:, 0]  # (k,)
    z = (prox_h.sum((1, 2)) + prox_r).clamp_min(torch.finfo(mid.dtype).tiny)  # (k,)
    imp = prox_h / z[:, None, None]  # (k, H, K)
    alive = (imp >= tau) & (p.weights.transpose(0, 1) > 0)
    kept = [(p.rows[a], h, j, float(imp[a, h, j])) for a, h, j in alive.nonzero().tolist()]
    prox_m = _prox(p.out, torch.stack([mid, p.out - mid], dim=-2))  # (k, 2): residual, MLP
    share = prox_m / prox_m.sum(-1, keepdim=True).clamp_min(torch.finfo(mid.dtype).tiny)
    return {
        "edges": kept,
        "residual": dict(zip(p.rows, (prox_r / z).tolist())),
        "mlp": dict(zip(p.rows, share[:, 1].tolist())),
        "heads": heads,
    }


def _layer_importances(tracer: BlockTracer, rec: LMRecording, layer: int, targets: list[int], tau: float) -> dict:
    """:func:`_row_importances` of layer ``layer`` at ``targets`` (sorted), the targets taken in chunks
    whose attention rows ``(H, rows, K)`` hold at most ``_ROWS`` elements: the layer's queries and keys
    are taken once (:meth:`~attnkit.attention.block_trace.BlockTracer.layer_rows`), each chunk's rows of α formed, used and
    dropped, and nothing of the layer outlives the call."""
    replay = tracer.layer_rows(rec, layer, targets[-1] + 1)
    heads = int(replay.head_values.shape[0])
    info: dict = {"edges": [], "residual": {}, "mlp": {}, "heads": heads}
    lo = 0
    while lo < len(targets):
        hi = lo + 1  # one row at least; more while the chunk's (H, rows, K) stays within _ROWS
        while hi < len(targets) and (hi + 1 - lo) * heads * (targets[hi] + 1) <= _ROWS:
            hi += 1
        part = _row_importances(replay.parts(targets[lo:hi]), tau)
        info["edges"] += part["edges"]
        info["residual"].update(part["residual"])
        info["mlp"].update(part["mlp"])
        lo = hi
    return info


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
    (top ``k`` tokens), and the ``pieces`` (one per token, optional) carried into the result: the
    last item of :func:`information_flow_stream`."""
    *_, graph = information_flow_stream(model, input_ids, position=position, threshold=threshold, pieces=pieces, k=k)
    return graph


def information_flow_stream(
    model: nn.Module,
    input_ids: Tensor,
    *,
    position: int = -1,
    threshold: float = 0.04,
    pieces: list[str] | None = None,
    k: int = 5,
) -> Iterator[FlowLayer | InformationFlowGraph]:
    """:func:`information_flow_routes` as it is built: one :class:`FlowLayer` per layer, the last layer
    first (each yielded as soon as the top-down walk has finished it, before the next layer is
    replayed), then the whole :class:`InformationFlowGraph`. The arguments are checked at the call,
    before anything runs; the model runs when the first item is asked for."""
    tracer = block_tracer(model)
    tracer.require_decoder("information-flow routing")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a number in [0, 1], got {threshold!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive number of tokens, got {k!r}")
    n = int(input_ids.shape[-1]) if isinstance(input_ids, Tensor) else 0
    if isinstance(position, bool) or not isinstance(position, int) or not -n <= position < n:
        raise ValueError(f"position must be a position in 0..{n - 1} (or negative from the end), got {position!r}")
    if pieces is not None and len(pieces) != n:
        raise ValueError(f"pieces must have one text per token ({n}), got {len(pieces)}")
    return _walk(tracer, input_ids, position % n, float(threshold), pieces, k)


def _walk(
    tracer: BlockTracer, input_ids: Tensor, pos: int, threshold: float, pieces: list[str] | None, k: int
) -> Iterator[FlowLayer | InformationFlowGraph]:
    """The top-down walk of :func:`information_flow_stream` (arguments checked)."""
    with torch.no_grad():
        rec = tracer.record(input_ids, logits_at=pos)
        logits = rec.position_logits if rec.position_logits is not None else tracer.logits(rec.trace.final[pos])
        predicted = int(logits.argmax())
        lens = lens_rows(tracer, [rec.inputs[0][pos], *(o[pos] for o in rec.outputs)], predicted, k)
    active = {pos}
    edges: list[FlowEdge] = []
    nodes: list[FlowNode] = []
    shares: dict[tuple[int, int], float] = {}
    heads = 0
    for layer in range(rec.n_layers - 1, -1, -1):
        targets = sorted(active)
        with torch.no_grad():  # the reached rows of one layer's maps at a time
            info = _layer_importances(tracer, rec, layer, targets, threshold)
        heads = info["heads"]
        rec.outputs[layer] = None  # this layer is done: its output (the next layer's input) is not read again
        if layer + 1 < rec.n_layers:
            rec.inputs[layer + 1] = None
        part = FlowLayer(layer, [], [], {})
        for i in targets:
            w = info["mlp"][i]
            if w >= threshold:
                part.mlp_nodes.append(FlowNode(layer, i, w))
        sources = set(active)  # each position's residual carries it down
        for i, h, j, w in info["edges"]:
            part.edges.append(FlowEdge(layer, h, j, i, w))
            sources.add(j)
        for i in targets:
            part.residual_shares[i] = info["residual"][i]
            if info["residual"][i] >= threshold:  # a weaker residual is no edge, but still carries i down
                part.edges.append(FlowEdge(layer, None, i, i, info["residual"][i]))
        active = sources
        edges += part.edges
        nodes += part.mlp_nodes
        shares.update({(layer, i): w for i, w in part.residual_shares.items()})
        yield part
    yield InformationFlowGraph(pos, predicted, threshold, edges, nodes, lens, pieces, rec.n_layers, heads, shares)
