"""``analyse(model, LMViewRequest)``: a view of one prediction of a decoder-only model (the logit lens,
direct logit attribution, the information-flow routes of Ferrando & Voita 2024), as an
:class:`~attnkit.service.analysis.LMViewAnalysis` that the CLI, the server and the notebook show alike.

The text is read as given (teacher forcing, no generation); the position is 1-based as the user gives
it. The work is one traced forward pass for the view (:func:`attnkit.hf.lm_decomposition.trace_lm`,
one layer's maps held at a time), and for the routes one more for the logit lens at the graph's
positions (:func:`attnkit.attribution.lm_methods.lens_at`). The routes are built layer by layer
(:func:`attnkit.attribution.information_flow.information_flow_stream`): ``on_layer`` is handed each
layer's part as JSON (:meth:`~attnkit.attribution.information_flow.FlowLayer.to_dict`, 1-based) as soon
as it is done, what the server streams to a page drawing the graph as it grows, and ``progress`` the
fraction of layers done.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import InputError
from .analysis import LMViewAnalysis
from .model import Model
from .requests import DEFAULT_THRESHOLD, LMViewRequest

__all__ = ["analyse_lm_view"]


def _edge_details(sa, ids: list[int], graph, k: int) -> dict[tuple[int, int], dict]:
    """``{(layer, target): details}`` (0-based) at each target of a kept head edge: every head's attention
    row and what it promotes and suppresses (:func:`attnkit.attribution.lm_methods.head_details`), what the
    graph view shows when an edge is clicked; one traced pass, only those positions kept."""
    from ..attribution.lm_methods import head_details

    wanted: dict[int, set[int]] = {}
    for e in graph.edges:
        if e.head is not None:
            wanted.setdefault(e.layer, set()).add(e.target)
    return head_details(sa.model, ids, wanted, k=k) if wanted else {}


def analyse_lm_view(
    model: Model,
    req: LMViewRequest,
    progress: Callable[[float], None] | None = None,
    on_layer: Callable[[dict], None] | None = None,
) -> LMViewAnalysis:
    """Compute ``req``'s view on ``model`` (a decoder-only model opened by :func:`~attnkit.service.open_model`);
    for the routes, ``on_layer(part)`` gets each layer's part of the graph as it is done (last layer first)
    and ``progress(fraction)`` the fraction of layers done (see the module docstring)."""
    import torch

    from ..attribution.generation import contrast_token, forced_ids
    from ..attribution.information_flow import FlowLayer, information_flow_stream
    from ..attribution.lm_methods import lens_at
    from ..attribution.lm_mixing import direct_logit_attribution, logit_lens

    sa = model.impl
    if not getattr(sa, "can_generate", False):
        raise InputError(
            f"{model.label} has no language-model head (an encoder-only model): the {req.view} view reads a "
            "prediction; its self-attention views are attention, rollout, attention_norm, value_zeroing and alti"
        )
    ids, _ = forced_ids(sa, req.text, at_least=1)  # one token has a prediction to view
    n = len(ids)
    if req.position is not None and req.position > n:
        raise InputError(f"position must be a token of the text, 1..{n}, got {req.position}")
    pos = n - 1 if req.position is None else req.position - 1
    token_id = None if req.token is None else contrast_token(sa, req.token)
    x = torch.tensor(ids, device=sa.device)
    pieces = sa.pieces_of(ids)
    t0 = time.perf_counter()
    lens = dla = graph = node_lens = rows = None
    if req.view == "logit_lens":
        lens = logit_lens(sa.model, x, position=pos, k=req.top)
        token = lens[-1].top[0]
    elif req.view == "direct_logit":
        dla = direct_logit_attribution(sa.model, x, position=pos, token=token_id)
        token = dla.token
    else:
        tau = DEFAULT_THRESHOLD if req.threshold is None else float(req.threshold)
        for part in information_flow_stream(sa.model, x, position=pos, threshold=tau, k=req.top):
            if isinstance(part, FlowLayer):
                if on_layer is not None:
                    on_layer(part.to_dict())
                if progress is not None:
                    progress((sa.num_layers - part.layer) / sa.num_layers)
            else:
                graph = part
        token = graph.token
        on_graph = sorted({e.source for e in graph.edges} | {e.target for e in graph.edges} | {pos})
        node_lens = lens_at(sa.model, ids, on_graph, k=req.top)
        rows = _edge_details(sa, ids, graph, req.top)
    shown = {token}
    for lens_rows in [lens or [], *(node_lens or {}).values()]:
        for r in lens_rows:
            shown.update(r.top)
    for detail in (rows or {}).values():
        shown.update(detail["promotes"].flatten().tolist() + detail["suppresses"].flatten().tolist())
    shown = sorted(shown)
    vocab = dict(zip(shown, sa.pieces_of(shown)))
    return LMViewAnalysis(
        model=model.label,
        kind=sa.family,
        request=req,
        text=req.text,
        pieces=pieces,
        position=pos,
        token=int(token),
        token_piece=vocab[token],
        layers=int(sa.num_layers),
        heads=int(sa.num_heads),
        lens=lens,
        dla=dla,
        graph=graph,
        node_lens=node_lens,
        vocab=vocab,
        attention_rows=rows,
        spec=model.spec,
        seconds=time.perf_counter() - t0,
    )
