"""``POST /api/flow``: a view of one prediction of a decoder-only model reading a text as given, JSON in and
out like every route: the information-flow routes (Ferrando & Voita 2024) with the logit lens at each of the
graph's positions and each head edge's attention rows (``"view": "routes"``, the page's graph view), the logit
lens (``"logit_lens"``) or the direct logit attribution (``"direct_logit"``), as
:class:`attnkit.service.LMViewRequest` and :meth:`attnkit.service.LMViewAnalysis.to_dict` (the CLI's
``--json``).

Every bound is checked before a tensor is built: the text's characters and tokens (as ``/api/self-attention``),
the position, the threshold (at least :data:`MIN_THRESHOLD`: each target then keeps at most
``1 / MIN_THRESHOLD`` edges per layer) and the numbers the answer may hold (``--max-answer-numbers``, counted
as every layer's and head's attention row at every position: the most the graph can ask for). The logit lens
and the direct logit attribution are one traced forward pass, run in the fast lane as attention is; the routes
(a traced pass, one for the graph positions' logit lens and one for the edges' attention rows, and every head's
edge importances) are a heavy job (:mod:`attnkit.explorer.jobs`: a worker process, the queue,
``--job-timeout``), as ``/api/generate``'s gradient methods are.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from ...errors import InputError
from .. import schema
from ..api_errors import ERRORS, ApiError
from ..state import client_of, explorer, pick, run_light
from .self_attention import _checked_ids
from .translate import JOB_NAME

__all__ = ["MIN_THRESHOLD", "FlowRequest", "router"]

router = APIRouter()
#: the lowest threshold the server takes: each target's importances sum to 1, so each keeps ≤ 1/τ edges a layer
MIN_THRESHOLD = 0.01


class FlowRequest(BaseModel):
    text: schema.Text = Field(description="the text whose prediction is viewed, as written")
    model: schema.Text | None = Field(None, description="a loaded decoder-only model's name (default: the first)")
    view: Literal["routes", "logit_lens", "direct_logit"] = Field("routes", description="what to compute")
    position: int | None = Field(
        None, ge=1, description="the position (1-based) whose prediction is viewed (default: the last)"
    )
    threshold: float = Field(
        0.04, ge=MIN_THRESHOLD, le=1.0, description="routes: keep the edges whose importance is at least this"
    )
    top: int = Field(5, ge=1, le=20, description="the logit lens's top tokens per layer")
    job: str | None = Field(None, pattern=JOB_NAME, description="follow the work at /api/progress/{job}")


@router.post("/api/flow", response_model=schema.LMView, responses=ERRORS)
async def flow(req: FlowRequest, request: Request):
    """One prediction of a decoder-only model, seen through its blocks: the routes graph, the logit lens or the
    direct logit attribution (``"view"``)."""
    from ...service import LMViewRequest

    ex = explorer(request)
    name, sa = pick(ex.models.self_attention, req.model, "self-attention")
    if not sa.can_generate:
        raise ApiError(422, f"{name} has no language-model head (an encoder-only model): ask /api/self-attention")
    ids = _checked_ids(ex, name, sa, req.text)
    if len(ids) < 2:
        raise ApiError(422, "the text is one token: a prediction is read from a text of at least two")
    if req.position is not None and req.position > len(ids):
        raise ApiError(422, f"position must be a token of the text, 1..{len(ids)}, got {req.position}")
    count = sa.num_layers * sa.num_heads * len(ids) * len(ids)
    if req.view == "routes" and count > ex.options.max_answer_numbers:
        raise ApiError(
            413,
            f"this text's graph may hold {count} numbers; the limit of one answer is {ex.options.max_answer_numbers} "
            "(--max-answer-numbers): shorten the text",
        )
    extra = {"threshold": req.threshold} if req.view == "routes" else {}
    try:
        job = LMViewRequest(req.text.strip(), view=req.view, position=req.position, top=req.top, **extra)
    except InputError as exc:
        raise ApiError(422, str(exc)) from None
    if req.view != "routes":
        return await run_light(request, _light_view, sa, name, job)
    analysis = await ex.jobs.run(client_of(request), req.job, name, job, request.is_disconnected)
    return analysis.to_dict()


def _light_view(sa, name: str, job) -> dict:
    """:func:`attnkit.service.analyse` of ``job`` on the server's own copy of the model (the fast lane)."""
    from ...service import Model, ModelKind, ModelSpec, analyse

    return analyse(Model(name, ModelKind.SELF_ATTENTION, sa, ModelSpec(name)), job).to_dict()
