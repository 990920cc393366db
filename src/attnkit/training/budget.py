"""Learning-rate schedules fitted to a training budget (Li et al. 2020, "Budgeted Training").

A run given a budget (seconds, steps or epochs) learns most when its learning rate reaches zero
exactly when the budget runs out: a short linear warm-up to the peak, then a linear decay to zero
at the last step. A recipe's schedule cut off in the middle (a Transformer still warming up after
560 of its 2,000 warm-up steps) wastes the budget.

:class:`BudgetSchedule` is a ``LambdaLR`` multiplier that starts as the model's recipe (``base``) and,
once the trainer knows how many steps ``T`` the budget allows (at once for a step or epoch budget,
from the first steps' speed for a time budget), is *fitted*: piecewise-linear through knots ::

    fresh start:  (-1, 0) -> (W - 1, peak) -> (T, 0)     f(k) = peak (k + 1) / W while warming up
    later:        (s, f(s)) [-> (warm-up end, peak)] -> (T, 0);   f(k) = 0 for k >= T

with ``W = max(1, round(warmup_fraction * T))`` (a recipe at its peak already, such as the RNNs'
constant rate, gets no warm-up: Li et al.'s linear schedule). Re-fitting with a new estimate of
``T`` anchors the new line at ``(s, f(s))`` and keeps the warm-up's end, so the rate never jumps;
the knots are plain numbers in the scheduler's ``state_dict``, so a resumed run gets exactly the
schedule it had. The last step (0-based ``T - 1``) runs at ``peak / (T - W + 1)`` on a fresh fit,
and the rate after it is 0.

A **time budget** refits at every step from what the recent steps cost (:class:`StepClock`,
:func:`estimate_total_steps`) and, past the warm-up, sets the multiplier by the *time* left
(:meth:`BudgetSchedule.fit_through`): linear in time from the warm-up's end to the budget's end, so the rate
reaches 0 when the time does however the speed changed on the way (another job on the machine), and a first
estimate made while the machine was busy cannot pull the rate down for good.

With ``mode="auto"`` the trainer fits only short runs (those the budget ends within
:data:`SHORT_RUN_EPOCHS` epochs), and a long run keeps the recipe: the shipped models' recipes, tuned
for runs of many epochs ended by early stopping, stay as they are.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Iterable
from typing import NamedTuple

import torch
from torch.optim.lr_scheduler import LambdaLR

__all__ = [
    "SHORT_RUN_EPOCHS",
    "BudgetSchedule",
    "Recurring",
    "StepClock",
    "apply_schedule",
    "budget_schedule",
    "estimate_total_steps",
    "find_budget_schedule",
    "unreachable_warmup",
    "warmup_steps_for",
]

#: ``mode="auto"`` fits the schedule when the budget ends the run within this many epochs.
SHORT_RUN_EPOCHS = 3
#: Steps left out of the speed estimate at the start of a run (allocator, caches, first-batch outliers).
SKIP_STEPS = 3
#: Steps timed before a time budget is first turned into a step count.
PROBE_STEPS = 8
#: A time budget's speed estimate reads the steps of its last HORIZON_SHARE of the budget, clamped to
#: [HORIZON_MIN_S, HORIZON_MAX_S] seconds, so a second job that starts or stops moves it soon; without a
#: budget, HORIZON_DEFAULT_S.
HORIZON_SHARE = 0.05
HORIZON_MIN_S = 10.0
HORIZON_MAX_S = 60.0
HORIZON_DEFAULT_S = 30.0
MODES = ("auto", "always")


def warmup_steps_for(total_steps: int, warmup_fraction: float) -> int:
    """Warm-up length for a run of ``total_steps``: ``max(1, round(warmup_fraction * total_steps))``."""
    return max(1, round(warmup_fraction * total_steps))


class BudgetSchedule:
    """The multiplier of a budget-fitted schedule (see the module docstring).

    ``base`` is the recipe followed until the schedule is fitted (and for good, when ``keep_recipe`` is
    called): ``{"kind": "constant", "value": x}`` or ``{"kind": "inverse_sqrt", "d_model": d,
    "warmup_steps": w, "factor": c}`` (:class:`attnkit.training.schedules.InverseSqrtWarmup`). Only
    numbers, strings, lists and dicts are held, so the scheduler's ``state_dict`` loads with
    ``torch.load(weights_only=True)``.
    """

    def __init__(self, peak: float, base: dict, warmup_fraction: float = 0.05, mode: str = "auto"):
        if not (isinstance(peak, (int, float)) and math.isfinite(peak) and peak > 0):
            raise ValueError(f"BudgetSchedule: peak must be a positive number, got {peak!r}")
        if not (isinstance(warmup_fraction, (int, float)) and 0 <= warmup_fraction < 1):
            raise ValueError(f"BudgetSchedule: warmup_fraction must be in [0, 1), got {warmup_fraction!r}")
        if mode not in MODES:
            raise ValueError(f"BudgetSchedule: mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not isinstance(base, dict) or base.get("kind") not in ("constant", "inverse_sqrt"):
            raise ValueError(f"BudgetSchedule: base must be a constant or inverse_sqrt description, got {base!r}")
        self.peak = float(peak)
        self.base = dict(base)
        self.warmup_fraction = float(warmup_fraction)
        self.mode = mode
        self.state = "recipe"  # "recipe": following base (not yet fitted, or kept); "fitted": the knots
        self.decided = False  # whether auto chose between the recipe and fitting
        self.knots: list[list[float]] = []
        self.total_steps: int | None = None
        self.warmup_end: float | None = None  # the step (0-based) at which the fitted warm-up peaks
        self.fitted_at: int | None = None  # the step of the first fit

    def base_value(self, step: int) -> float:
        """The recipe's multiplier at ``step`` (0-based: the ``step + 1``-th optimizer step)."""
        b = self.base
        if b["kind"] == "constant":
            return float(b["value"])
        k = step + 1
        return b["factor"] * b["d_model"] ** -0.5 * min(k**-0.5, k * b["warmup_steps"] ** -1.5)

    def __call__(self, step: int) -> float:
        if self.state != "fitted":
            return self.base_value(step)
        knots = self.knots
        if step >= knots[-1][0]:
            return 0.0
        if step <= knots[0][0]:
            return knots[0][1]
        for (x0, y0), (x1, y1) in itertools.pairwise(knots):
            if step <= x1:
                return y0 + (y1 - y0) * (step - x0) / (x1 - x0)
        return 0.0  # unreachable: step < knots[-1][0]

    def fit(self, step: int, total_steps: int) -> None:
        """Fit (or re-fit) the schedule at ``step`` (steps done so far) to end at ``total_steps``.

        The first fit places the warm-up: ``W = warmup_steps_for(T)`` steps from a fresh start, or, when
        the recipe already ran ``step`` steps (a time budget's speed probe) and is still below the peak,
        a ramp from there to the peak at ``max(W - 1, step + W)``. Later fits keep the warm-up's end and
        move only ``T``, anchored at ``(step, f(step))``: the multiplier at ``step`` is the same before
        and after. ``total_steps`` below ``step + 1`` is raised to it (at least the current step runs)."""
        total = max(int(total_steps), step + 1)
        if self.state == "fitted" and total == self.total_steps:
            return  # nothing moved: keep the knots bit for bit
        if self.state != "fitted":
            warm = warmup_steps_for(total, self.warmup_fraction)
            if step == 0 and self.base["kind"] == "inverse_sqrt":
                anchor = [-1.0, 0.0]  # no step taken yet: a fresh warm-up, f(k) = peak * (k + 1) / W
            else:
                anchor = [float(step), self(step)]
            self.warmup_end = None
            if anchor[1] < self.peak:
                self.warmup_end = float(warm - 1 if step == 0 else max(warm - 1, step + warm))
            self.fitted_at = step
        else:
            anchor = [float(step), self(step)]
        knots = [anchor]
        if self.warmup_end is not None and anchor[0] < self.warmup_end < total:
            knots.append([self.warmup_end, self.peak])
        knots.append([float(total), 0.0])
        self.knots = knots
        self.total_steps = total
        self.state = "fitted"
        self.decided = True

    def fit_through(self, step: int, total_steps: int, value: float) -> None:
        """Re-fit a fitted schedule at ``step`` through ``(step, value)`` to ``(total_steps, 0)``.

        A time budget's decay: the trainer gives, at every step, the multiplier the time left calls for
        (linear in time from the warm-up's end to the budget's end), so the rate reaches 0 when the time
        does whatever the speed did on the way, and an early estimate of the steps that was too low (a
        machine busy at the start) cannot pull it down for good. Within the warm-up the ramp is kept
        (``value`` is not used). ``value`` is clipped to ``[0, peak]``."""
        if self.state != "fitted":
            raise ValueError("BudgetSchedule.fit_through: the schedule must be fitted first (fit)")
        if self.warmup_end is not None and step < self.warmup_end:
            self.fit(step, total_steps)
            return
        total = max(int(total_steps), step + 1)
        self.knots = [[float(step), min(max(float(value), 0.0), self.peak)], [float(total), 0.0]]
        self.total_steps = total

    @property
    def warmup_steps(self) -> int:
        """Steps until the fitted schedule's peak (0 without a warm-up)."""
        return 0 if self.warmup_end is None else int(self.warmup_end) + 1

    def keep_recipe(self) -> None:
        """Follow the recipe (``base``) for the rest of the run."""
        self.state = "recipe"
        self.decided = True

    def describe(self) -> dict:
        """What the run record keeps: the state, and for a fitted schedule its steps and knots."""
        d = {"schedule": "budget" if self.state == "fitted" else "recipe", "mode": self.mode, "base": self.base}
        if self.state == "fitted":
            d.update(
                total_steps=self.total_steps,
                fitted_at_step=self.fitted_at,
                warmup_steps=self.warmup_steps,
                warmup_fraction=self.warmup_fraction,
                peak=self.peak,
                knots=self.knots,
            )
        return d


def budget_schedule(
    optimizer: torch.optim.Optimizer, peak: float, base: dict, *, warmup_fraction: float = 0.05, mode: str = "auto"
) -> LambdaLR:
    """A ``LambdaLR`` over a :class:`BudgetSchedule`; the trainer fits it to its budget."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    return LambdaLR(optimizer, BudgetSchedule(peak, base, warmup_fraction, mode))


def find_budget_schedule(scheduler) -> BudgetSchedule | None:
    """The :class:`BudgetSchedule` a ``LambdaLR`` runs (its first group's), or None."""
    fns = getattr(scheduler, "lr_lambdas", None) or [None]
    return fns[0] if isinstance(fns[0], BudgetSchedule) else None


def apply_schedule(scheduler) -> None:
    """Set every param group's lr to what the scheduler's multipliers give at its current step (after a
    fit moved the schedule before the first step; later fits leave the current value as it was)."""
    step = scheduler.last_epoch
    lrs = [base * fn(step) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for group, lr in zip(scheduler.optimizer.param_groups, lrs):
        group["lr"] = lr
    scheduler._last_lr = lrs


def unreachable_warmup(warmup_steps: int, peak: float, total_steps: int) -> str | None:
    """The warning for a recipe whose warm-up of ``warmup_steps`` the budget's ``total_steps`` cannot finish
    (its peak ``peak`` is never reached), or None when it can."""
    if total_steps >= warmup_steps:
        return None
    return (
        f"the schedule's warm-up of {warmup_steps} steps cannot finish: this budget allows about {total_steps} "
        f"steps, so the learning rate stops at {peak * total_steps / warmup_steps:.3g}, "
        f"{100 * total_steps / warmup_steps:.0f}% of its peak {peak:.3g} (--lr-schedule budget fits warm-up and "
        "decay to the budget)"
    )


class StepClock:
    """What a time budget's remaining steps cost: the seconds of a training step *now*, and of each
    recurring event (a validation, a checkpoint, an epoch's end) as last measured.

    A step's cost is the mean over the most recent steps that span ``horizon_s`` seconds (at least
    ``min_steps`` of them): short enough that a second job starting or stopping on the machine moves the
    estimate within that many seconds, long enough to average the batches' lengths. The first ``skip``
    steps are left out (first-batch and allocator outliers). Events are timed apart from the steps, so a
    validation's minute does not read as a slow step, and :func:`estimate_total_steps` charges each one
    where it will recur.
    """

    def __init__(self, skip: int = SKIP_STEPS, horizon_s: float = 30.0, min_steps: int = 16):
        if not (isinstance(horizon_s, (int, float)) and horizon_s > 0):
            raise ValueError(f"StepClock: horizon_s must be a positive number of seconds, got {horizon_s!r}")
        if not (isinstance(min_steps, int) and min_steps >= 1):
            raise ValueError(f"StepClock: min_steps must be a positive integer, got {min_steps!r}")
        self.skip, self.horizon_s, self.min_steps = skip, float(horizon_s), min_steps
        self.durations: collections.deque[float] = collections.deque()
        self._sum = 0.0
        self.seen = 0
        self.events: dict[str, float] = {}  # kind -> the seconds its last occurrence took

    @classmethod
    def for_budget(cls, max_time_s: float | None, skip: int = SKIP_STEPS) -> StepClock:
        """A clock whose window is :data:`HORIZON_SHARE` of the budget, clamped to
        [:data:`HORIZON_MIN_S`, :data:`HORIZON_MAX_S`]."""
        if max_time_s is None:
            return cls(skip=skip, horizon_s=HORIZON_DEFAULT_S)
        horizon = min(max(HORIZON_SHARE * max_time_s, HORIZON_MIN_S), HORIZON_MAX_S)
        return cls(skip=skip, horizon_s=horizon)

    def add(self, seconds: float) -> None:
        """One training step's seconds (fetching its batch included; events not)."""
        self.seen += 1
        if self.seen <= self.skip:
            return
        self.durations.append(float(seconds))
        self._sum += float(seconds)
        while len(self.durations) > self.min_steps and self._sum - self.durations[0] >= self.horizon_s:
            self._sum -= self.durations.popleft()

    def add_event(self, kind: str, seconds: float) -> None:
        """An occurrence of a recurring event (``"valid"``, ``"save"``, ``"epoch_end"``) and its seconds."""
        self.events[kind] = float(seconds)

    def event_seconds(self, kind: str) -> float:
        """The seconds ``kind`` last took (0 before it was first seen: nothing is charged for it yet)."""
        return self.events.get(kind, 0.0)

    @property
    def settled(self) -> bool:
        """Whether the timed steps span the whole window yet (the first estimate worth calling a plan)."""
        return self._sum >= self.horizon_s

    def seconds_per_step(self) -> float | None:
        """Mean seconds per step over the window; None before any is timed."""
        if not self.durations:
            return None
        return max(self._sum, 0.0) / len(self.durations)


class Recurring(NamedTuple):
    """An event that recurs every ``period`` steps, next after ``first`` more steps (``first >= 1``), and costs
    ``seconds`` each time."""

    first: int
    period: int
    seconds: float

    @classmethod
    def every(cls, period: int, step: int, seconds: float) -> Recurring:
        """An event after every step whose number is a multiple of ``period``, counted from step ``step``."""
        return cls(period - step % period, period, seconds)

    def count(self, steps: int) -> int:
        """How often it happens within the next ``steps`` steps."""
        return 0 if steps < self.first else 1 + (steps - self.first) // self.period


def estimate_total_steps(
    step: int,
    *,
    seconds_left: float,
    seconds_per_step: float,
    epoch_end_seconds: float = 0.0,
    steps_per_epoch: int | None = None,
    step_in_epoch: int = 0,
    events: Iterable[Recurring] = (),
    cap: int | None = None,
) -> int:
    """The step count a time budget reaches: ``step`` plus the most steps ``n`` for which ::

        n * seconds_per_step + sum over events e before the n-th step of e.seconds  <=  seconds_left

    where the events are ``events`` (validations, checkpoints every so many steps) and, with
    ``steps_per_epoch``, an epoch's end (``epoch_end_seconds``: its validation and checkpoint) after the
    ``steps_per_epoch - step_in_epoch``-th step and every ``steps_per_epoch`` after it. An event after the
    last step comes after the budget, so it is not charged. At most ``cap`` in all, at least ``step + 1``.
    """
    if seconds_per_step <= 0:
        raise ValueError(f"seconds_per_step must be > 0, got {seconds_per_step!r}")
    eps = 1e-9  # seconds: a step that ends exactly at the budget's end counts
    recurring = [e for e in events if e.seconds > 0]
    if steps_per_epoch and epoch_end_seconds > 0:
        recurring.append(Recurring(steps_per_epoch - step_in_epoch, steps_per_epoch, epoch_end_seconds))

    def cost(n: int) -> float:  # seconds of n steps and the events between them
        return n * seconds_per_step + sum(e.seconds * e.count(n - 1) for e in recurring)

    hi = int(max(seconds_left + eps, 0.0) // seconds_per_step)  # no events: the most that could fit
    if cap is not None:
        hi = min(hi, max(cap - step, 0))
    lo = 0
    while lo < hi:  # the largest n in [0, hi] with cost(n) <= seconds_left (cost grows with n)
        mid = (lo + hi + 1) // 2
        if cost(mid) <= seconds_left + eps:
            lo = mid
        else:
            hi = mid - 1
    total = max(step + lo, step + 1)
    return min(total, cap) if cap is not None else total
