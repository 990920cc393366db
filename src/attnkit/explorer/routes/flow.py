"""``POST /api/flow``: a view of one prediction of a decoder-only model reading a text as given, JSON in and
out like every route: the information-flow routes (Ferrando & Voita 2024) with the logit lens at each of the
graph's positions and each head edge's attention rows (``"view": "routes"``, the page's graph view), the logit
lens (``"logit_lens"``) or the direct logit attribution (``"direct_logit"``), as
:class:`attnkit.service.LMViewRequest` and :func:`attnkit.explorer.lm_view_answer.lm_view_answer` (the CLI's
``--json``).

Every bound is checked before a tensor is built: the text's characters and tokens (as ``/api/self-attention``),
the position, the threshold (at least :data:`MIN_THRESHOLD`: each target then keeps at most
``1 / MIN_THRESHOLD`` edges per layer) and the numbers the answer may hold (``--max-answer-numbers``, counted
as every layer's and head's attention row at every position: the most the graph can ask for). The logit lens
and the direct logit attribution are one traced forward pass, run in the fast lane as attention is; the routes
(a traced pass, one for the graph positions' logit lens and one for the edges' attention rows, and every head's
edge importances) are a heavy job (:mod:`attnkit.explorer.jobs`: a worker process, the queue,
``--job-timeout``), as ``/api/generate``'s gradient methods are.

``POST /api/flow/stream`` (the routes view only, the same request and bounds) answers the same graph as
``application/x-ndjson``, one JSON object a line, as the worker builds it top-down: ``{"event": "start", ...}``
(the model, the text's pieces, the position, the threshold, the model's layers and heads) at once, then one
``{"event": "layer", "layer", "edges", "mlp_nodes"}`` per layer as it is finished (the last layer first), and
``{"event": "done", ...}``: ``/api/flow``'s answer without the graph's edges and MLP nodes (the logit lens at the
graph's positions, the attention rows). The layers' edges and nodes, in the order they came, are ``/api/flow``'s
``graph.edges`` and ``graph.mlp_nodes``. A request refused before the job starts (a bad field, a text over the
bounds) gets its status as ``/api/flow`` does; a job that fails once the answer has begun (busy, over
``--job-timeout``, a worker lost) ends it with ``{"event": "error", "status", "error"}``. A client that goes
away stops the job.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import AsyncIterator
from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from ...errors import InputError
from ...service.requests import LM_VIEW_KINDS
from .. import schema
from ..api_errors import ERRORS, ApiError
from ..jobs import POLL_S
from ..lm_view_answer import lm_view_answer
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
    view: Literal[LM_VIEW_KINDS] = Field("routes", description="what to compute")
    position: int | None = Field(
        None, ge=1, description="the position (1-based) whose prediction is viewed (default: the last)"
    )
    threshold: float = Field(
        0.04, ge=MIN_THRESHOLD, le=1.0, description="routes: keep the edges whose importance is at least this"
    )
    top: int = Field(5, ge=1, le=20, description="the logit lens's top tokens per layer")
    job: str | None = Field(None, pattern=JOB_NAME, description="follow the work at /api/progress/{job}")


def _checked(req: FlowRequest, request: Request):
    """``(name, model, ids, job)``: the request's model, token ids and typed job, every bound checked (the module
    docstring), or the :class:`ApiError` that refuses it."""
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
    return name, sa, ids, job


@router.post("/api/flow", response_model=schema.LMView, responses=ERRORS)
async def flow(req: FlowRequest, request: Request):
    """One prediction of a decoder-only model, seen through its blocks: the routes graph, the logit lens or the
    direct logit attribution (``"view"``)."""
    name, sa, _, job = _checked(req, request)
    if req.view != "routes":
        return await run_light(request, _light_view, sa, name, job)
    ex = explorer(request)
    analysis = await ex.jobs.run(client_of(request), req.job, name, job, request.is_disconnected)
    return lm_view_answer(analysis)


@router.post(
    "/api/flow/stream",
    responses={**ERRORS, 200: {"content": {"application/x-ndjson": {}}, "description": "one JSON object a line"}},
)
async def flow_stream(req: FlowRequest, request: Request):
    """The routes graph of one prediction, streamed layer by layer as it is built (the module docstring)."""
    if req.view != "routes":
        raise ApiError(422, f"only the routes view is streamed; ask /api/flow for {req.view}")
    name, sa, ids, job = _checked(req, request)
    start = {
        "event": "start",
        "model": name,
        "view": "routes",
        "pieces": sa.pieces_of(ids),
        "position": req.position or len(ids),
        "threshold": req.threshold,
        "layers": int(sa.num_layers),
        "heads": int(sa.num_heads),
    }
    return StreamingResponse(_streamed(request, name, job, start, req.job), media_type="application/x-ndjson")


def _line(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8", "backslashreplace") + b"\n"


async def _streamed(request: Request, name: str, job, start: dict, follow: str | None) -> AsyncIterator[bytes]:
    """The lines of ``/api/flow/stream``: ``start``, each layer as the worker appends it to a file made for this
    job (read back line by line as it grows), then ``done`` or ``error``; ``follow``: the job's name for
    ``/api/progress/{job}``, if the client gave one; the file goes with the answer, and a
    cancelled answer (its client gone) stops the job."""
    ex = explorer(request)
    yield _line(start)
    fd, path = tempfile.mkstemp(prefix="attnkit-flow-", suffix=".ndjson")
    os.close(fd)
    task = asyncio.ensure_future(
        ex.jobs.run(client_of(request), follow, name, job, request.is_disconnected, stream=path)
    )
    try:
        with open(path, "rb") as parts:
            pending = b""
            while True:
                done, _ = await asyncio.wait({task}, timeout=POLL_S)
                pending += parts.read()
                *lines, pending = pending.split(b"\n")  # a line is whole once its newline is written
                for line in lines:
                    if line:
                        yield line + b"\n"
                if done:
                    break
        try:
            analysis = task.result()
        except ApiError as err:
            yield _line({"event": "error", "status": err.status, "error": str(err)})
            return
        except Exception as exc:  # what /api/flow answers with its status (a model the replay refuses: 400)
            yield _line({"event": "error", "status": getattr(exc, "status", 500), "error": _said(exc)})
            return
        answer = lm_view_answer(analysis).model_dump(mode="json")  # as /api/flow answers
        answer["graph"].pop("edges")
        answer["graph"].pop("mlp_nodes")
        yield _line({"event": "done", **answer})
    finally:
        if not task.done():
            task.cancel()  # the client went: the job stops with it
        os.unlink(path)


def _said(exc: Exception) -> str:
    from ...errors import AttnkitError

    if isinstance(exc, AttnkitError):
        return str(exc)
    return f"internal error ({type(exc).__name__}); the server keeps running"


def _light_view(sa, name: str, job) -> schema.LMView:
    """:func:`attnkit.service.analyse` of ``job`` on the server's own copy of the model (the fast lane)."""
    from ...service import analyse, text_model

    return lm_view_answer(analyse(text_model(name, sa), job))
