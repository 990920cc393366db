"""Admission control for heavy jobs: at most ``--workers`` run at once, each in a worker process of a
:class:`pebble.ProcessPool` (which stops one job on timeout or cancel by ending its process, and replaces a
worker that died without harming the others); at most ``--queue`` wait, in order. A job is refused at once,
503 with ``Retry-After`` and a message, when the queue is full or when its expected wait would exceed
``--job-timeout``: a client should not wait longer for its turn than the job may run.

**Expected wait.** Each kind of job (task, model and method: integrated gradients on the Transformer is one
kind, saliency on it another) has its own expected run time ``t_k``, an exponential moving average of its
recent run times (a job stopped at its limit counts the limit). A kind not yet timed is expected to take half
the time limit (``--job-timeout / 2``): a fresh server does not know whether a method takes one second or
two minutes, so a first burst is admitted only as deep as slow jobs could be served in time, and measured
kinds take over as they finish. A job that arrives with every worker busy expects to wait

    wait = (Σ_running max(0, t_k − elapsed) + Σ_queued-ahead t_k) / workers

The estimate can be wrong (a kind's first jobs, a slow machine), so an admitted job also waits at most
``--job-timeout`` seconds for a worker: one still queued then leaves the queue with 503 and ``Retry-After``.
An admitted job runs at most ``--job-timeout`` seconds (504), and stops when its client goes (499). Each
client sees only its own jobs' progress, queue position and expected wait: a job is known by the client's
session (a random cookie) and the job name it chose.
"""

from __future__ import annotations

import asyncio
import atexit
import math
import multiprocessing
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import BrokenExecutor as BrokenProcessPool
from concurrent.futures import CancelledError
from dataclasses import dataclass

from .api_errors import ApiError
from .options import ServeOptions
from .pebble_internals import worker_pids

__all__ = ["JobQueue", "job_kind"]

POLL_S = 0.2  # how often a waiting request checks whether its client has gone
RECENT_WEIGHT = 0.3  # the weight of the newest job's run time in the moving average


def job_kind(label: str, request) -> str:
    """A job's kind for its expected run time: ``"task model method"`` (``beam`` for a search without a
    method), the task from the request's type: ``translation``, ``captioning`` or ``generation``; ``"lm-view model
    view"`` for a view of one prediction."""
    from ..service import CaptionRequest, GenerationRequest, LMViewRequest, TranslationRequest

    if isinstance(request, LMViewRequest):  # a view of one prediction: its kind is its view
        return " ".join(["lm-view", label, request.view])
    tasks = {TranslationRequest: "translation", CaptionRequest: "captioning", GenerationRequest: "generation"}
    task = tasks.get(type(request))
    if task is None:
        raise TypeError(f"a job runs a service request, got {type(request).__name__}")
    return " ".join([task, label, str(request.method or "beam")])


@dataclass
class _Job:
    state: str  # "queued" or "running"
    kind: str = ""  # what it is, for its expected run time: "task model method"
    slot: int = -1
    ticket: asyncio.Future | None = None
    started: float = 0.0  # time.perf_counter() when it began to run


class JobQueue:
    """The heavy jobs of one server (see the module docstring). ``specs``: how a worker loads each model."""

    def __init__(self, options: ServeOptions, specs: dict):
        self.options, self.specs = options, specs
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        self._ctx = multiprocessing.get_context(method)
        self._progress = self._ctx.Array("d", options.workers, lock=False)  # one slot per running job
        self._free = list(range(options.workers))
        self._waiting: list[_Job] = []  # in order
        self._running: dict[int, _Job] = {}  # by slot
        self._jobs: dict[tuple[str, str], _Job] = {}
        self._pool = None
        self._lock = threading.Lock()
        self.recent: dict[str, float] = {}  # each kind's recent mean run time (module docstring)

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
                o = self.options
                self._pool = ProcessPool(
                    max_workers=o.workers,
                    max_tasks=o.worker_tasks,
                    initializer=worker.init,
                    initargs=(self.specs, self._progress, o.worker_threads, o.worker_nice),
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
        return [] if pool is None else worker_pids(pool)

    # ------------------------------------------------------------------ what a client may see
    def status(self, client: str | None, job: str) -> dict:
        """``{"progress": 0..1 or None, "queued": position or None, "wait_s": expected seconds before it runs
        or None}`` of the caller's own job ``job``."""
        j = self._jobs.get((client, job)) if client else None
        if j is None:
            return {"progress": None, "queued": None, "wait_s": None}
        if j.state == "queued":
            if j not in self._waiting:
                return {"progress": 0.0, "queued": None, "wait_s": None}
            place = self._waiting.index(j)
            return {"progress": 0.0, "queued": place + 1, "wait_s": round(self.expected_wait(place), 1)}
        return {"progress": round(float(self._progress[j.slot]), 3), "queued": None, "wait_s": None}

    def expected_s(self, kind: str) -> float:
        """A job of ``kind``'s expected run time: its recent mean, or half the time limit before one has ended."""
        return self.recent.get(kind, self.options.job_timeout / 2)

    def expected_wait(self, ahead: int) -> float:
        """Seconds a job with ``ahead`` jobs before it in the queue may expect to wait for a worker (every worker
        busy): what the running jobs have left and the first ``ahead`` queued jobs take, over the workers."""
        now = time.perf_counter()
        left = sum(max(0.0, self.expected_s(j.kind) - (now - j.started)) for j in self._running.values())
        queued = sum(self.expected_s(j.kind) for j in self._waiting[:ahead])
        return (left + queued) / self.options.workers

    def _record(self, kind: str, seconds: float) -> None:
        r = self.recent.get(kind)
        self.recent[kind] = seconds if r is None else (1 - RECENT_WEIGHT) * r + RECENT_WEIGHT * seconds

    # ------------------------------------------------------------------ running one job
    async def run(
        self,
        client: str | None,
        job: str | None,
        label: str,
        request,
        disconnected: Callable[[], Awaitable[bool]],
        spec=None,
        stream: str | None = None,
    ):
        """Run ``worker.run(label, slot, request, spec)`` in a worker once admitted and return what it returns
        (an :class:`~attnkit.service.Analysis` for a translation or caption request); see the module
        docstring. ``request``: a typed record of :mod:`attnkit.service.requests`, whose type and method name
        the job's kind (:func:`job_kind`). ``spec``: the :class:`~attnkit.service.ModelSpec` of the
        model the request picked (a followed training run's names its checkpoint, so the worker loads the one
        the server shows; default: ``specs[label]``). ``stream``: a file the worker appends the answer's parts to as
        JSON lines while it runs (:mod:`.worker`). A caller that is cancelled (a streamed answer whose client
        went) stops the job as a client that goes does."""
        key = (client, job) if client and job else None
        rec = _Job("queued", kind=job_kind(label, request))
        if key is not None:
            self._jobs[key] = rec
        try:
            rec.slot = await self._admit(rec, disconnected)
            rec.state, rec.started = "running", time.perf_counter()
            self._running[rec.slot] = rec
            try:
                spec = spec if spec is not None else self.specs.get(label)
                more = {} if stream is None else {"stream": stream}
                answer = await self._execute(rec.slot, label, request, disconnected, spec=spec, **more)
            except ApiError as err:
                if err.status == 504:  # stopped at its limit: counts the limit
                    self._record(rec.kind, self.options.job_timeout)
                raise
            else:
                self._record(rec.kind, time.perf_counter() - rec.started)
                return answer
            finally:
                del self._running[rec.slot]
                self._release(rec.slot)
        finally:
            if key is not None and self._jobs.get(key) is rec:
                del self._jobs[key]

    def _busy(self, why: str, wait: float | None) -> ApiError:
        """The 503 refusal: ``Retry-After`` is the time until the queue is short enough again (at least until
        the first running job is expected to end), 1..300 s."""
        o = self.options
        now = time.perf_counter()
        step = min(  # until the first running job is expected to end
            (max(0.0, self.expected_s(j.kind) - (now - j.started)) for j in self._running.values()),
            default=o.job_timeout / 10,
        )
        retry = max(1, min(300, math.ceil(max(step, (wait or 0) - o.job_timeout))))
        return ApiError(
            503,
            f"the server is busy: {o.workers} heavy job(s) are running and {len(self._waiting)} waiting; {why}; "
            f"try again in {retry} s (plain translations do not wait for workers: they are served meanwhile)",
            headers={"Retry-After": str(retry)},
        )

    async def _admit(self, rec: _Job, disconnected) -> int:
        if self._free and not self._waiting:
            return self._free.pop()
        o = self.options
        if len(self._waiting) >= o.queue:
            raise self._busy(f"that is the most it queues (--queue {o.queue})", None)
        wait = self.expected_wait(len(self._waiting))
        if wait > o.job_timeout:
            raise self._busy(
                f"the jobs running and queued are expected to take about {wait:.0f} s before a worker is free, "
                f"more than a job may run (--job-timeout {o.job_timeout:g} s)",
                wait,
            )
        rec.ticket = asyncio.get_running_loop().create_future()
        self._waiting.append(rec)
        deadline = time.perf_counter() + o.job_timeout  # an estimate admitted it; this bounds the real wait
        try:
            while True:
                done, _ = await asyncio.wait({rec.ticket}, timeout=POLL_S)
                if done:
                    return rec.ticket.result()
                if await disconnected():
                    raise ApiError(499, "the client cancelled the request while it was queued")
                if time.perf_counter() > deadline:
                    self._waiting.remove(rec)  # out of the queue before the refusal counts what is ahead
                    raise self._busy(
                        f"this job waited {o.job_timeout:g} s for a worker (--job-timeout) without one coming free",
                        None,
                    )
        except BaseException:
            if rec.ticket.done() and not rec.ticket.cancelled():  # admitted at the moment it left: pass it on
                self._release(rec.ticket.result())
            raise
        finally:
            if rec in self._waiting:
                self._waiting.remove(rec)

    def _release(self, slot: int) -> None:
        """Give ``slot`` to the first waiting job, or back to the free list."""
        while self._waiting:
            ticket = self._waiting.pop(0).ticket
            if not ticket.done():
                ticket.set_result(slot)
                return
        self._free.append(slot)

    async def _execute(self, slot: int, label: str, request, disconnected, spec=None, stream=None):
        from pebble import ProcessExpired

        from . import worker

        self._progress[slot] = 0.0
        args = (label, slot, request, spec) if stream is None else (label, slot, request, spec, stream)
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
        except asyncio.CancelledError:  # the awaiting request itself was cancelled: the job goes with it
            future.cancel()
            raise
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
