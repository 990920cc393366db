"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"), the max-flow sibling
of attention rollout, for a language model's next tokens.

The layers' attention is read as a flow network: a node ``(l, i)`` for each layer boundary ``l = 0..L`` and
position ``i``, and an edge from ``(l − 1, j)`` to ``(l, i)`` whose capacity is ``Â_l[i, j]``, with
``Â_l = ½ (A_l + I)`` the layer's head-mean attention with the residual connection (rows sum to 1, as in
rollout). Where rollout multiplies the layers' matrices (the sum over paths of the products of their
weights), flow asks how much can pass from input token ``j`` to position ``i`` at the top at once: the
value of the maximum flow from ``(0, j)`` to ``(L, i)``, a path's throughput bounded by its narrowest edge.
Every value lies in ``[0, 1]``; one layer's flow is the edge itself, ``Â_1[i, j]``.

The flows are computed by ``networkx``'s maximum-flow (preflow-push) on capacities scaled to integers
(``SCALE``; exact integer arithmetic, off from the real-valued flow by at most one unit per edge cut,
``< 1e-6`` here). A causal model's flow into position ``i`` passes only positions ``≤ i``, so each target's
network holds those nodes alone. The cost grows as ``G · n`` max-flow problems of ``L · n²`` edges: a heavy
method, run as a worker job in the explorer.
"""

from __future__ import annotations

import networkx as nx
import torch
from torch import Tensor

from ..errors import InputError
from .result import MethodRows

__all__ = ["SCALE", "flow_matrix", "flow_rows", "residual_attention"]

#: the integer units of one unit of attention in the flow network's capacities
SCALE = 10**9


def residual_attention(attention: Tensor) -> Tensor:
    """``(L, N, N)``: each layer's head-mean attention with the residual, ``Â = ½ (A + I)``, rows renormalised."""
    eye = torch.eye(attention.shape[-1], dtype=attention.dtype, device=attention.device)
    hat = 0.5 * attention + 0.5 * eye
    return hat / hat.sum(-1, keepdim=True)


def _network(hat: Tensor, top: int) -> nx.DiGraph:
    """The flow network of the layers ``hat (L, N, N)`` over positions ``0..top``."""
    graph = nx.DiGraph()
    layers = hat.shape[0]
    caps = torch.round(hat[:, : top + 1, : top + 1].double() * SCALE).long().tolist()  # (L, top+1, top+1)
    for layer in range(layers):
        for i, row in enumerate(caps[layer]):
            for j, cap in enumerate(row):
                if cap > 0:
                    graph.add_edge((layer, j), (layer + 1, i), capacity=cap)
    return graph


def flow_matrix(attention: Tensor, rows: list[int] | None = None) -> Tensor:
    """``(len(rows), N)`` float64: the attention flow from every input token ``j`` to each of ``rows`` (positions
    at the top; default every position) through the layers ``attention (L, N, N)`` (each layer's attention,
    heads averaged; :func:`residual_attention` is applied here)."""
    if not isinstance(attention, Tensor) or attention.dim() != 3 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(f"attention must be (L, N, N), got {getattr(attention, 'shape', attention)}")
    layers, n = int(attention.shape[0]), int(attention.shape[-1])
    rows = list(range(n)) if rows is None else [int(r) for r in rows]
    if any(not 0 <= r < n for r in rows):
        raise ValueError(f"rows must be positions in 0..{n - 1}, got {rows}")
    hat = residual_attention(attention.double())
    out = torch.zeros(len(rows), n, dtype=torch.float64)
    causal = bool(torch.triu(attention, diagonal=1).abs().sum() == 0)
    for r, i in enumerate(rows):
        top = i if causal else n - 1  # a causal model's flow into i passes positions <= i only
        graph = _network(hat, top)
        sink = (layers, i)
        for j in range(top + 1):
            if (0, j) in graph and sink in graph:
                out[r, j] = nx.maximum_flow_value(graph, (0, j), sink, capacity="capacity") / SCALE
    return out


@torch.no_grad()
def flow_rows(sa, ids: list[int], prompt_len: int, *, layer=None, head=None) -> MethodRows:
    """The rows of :func:`attnkit.attribution.explain_generation` by attention flow: ``scores (G, n − 1)``, row
    ``t`` the flow into the position ``P − 1 + t`` that predicts token ``ids[P + t]`` from every input token.
    ``sa``: a text model (its :meth:`stream` gives every layer's attention over ``ids[:-1]``)."""
    if layer is not None or head is not None:
        raise InputError("attention_flow composes every layer and head: --layer and --head do not apply")
    maps: list[Tensor] = []
    sa.stream(ids[:-1], lambda _layer, w: maps.append(w.double().mean(0).cpu()))  # (n-1, n-1) per layer
    positions = list(range(prompt_len - 1, len(ids) - 1))
    return MethodRows(flow_matrix(torch.stack(maps), positions))  # (G, n-1)
