"""What every route of one server shares: the models, the options, the fast lane and the job queue, the
held-out data, and who the caller is (:func:`client_of`)."""

from __future__ import annotations

import asyncio
import math
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from ..service import ModelSpec
from .api_errors import ApiError
from .follow import Follower
from .jobs import JobQueue
from .lane import FastLane
from .loading import LoadedModels
from .options import ServeOptions

__all__ = [
    "Explorer",
    "client_of",
    "explorer",
    "pick",
    "run_light",
    "run_translation",
    "served",
    "served_model",
    "session_cookie",
]


@dataclass
class Explorer:
    models: LoadedModels
    options: ServeOptions
    jobs: JobQueue
    token: str | None = None
    home: str | None = None
    given_verses: list[dict] | None = None
    cache: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    lane: FastLane | None = None  # default: one of --fast-batch and --fast-lanes
    follower: Follower | None = None  # default: one of --follow-every

    def __post_init__(self) -> None:
        if self.lane is None:
            self.lane = FastLane(self.options.fast_batch, self.options.fast_lanes)
        if self.follower is None:
            self.follower = Follower(self.models, self.options.follow_every)


def explorer(request: Request) -> Explorer:
    return request.app.state.explorer


def session_cookie(port: int) -> str:
    """The cookie naming a browser's session (random, set by the page), to which its jobs belong."""
    return f"attnkit-session-{port}"


def client_of(request: Request) -> str | None:
    """The caller's session (its cookie), or None: a caller without one cannot follow its jobs."""
    return request.cookies.get(session_cookie(explorer(request).options.port)) or None


def pick(models: dict, name: str | None, task: str):
    """``(name, model)`` of the asked-for model (default: the first), or a 404 naming the loaded ones."""
    if not models:
        raise ApiError(404, f"no {task} model is loaded")
    if name is None:
        return next(iter(models.items()))
    if name not in models:
        raise ApiError(404, f"unknown {task} model {name!r}; loaded: {', '.join(models)}")
    return name, models[name]


async def served_model(
    request: Request, models: dict, name: str | None, task: str
) -> tuple[str, Any, ModelSpec | None]:
    """``(name, model, spec)`` of the asked-for model as :func:`pick` finds it, read together (a followed
    training run's model, spec and checkpoint change together, :mod:`.follow`); a followed run due for a look
    first moves on to its newest complete checkpoint, loaded in a thread (the event loop serves on)."""
    ex = explorer(request)
    label = pick(models, name, task)[0]
    if ex.follower.due(label):
        await run_in_threadpool(ex.follower.refresh, label)
    with ex.follower.lock:
        label, model = pick(models, label, task)
        return label, model, ex.models.specs.get(label)


def served(label: str, kind, model, spec: ModelSpec | None):
    """``model`` as a :class:`attnkit.service.Model` (itself when it is one), named ``label``, with the spec
    the server loaded it by (a training run's names the checkpoint shown)."""
    from ..service import Model

    if isinstance(model, Model):
        return model
    return Model(label, kind, model, spec if spec is not None else ModelSpec(label))


async def run_light(request: Request, fn, /, *args, **kwargs):
    """Run a light job ``fn(*args, **kwargs)`` in the fast lane (:mod:`.lane`: threads of the server, in
    arrival order, never behind the heavy jobs); if the client goes meanwhile, answer 499 at once (a call
    still waiting is dropped; a running one finishes its bounded work and its answer is dropped)."""
    return await _wait(request, _admitted(request).submit(fn, *args, **kwargs))


async def run_translation(request: Request, fn, translator, source: str, beam: int, **kwargs):
    """:func:`run_light` for a plain translation, which may be searched in one batch with others waiting for
    the same model and beam (:meth:`FastLane.submit_translation`)."""
    return await _wait(request, _admitted(request).submit_translation(fn, translator, source, beam, **kwargs))


def _admitted(request: Request) -> FastLane:
    """The fast lane, or a 503 with ``Retry-After`` at once when a request would wait in it longer than
    ``--fast-wait``."""
    ex = explorer(request)
    limit, wait = ex.options.fast_wait, ex.lane.expected_wait()
    if limit > 0 and wait is not None and wait > limit:
        retry = max(1, min(60, math.ceil(wait - limit)))
        raise ApiError(
            503,
            f"the server is busy: {ex.lane.waiting()} light requests are waiting, so this one would wait about "
            f"{wait:.0f} s, more than --fast-wait {limit:g} s; try again in {retry} s",
            headers={"Retry-After": str(retry)},
        )
    return ex.lane


async def _wait(request: Request, future: Future):
    waiter = asyncio.wrap_future(future)
    while True:
        done, _ = await asyncio.wait({waiter}, timeout=0.2)
        if done:
            return waiter.result()
        if await request.is_disconnected():
            future.cancel()  # still waiting: it never runs
            waiter.add_done_callback(lambda t: t.cancelled() or t.exception())  # its error, if any, is not news
            raise ApiError(499, "the client cancelled the request")
