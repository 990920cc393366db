"""What every route of one server shares: the models, the options, the job queue, the held-out data, and
who the caller is (:func:`client_of`)."""

from __future__ import annotations

import asyncio
import functools
import threading
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
from fastapi import Request

from .api_errors import ApiError
from .jobs import JobQueue
from .loading import LoadedModels
from .options import ServeOptions

__all__ = ["Explorer", "client_of", "explorer", "pick", "run_light", "session_cookie"]


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


async def run_light(request: Request, fn, /, *args, **kwargs):
    """Run a light job ``fn`` in a thread, at most ``--light-jobs`` at once (more wait their turn: dozens of
    threads fighting over the GIL and the cores would only hold more memory); if the client goes meanwhile,
    answer 499 at once (the thread finishes its bounded work and its answer is dropped)."""
    ex = explorer(request)
    key = ("light", id(asyncio.get_running_loop()))  # a limiter belongs to one event loop
    if key not in ex.cache:
        ex.cache[key] = anyio.CapacityLimiter(ex.options.light_jobs)
    call = functools.partial(fn, *args, **kwargs)
    task = asyncio.ensure_future(anyio.to_thread.run_sync(call, limiter=ex.cache[key]))
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.2)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # its error, if any, is not news
            raise ApiError(499, "the client cancelled the request")
