"""Fewer CPU threads while another job shares the cores, the chosen number back when they are free.

Why: torch's CPU kernels run on an OpenMP team whose threads meet at a barrier after each parallel
region. When another process holds some of the cores, one of the team's threads is often off its core
at that barrier and every other thread waits for it (or spins, which makes it worse for both jobs: two
2-thread trainings on a 2-core machine ran many times slower a step than one alone; benchmarks/RESULTS.md,
"A time budget under load"). A team no larger than the cores the process actually gets loses no time at
barriers.

:class:`ThreadGovernor` watches the cores the process got over its recent training steps,

    cores = CPU seconds of the process / wall seconds  (over a window of steps; the steps only),

and when ``cores < share * threads`` it lowers torch's threads to the cores it gets (at least 1).
While lowered, it tries the chosen number again when the machine's idle cores (``/proc/stat``) show the
other job gone, and now and then besides (``probe_every_s``, doubling after each try that loses, up to
``max_probe_every_s``); it keeps the chosen number when a step is faster with it: a job that shared the
machine for a while gets it back when the other job ends. On a quiet machine it changes
nothing (a step's cores stay near ``threads``), and it never uses more threads than the run asked for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["ThreadGovernor"]


@dataclass
class _Window:
    """Wall and CPU seconds of consecutive steps at one thread count."""

    steps: int = 0
    wall: float = 0.0
    cpu: float = 0.0

    def add(self, wall: float, cpu: float) -> None:
        self.steps += 1
        self.wall += wall
        self.cpu += cpu

    def full(self, min_steps: int, min_s: float) -> bool:
        """Enough to judge: ``min_steps`` steps over ``min_s`` seconds, or any steps over ``2 * min_s``
        (steps of many seconds each, as when the team waits on a core it does not get)."""
        return self.wall >= min_s and (self.steps >= min_steps or self.wall >= 2 * min_s)

    @property
    def cores(self) -> float:
        return self.cpu / max(self.wall, 1e-9)

    @property
    def seconds_per_step(self) -> float:
        return self.wall / max(self.steps, 1)


@dataclass
class ThreadGovernor:
    """Chooses torch's CPU thread count, step by step, from the cores the process gets (module docstring).

    Call :meth:`step` after each training step with its wall and CPU seconds (``time.perf_counter``
    and ``time.process_time`` differences); it returns the new thread count when it changes one (and
    has set it), else ``None``. ``set_threads`` is torch's by default (a test passes its own).
    """

    threads: int  # the run's chosen count: the most the governor uses
    share: float = 0.7  # lower the threads when a window's cores fall below this share of them
    window_s: float = 6.0  # judge the cores over at least this many seconds of steps ...
    min_steps: int = 4  # ... and at least this many steps
    probe_every_s: float = 45.0  # while lowered, try the chosen count again after this long
    max_probe_every_s: float = 360.0
    faster: float = 0.92  # a probe wins when its seconds a step are below this share of the lowered ones
    skip: int = 1  # steps not judged at the start (the first builds caches on one thread)
    clock: Callable[[], float] = time.perf_counter
    idle_cores: Callable[[], float | None] = field(default_factory=lambda: _IdleCores())
    set_threads: Callable[[int], None] = torch.set_num_threads
    current: int = field(init=False)
    changes: list[dict] = field(init=False, default_factory=list)  # (time, from, to, why): the run log's events

    def __post_init__(self) -> None:
        if not isinstance(self.threads, int) or self.threads < 1:
            raise ValueError(f"ThreadGovernor: threads must be a positive integer, got {self.threads!r}")
        if not 0.0 < self.share <= 1.0:
            raise ValueError(f"ThreadGovernor: share must be in (0, 1], got {self.share!r}")
        self.current = self.threads
        self._window = _Window()
        self._lowered: _Window | None = None  # the last full window at the lowered count, to beat
        self._probing = False
        self._every = self.probe_every_s
        self._next_probe: float | None = None
        self._lowered_to = self.threads  # the count the last lowering chose
        self._trust_idle = True  # until a probe that idle cores started loses
        self._probe_on_idle = False
        self._won_at: float | None = None  # the cores of the last probe that won

    def step(self, wall_s: float, cpu_s: float) -> int | None:
        """Record one step (its wall and CPU seconds); the new thread count when this step changes it."""
        if self.threads == 1:
            return None
        if self.skip > 0:
            self.skip -= 1
            return None
        self._window.add(wall_s, cpu_s)
        if self._probing:  # the chosen count again: keep it if a step is faster than at the lowered count
            if not self._window.full(self.min_steps, self.window_s / 2):
                return None
            probe, self._window, self._probing = self._window, _Window(), False
            lowered = self._lowered
            if lowered is not None and probe.seconds_per_step < self.faster * lowered.seconds_per_step:
                self._every = self.probe_every_s
                self._lowered = None
                self._won_at = probe.cores  # these cores at the chosen count beat the lowered count
                return None  # already at self.threads: the cores are free again
            if self._probe_on_idle:  # idle cores that were not ours to use (a container sees the host's)
                self._trust_idle = False
            self._every = min(2 * self._every, self.max_probe_every_s)
            self._next_probe = self.clock() + self._every
            return self._set(self._lowered_to, "probe lost", probe)
        if not self._window.full(self.min_steps, self.window_s):
            return None
        window, self._window = self._window, _Window()
        idle = self.idle_cores()  # the machine's cores idle over this window (None: not known here)
        if self.current < self.threads:  # lowered: remember its speed, and try the chosen count again in time
            self._lowered = window
            freed = self._trust_idle and idle is not None and idle >= self.threads - self.current - 0.25
            if freed or (self._next_probe is not None and self.clock() >= self._next_probe):
                self._probing, self._probe_on_idle = True, freed
                return self._set(self.threads, "probe", window)
            return None
        limit = self.share * self.current  # fewer cores than this: lower the threads
        if self._won_at is not None:  # ... unless the chosen count was measured faster with about these
            limit = min(limit, 0.8 * self._won_at)
        if window.cores < limit:
            to = max(1, min(self.current - 1, int(window.cores + 0.25)))
            self._next_probe = self.clock() + self._every
            self._lowered_to, self._won_at = to, None
            return self._set(to, "shared cores", window)
        return None

    def _set(self, n: int, why: str, window: _Window) -> int:
        self.changes.append(
            {
                "time": self.clock(),
                "from": self.current,
                "to": n,
                "why": why,
                "cores": round(window.cores, 3),
                "seconds_per_step": round(window.seconds_per_step, 4),
            }
        )
        self.current = n
        self.set_threads(n)
        return n


class _IdleCores:
    """The machine's idle cores since the last call, from ``/proc/stat`` (idle and iowait time over wall
    time); ``None`` where there is no ``/proc/stat`` or on the first call."""

    def __init__(self) -> None:
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: tuple[float, float] | None = None

    def __call__(self) -> float | None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = f.readline().split()
            idle = (int(fields[4]) + int(fields[5])) / self._tick
        except (OSError, ValueError, IndexError):
            return None
        now = time.monotonic()
        last, self._last = self._last, (now, idle)
        if last is None or now - last[0] <= 0:
            return None
        return (idle - last[1]) / (now - last[0])
