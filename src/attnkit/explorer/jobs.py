"""Admission control for heavy jobs: at most ``--workers`` run at once, each in a worker process of a
:class:`pebble.ProcessPool` (which stops one job on timeout or cancel by ending its process, and replaces a
worker that died without harming the others); at most ``--queue`` wait, in order, and more are answered
503 with ``Retry-After``. A job runs at most ``--job-timeout`` seconds (504), and stops when its client goes
(499). Each client sees only its own jobs' progress and queue position: a job is known by the client's
session (a random cookie) and the job name it chose.
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import BrokenExecutor as BrokenProcessPool
from concurrent.futures import CancelledError
from dataclasses import dataclass

from .api_errors import ApiError
from .options import ServeOptions

__all__ = ["JobQueue"]

POLL_S = 0.2  # how often a waiting request checks whether its client has gone


@dataclass
class _Job:
    state: str  # "queued" or "running"
    slot: int = -1
    ticket: asyncio.Future | None = None


class JobQueue:
    """The heavy jobs of one server (see the module docstring). ``specs``: how a worker loads each model."""

    def __init__(self, options: ServeOptions, specs: dict):
        self.options, self.specs = options, specs
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        self._ctx = multiprocessing.get_context(method)
        self._progress = self._ctx.Array("d", options.workers, lock=False)  # one slot per running job
        self._free = list(range(options.workers))
        self._waiting: list[asyncio.Future] = []
        self._jobs: dict[tuple[str, str], _Job] = {}
        self._pool = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the pool
    def start(self):
        """The worker pool, started on first use (or at server start, so idle memory includes the workers)."""
        with self._lock:
            if self._pool is not None and not self._pool.active:  # broken (a worker died between jobs)
                self._pool.stop()  # its workers end; its threads finish on their own
                self._pool = None
            if self._pool is None:
                from pebble import ProcessPool

                from . import worker

                if hasattr(self._ctx, "set_forkserver_preload"):
                    self._ctx.set_forkserver_preload(worker.PRELOAD)
                # each worker's share of the cores ($OMP_NUM_THREADS where set): more threads than cores
                # would spin against each other
                share = max(1, (os.cpu_count() or 1) // self.options.workers)
                threads = int(os.environ.get("OMP_NUM_THREADS", share) or share)
                self._pool = ProcessPool(
                    max_workers=self.options.workers,
                    max_tasks=self.options.worker_tasks,
                    initializer=worker.init,
                    initargs=(self.specs, self._progress, threads, self.options.worker_nice),
                    context=self._ctx,
                )
                atexit.register(self.stop)
            return self._pool

    def stop(self, wait: bool = True) -> None:
        """End the pool's workers (``wait``: until its threads are done, at server shutdown)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()
            if wait:
                pool.join(timeout=10)

    def worker_pids(self) -> list[int]:
        """The worker processes' ids (for tests and the benchmark's memory count)."""
        pool = self._pool
        return (
            [] if pool is None else [w.pid for w in getattr(pool._pool_manager.worker_manager, "workers", {}).values()]
        )

    # ------------------------------------------------------------------ what a client may see
    def status(self, client: str | None, job: str) -> dict:
        """``{"progress": 0..1 or None, "queued": position or None}`` of the caller's own job ``job``."""
        j = self._jobs.get((client, job)) if client else None
        if j is None:
            return {"progress": None, "queued": None}
        if j.state == "queued":
            return {"progress": 0.0, "queued": self._waiting.index(j.ticket) + 1 if j.ticket in self._waiting else None}
        return {"progress": round(float(self._progress[j.slot]), 3), "queued": None}

    # ------------------------------------------------------------------ running one job
    async def run(
        self,
        client: str | None,
        job: str | None,
        kind: str,
        label: str,
        kwargs: dict,
        disconnected: Callable[[], Awaitable[bool]],
    ) -> dict:
        """Run ``worker.run(kind, label, slot, kwargs)`` in a worker once admitted; see the module docstring."""
        key = (client, job) if client and job else None
        rec = _Job("queued")
        if key is not None:
            self._jobs[key] = rec
        try:
            rec.slot = await self._admit(rec, disconnected)
            rec.state = "running"
            try:
                return await self._execute(rec.slot, kind, label, kwargs, disconnected)
            finally:
                self._release(rec.slot)
        finally:
            if key is not None and self._jobs.get(key) is rec:
                del self._jobs[key]

    async def _admit(self, rec: _Job, disconnected) -> int:
        if self._free and not self._waiting:
            return self._free.pop()
        if len(self._waiting) >= self.options.queue:
            raise ApiError(
                503,
                f"the server is busy: {self.options.workers} heavy jobs are running and {len(self._waiting)} "
                "are waiting, the most it queues (--queue); try again shortly",
                headers={"Retry-After": str(max(1, min(60, round(self.options.job_timeout / 10))))},
            )
        rec.ticket = asyncio.get_running_loop().create_future()
        self._waiting.append(rec.ticket)
        try:
            while True:
                done, _ = await asyncio.wait({rec.ticket}, timeout=POLL_S)
                if done:
                    return rec.ticket.result()
                if await disconnected():
                    raise ApiError(499, "the client cancelled the request while it was queued")
        except BaseException:
            if rec.ticket.done() and not rec.ticket.cancelled():  # admitted at the moment it left: pass it on
                self._release(rec.ticket.result())
            raise
        finally:
            if rec.ticket in self._waiting:
                self._waiting.remove(rec.ticket)

    def _release(self, slot: int) -> None:
        """Give ``slot`` to the first waiting job, or back to the free list."""
        while self._waiting:
            ticket = self._waiting.pop(0)
            if not ticket.done():
                ticket.set_result(slot)
                return
        self._free.append(slot)

    async def _execute(self, slot: int, kind: str, label: str, kwargs: dict, disconnected) -> dict:
        from pebble import ProcessExpired

        from . import worker

        self._progress[slot] = 0.0
        args = (kind, label, slot, kwargs)
        try:
            future = self.start().schedule(worker.run, args=args, timeout=self.options.job_timeout)
        except RuntimeError:  # the pool broke just now: a fresh one
            self.stop(wait=False)
            future = self.start().schedule(worker.run, args=args, timeout=self.options.job_timeout)
        waiter = asyncio.wrap_future(future)
        try:
            while True:
                done, _ = await asyncio.wait({waiter}, timeout=POLL_S)
                if done:
                    return waiter.result()
                if await disconnected():
                    future.cancel()  # ends the worker process running it; the pool starts a fresh one
                    raise ApiError(499, "the client cancelled the request; its job was stopped")
        except TimeoutError:
            raise ApiError(
                504,
                f"the job ran past the time limit of {self.options.job_timeout:g} s (--job-timeout) and was stopped",
            ) from None
        except ProcessExpired as exc:
            raise ApiError(
                503,
                f"the worker process running this job stopped (exit code {exc.exitcode}: killed, or out of memory); "
                "the server goes on: try again",
                headers={"Retry-After": "1"},
            ) from None
        except CancelledError:
            raise ApiError(499, "the job was cancelled") from None
        except BrokenProcessPool:
            self.stop(wait=False)  # the next job gets a fresh pool
            raise ApiError(
                503,
                "the worker pool broke (a worker died); the server goes on: try again",
                headers={"Retry-After": "1"},
            ) from None
