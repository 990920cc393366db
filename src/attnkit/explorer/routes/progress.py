"""``/api/progress/{job}``: how far the caller's own heavy job has got, or where it waits in the queue."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..state import client_of, explorer

__all__ = ["router"]

router = APIRouter()


@router.get("/api/progress/{job}")
def progress(job: str, request: Request) -> dict:
    """``{"job", "progress": 0..1 or null, "queued": position or null, "wait_s": expected seconds or null}``
    of the job this client (its session cookie) started with ``"job": job``; null for another client's job,
    one not started, or one finished."""
    return {"job": job, **explorer(request).jobs.status(client_of(request), job)}
