"""The fast lane of ``attnkit serve``: light requests (plain translations and captions, within the caps) run
in threads of the server process (``--fast-lanes``), in arrival order, and never share the heavy jobs' queue,
which waits for the worker processes (:mod:`.jobs`; they run at a lower priority, so the lane's threads get the
cores when both want them).

**Threads.** Each of the lane's threads takes the oldest waiting request (and its batch) when it is free, so two
threads search two batches at once. torch releases Python's GIL inside its operators, and a beam search over a
batch is mostly operators; on two cores two threads answer a burst of translations faster than one (measured
in benchmarks/RESULTS.md, section "`attnkit serve` with two fast-lane threads"; the Python between the operators
is what they share). More threads than cores gain nothing.

**Dynamic batching** (as model servers such as TorchServe and Triton do it): plain translations that wait
together for the same model and beam are searched as one batch, ``translator.translate([s1, ..., sB])``, one
beam search over B sources. The search is most of a plain translation's time, and on a CPU one search over 8
small sources costs far less than 8 searches (per-operation overhead dominates small models). The forced
decoding that draws the maps is one padded pass over the batch's translations too
(``Translator.attention_batch``). Each answer is then built alone from its own search result and forced
decoding (``analyse(model, request, search=..., forced=...)``, then the answer: maps and links), so it is the
answer the request would have had alone. The oldest waiting request always goes
first; waiting translations of its model and beam join its batch (at most ``--fast-batch``).

The lane's queue is bounded in time: :meth:`FastLane.expected_wait` is the requests waiting times their recent
mean time (a moving average of each batch's time over its size), over the threads, and the server refuses a light request
that would wait longer than ``--fast-wait`` (503 with ``Retry-After``) rather than let the wait grow without
bound under more load than the lane can serve.

The models are shared with no lock: inference mutates nothing shared (``torch.no_grad``, eval mode, every
request's decoder state its own).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..checks import POSITIVE_INT, check

__all__ = ["FastLane"]

RECENT_WEIGHT = 0.2  # the weight of the newest batch's time per request in the moving average


@dataclass
class _Item:
    fn: Callable
    args: tuple
    kwargs: dict
    batch: tuple | None  # (translator, beam, source) for a plain translation that may join a batch
    future: Future = field(default_factory=Future)


class FastLane:
    """``threads`` worker threads running submitted calls in order, batching plain translations (module
    docstring)."""

    def __init__(self, max_batch: int = 8, threads: int = 1):
        check("threads", threads, POSITIVE_INT)
        self.max_batch = max_batch
        self.threads = threads
        self._items: collections.deque[_Item] = collections.deque()
        self._cv = threading.Condition()
        self._pool: list[threading.Thread] = []
        self._stop: threading.Event | None = None  # the running threads' own stop signal
        self.batches: collections.Counter[int] = collections.Counter()  # batch size -> how many (for tests)
        self.recent_s: float | None = None  # the recent requests' mean time in the lane (None: none yet)

    def submit(self, fn: Callable, /, *args, **kwargs) -> Future:
        """Run ``fn(*args, **kwargs)`` in the lane; its answer (or error) comes in the returned future,
        which may be cancelled while it waits."""
        return self._put(_Item(fn, args, kwargs, None))

    def submit_translation(self, fn: Callable, translator, source: str, beam: int, **kwargs) -> Future:
        """``fn(translator, source, beam=beam, result=..., forced=..., **kwargs)`` (an answer's maker, such as
        :func:`attnkit.explorer.payload.translation_payload`), its ``result`` the search's output for ``source``
        and ``forced`` its forced decoding, made in one batch with the waiting translations of the same model
        and beam (neither is passed when it ran alone)."""
        return self._put(_Item(fn, (translator, source), {"beam": beam, **kwargs}, (translator, beam, source)))

    def _put(self, item: _Item) -> Future:
        with self._cv:
            if not self._pool:  # started on first use (again after a stop)
                self._stop = threading.Event()
                self._pool = [
                    threading.Thread(target=self._loop, args=(self._stop,), name=f"attnkit-fast-lane-{i}", daemon=True)
                    for i in range(self.threads)
                ]
                for thread in self._pool:
                    thread.start()
            self._items.append(item)
            self._cv.notify()
        return item.future

    def waiting(self) -> int:
        """Requests waiting for the lane (not counting those running)."""
        return len(self._items)

    def expected_wait(self) -> float | None:
        """Seconds a request submitted now may expect to wait before its turn: the requests waiting, and one
        running, times the recent mean time of a request (as one thread measures it), over the threads; None
        before any has been timed."""
        if self.recent_s is None:
            return None
        return (len(self._items) + 1) * self.recent_s / self.threads

    def _record(self, seconds: float, n: int) -> None:
        with self._cv:
            each, r = seconds / n, self.recent_s
            self.recent_s = each if r is None else (1 - RECENT_WEIGHT) * r + RECENT_WEIGHT * each

    def stop(self, timeout: float = 30.0) -> None:
        """End the threads after their current calls (at server shutdown); waiting calls are cancelled. Waits
        up to ``timeout`` seconds in all for the threads to end, so that a process exiting next does not tear
        torch down under a thread still inside it. A later call starts fresh threads."""
        with self._cv:
            if self._stop is not None:
                self._stop.set()
            pool, self._pool, self._stop = self._pool, [], None
            for item in self._items:
                item.future.cancel()
            self._items.clear()
            self._cv.notify_all()
        deadline = time.monotonic() + timeout
        for thread in pool:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ the thread
    def _next(self, stop: threading.Event) -> list[_Item] | None:
        """The oldest waiting request and, for a plain translation, the waiting ones that join its batch."""
        with self._cv:
            while not self._items and not stop.is_set():
                self._cv.wait()
            if stop.is_set():
                return None
            head = self._items.popleft()
            group = [head]
            if head.batch is not None and self.max_batch > 1:
                tr, beam = head.batch[:2]
                for item in list(self._items):
                    if len(group) >= self.max_batch:
                        break
                    if item.batch is not None and item.batch[0] is tr and item.batch[1] == beam:
                        self._items.remove(item)
                        group.append(item)
            return group

    def _loop(self, stop: threading.Event) -> None:
        while (group := self._next(stop)) is not None:
            live = [item for item in group if item.future.set_running_or_notify_cancel()]  # cancelled: dropped
            if not live:
                continue
            started = time.perf_counter()
            if live[0].batch is None:
                outcomes = [self._call(live[0], {})]
            else:
                extras: list[dict] = [{} for _ in live]
                if len(live) > 1:
                    extras = self._search_batch(live)
                with self._cv:
                    self.batches[len(live)] += 1
                outcomes = [self._call(item, extra) for item, extra in zip(live, extras)]
            # timed before any answer goes out, so a caller that has its answer finds its time counted
            self._record(time.perf_counter() - started, len(live))
            for item, (ok, value) in zip(live, outcomes):
                if ok:
                    item.future.set_result(value)
                else:  # the request's own error, raised where it waits
                    item.future.set_exception(value)

    @staticmethod
    def _search_batch(live: list[_Item]) -> list[dict]:
        """Each request's ``{"result": its search's output, "forced": its forced decoding}``, from one beam
        search over the batch and one teacher-forced pass over the translations; on an error, ``{}`` for each
        (each request then translates alone and gets its own error)."""
        tr, beam = live[0].batch[:2]
        sources = [item.batch[2] for item in live]
        by_ids = callable(getattr(tr, "translate_ids", None)) and callable(getattr(tr, "attention_ids", None))
        try:
            if by_ids:  # each source tokenised once, for the search and the forced pass
                ids = tr.encode_sources(sources)
                results = tr.translate_ids(ids, beam_size=beam)
                for r, s in zip(results, sources):
                    r.source = s
            else:
                results = tr.translate(sources, beam_size=beam)
        except Exception:
            return [{} for _ in live]
        extras = [{"result": r} for r in results]
        nonempty = [i for i, r in enumerate(results) if r["tokens"]]  # an empty translation has nothing to draw
        batch_forced = getattr(tr, "attention_batch", None)  # engines without one draw each pair alone
        if batch_forced is not None and nonempty:
            try:
                targets = [results[i]["tokens"] for i in nonempty]
                if by_ids:
                    forced = tr.attention_ids([ids[i] for i in nonempty], targets)
                else:
                    forced = batch_forced([sources[i] for i in nonempty], targets)
            except Exception:
                forced = [None] * len(nonempty)
            for i, f in zip(nonempty, forced):
                extras[i]["forced"] = f
        return extras

    @staticmethod
    def _call(item: _Item, extra: dict) -> tuple[bool, Any]:
        """``(True, result)`` of the item's call, or ``(False, exception)``."""
        try:
            return True, item.fn(*item.args, **item.kwargs, **extra)
        except Exception as exc:
            return False, exc
