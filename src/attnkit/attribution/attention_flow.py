"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"), the max-flow sibling
of attention rollout, for a language model's next tokens and a translator's target pieces.

The layers' attention is read as a flow network: a node ``(l, i)`` for each layer boundary ``l = 0..L`` and
position ``i``, and an edge from ``(l − 1, j)`` to ``(l, i)`` whose capacity is ``Â_l[i, j]``, with
``Â_l = ½ (A_l + I)`` the layer's head-mean attention with the residual connection (rows sum to 1, as in
rollout). Where rollout multiplies the layers' matrices (the sum over paths of the products of their
weights), flow asks how much can pass from input token ``j`` to position ``i`` at the top at once: the
value of the maximum flow from ``(0, j)`` to ``(L, i)``, a path's throughput bounded by its narrowest edge.
Every value lies in ``[0, 1]``; one layer's flow is the edge itself, ``Â_1[i, j]``.

The flows are computed by SciPy's maximum flow (Dinic's algorithm, compiled) on capacities scaled to
integers (``SCALE``; exact integer arithmetic, off from the real-valued flow by at most one unit per edge
cut, ``< 1e-6`` here), over one network for all the rows: a causal model's network has no edge from a later
position, so its flow into position ``i`` passes positions ``≤ i`` alone. The cost grows as ``G · n``
max-flow problems of ``L · n²`` edges: a heavy method, run as a worker job in the explorer.

A translator's network is its encoder's: the layers' self-attention over the source (with the residual, as
above), then a last set of edges from the encoder's top to each target piece ``t``, of capacity the
cross-attention ``C[t, j]`` of one decoder layer (heads averaged; default the last), as rollout reads it
(``C · rollout(encoder)``). The target's row of ``C`` is all it reads of the source, so that layer has no
residual edge. A Hugging Face model's special tokens stay in the network, as in its rollout.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow
from torch import Tensor

from ..alignment.rollout import residual_attention
from ..errors import InputError
from .result import MethodRows

__all__ = ["SCALE", "flow_matrix", "flow_pairs", "flow_rows", "residual_attention"]

#: the integer units of one unit of attention in the flow network's capacities
SCALE = 10**9


def _network(hat: Tensor, readout: Tensor | None) -> csr_matrix:
    """The flow network of the layers ``hat (L, N, N)`` as a sparse capacity matrix: node ``l·N + j`` is
    position ``j`` at layer boundary ``l``, an edge from ``(l, j)`` to ``(l + 1, i)`` carries ``hat[l, i, j]``;
    with ``readout (T, N)``, sink ``(L + 1)·N + t`` is fed from the top layer with ``readout[t, j]``."""
    layers, n = int(hat.shape[0]), int(hat.shape[-1])
    caps = torch.round(hat.double() * SCALE).long()  # (L, N, N): [l, i, j] is the edge (l, j) -> (l + 1, i)
    layer, i, j = caps.nonzero(as_tuple=True)
    rows, cols, data = [layer * n + j], [(layer + 1) * n + i], [caps[layer, i, j]]
    if readout is not None:
        out = torch.round(readout.double() * SCALE).long()  # (T, N)
        t, j = out.nonzero(as_tuple=True)
        rows, cols, data = [*rows, layers * n + j], [*cols, (layers + 1) * n + t], [*data, out[t, j]]
    size = (layers + 1) * n + (0 if readout is None else int(readout.shape[0]))
    return csr_matrix(
        (torch.cat(data).numpy().astype(np.int32), (torch.cat(rows).numpy(), torch.cat(cols).numpy())),
        shape=(size, size),
    )


def flow_matrix(attention: Tensor, rows: list[int] | None = None, *, readout: Tensor | None = None) -> Tensor:
    """``(len(rows), N)`` float64: the attention flow from every input token ``j`` to each of ``rows`` (positions
    at the top; default every position) through the layers ``attention (L, N, N)`` (each layer's attention,
    heads averaged; :func:`residual_attention` is applied here). With ``readout (T, N)`` (a translator's
    cross-attention, heads averaged), the flow goes on from the top layer into each of its rows (``rows``
    then number those, default all ``T``) through its weights, with no residual."""
    if not isinstance(attention, Tensor) or attention.dim() != 3 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(f"attention must be (L, N, N), got {getattr(attention, 'shape', attention)}")
    layers, n = int(attention.shape[0]), int(attention.shape[-1])
    if readout is not None and (not isinstance(readout, Tensor) or readout.dim() != 2 or readout.shape[1] != n):
        got = getattr(readout, "shape", readout)
        raise ValueError(f"readout must be (T, {n}) to read attention (L, {n}, {n}), got {got}")
    count = n if readout is None else int(readout.shape[0])
    rows = list(range(count)) if rows is None else [int(r) for r in rows]
    if any(not 0 <= r < count for r in rows):
        raise ValueError(f"rows must be positions in 0..{count - 1}, got {rows}")
    graph = _network(
        residual_attention(attention.detach().double().cpu()), readout if readout is None else readout.detach().cpu()
    )
    # one network for every target: a sink has no way out, so it takes no other target's flow; and a causal
    # model's network has no edge from a later position, so the flow into i passes positions <= i alone
    first_sink = layers * n if readout is None else (layers + 1) * n
    out = torch.zeros(len(rows), n, dtype=torch.float64)
    for r, t in enumerate(rows):
        for j in range(n):
            out[r, j] = maximum_flow(graph, j, first_sink + t).flow_value / SCALE
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


def flow_pairs(model, pair, *, layer=None) -> MethodRows:
    """A translator's rows (:func:`attnkit.attribution.explain`): ``scores (T, S)``, row ``t`` the flow from
    every source piece through the encoder's layers and the cross-attention of ``layer`` (1-based, default the
    last) into target piece ``t``. ``model``: attnkit's Transformer or a Hugging Face encoder-decoder forced to
    ``pair`` (:class:`~attnkit.attribution.forced.ForcedTranslation`)."""
    from .composed_attention import composable_maps

    maps = composable_maps(model, pair, layer)
    flows = flow_matrix(maps.enc_self.cpu(), readout=maps.cross.cpu())  # (T', S')
    return MethodRows(flows[maps.rows, maps.cols])  # (T, S)
