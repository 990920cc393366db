"""The step and schedule bookkeeping of a :class:`~attnkit.training.Trainer` run.

How many steps the run will take: its step cap (``epochs`` times the steps of an epoch, ``max_steps``)
and, with a time budget (``max_time_s``), what the measured seconds per step (and per validation) fit
in the time left (:func:`~attnkit.training.budget.estimate_total_steps`). A
:class:`~attnkit.training.budget.BudgetSchedule` is fitted to that estimate and re-fitted as it moves
(every rank follows rank 0's), the schedule that runs is recorded in ``train_config.json``, and a recipe
warm-up the budget cannot finish is warned about once. :class:`StepPlanner` holds that state; the trainer
passes it the loop's position (step, epoch) at each call.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..paths import atomic_write_text
from .budget import (
    PROBE_STEPS,
    SHORT_RUN_EPOCHS,
    BudgetSchedule,
    Recurring,
    StepClock,
    apply_schedule,
    estimate_total_steps,
    find_budget_schedule,
    unreachable_warmup,
)
from .distributed import broadcast_object
from .progress import RunLog
from .run_config import RunConfig
from .schedules import InverseSqrtWarmup
from .threads import ThreadGovernor

__all__ = ["StepPlanner"]


@dataclasses.dataclass
class StepPlanner:
    """A run's step estimate, the :class:`~attnkit.training.budget.BudgetSchedule` fitted to it, and the
    run's record of both (``train_config.json``). The fields after ``record_path`` are its state."""

    run: RunConfig  # the limits (epochs, max_steps, max_time_s) and events (saves, validations), read when used
    scheduler: Any  # the run's LR scheduler, or None
    batches: Any  # the run's batch source: its length is an epoch's batches
    world_size: int  # ranks sharing each epoch's batches
    is_main: bool  # rank 0 prints, logs and writes the record
    log: RunLog  # where the schedule, warnings and the budget's report are logged
    record_path: Path | None = None  # train_config.json, the run's record (None: the run keeps none)
    budget: BudgetSchedule | None = dataclasses.field(init=False)  # the scheduler's budget schedule, or None
    clock: StepClock = dataclasses.field(default_factory=StepClock)  # a step's and each event's seconds
    t0: float = 0.0  # when this ``fit`` began (time.perf_counter): a time budget counts from it
    has_valid_fn: bool = False  # whether the run validates at all (its validations cost budget time)
    planned_steps: int | None = None  # a time budget's first settled estimate of its steps, for the shortfall
    estimated_steps: int | None = None  # the steps the run's budget is expected to reach (latest estimate)
    decay_from: tuple[float, float] | None = None  # (time, multiplier): where a time budget's decay began
    warned: bool = False  # the unreachable warm-up warning was considered (it is given once)
    epoch_steps: tuple[int, int | None] | None = None  # (epoch, this rank's steps in it), cached per epoch

    def __post_init__(self) -> None:
        self.budget = find_budget_schedule(self.scheduler)

    def start(self, t0: float, *, has_valid_fn: bool) -> None:
        """A ``fit`` begins at ``t0``: a fresh clock (for its time budget) and a fresh plan."""
        self.clock = StepClock.for_budget(self.run.max_time_s)
        self.t0, self.has_valid_fn = t0, has_valid_fn
        self.planned_steps = None
        self.decay_from = None  # (time, multiplier) where this run's time-budget decay began

    def steps_per_epoch(self, epoch: int) -> int | None:
        """This rank's steps in ``epoch`` (a batch source plans its epoch to count them: cached per epoch,
        since the budget asks at every step)."""
        if self.epoch_steps is not None and self.epoch_steps[0] == epoch:
            return self.epoch_steps[1]
        try:
            n = len(self.batches) // self.world_size
        except TypeError:
            n = None
        self.epoch_steps = (epoch, n)
        return n

    def step_cap(self, epoch: int) -> int | None:
        """The most steps this run can take by its step and epoch limits (None: unknown)."""
        caps = []
        spe = self.steps_per_epoch(epoch)
        if spe:
            caps.append(spe * self.run.epochs)
        if self.run.max_steps is not None:
            caps.append(self.run.max_steps)
        return min(caps) if caps else None

    def estimate_steps(self, step: int, epoch: int) -> int | None:
        """The steps the run is expected to reach: its step cap; with a time budget, also what the
        measured speed fits in the time left (None until :data:`PROBE_STEPS` steps are timed)."""
        cap = self.step_cap(epoch)
        if self.run.max_time_s is None:
            return cap
        sps = self.clock.seconds_per_step()
        if sps is None or self.clock.seen < PROBE_STEPS:
            return None
        spe = self.steps_per_epoch(epoch)
        events = [Recurring.every(self.run.save_every_steps, step, self.clock.event_seconds("save"))]
        if self.run.valid_every_steps and self.has_valid_fn:
            events.append(Recurring.every(self.run.valid_every_steps, step, self.clock.event_seconds("valid")))
        return estimate_total_steps(
            step,
            seconds_left=self.run.max_time_s - (time.perf_counter() - self.t0) - self.end_reserve(),
            seconds_per_step=sps,
            epoch_end_seconds=self.clock.event_seconds("epoch_end"),
            steps_per_epoch=spe,
            step_in_epoch=max(step - epoch * spe, 0) if spe else 0,
            events=events,
            cap=cap,
        )

    def end_reserve(self) -> float:
        """The seconds a time-budget run's end takes after its last step, kept out of the steps' time so the run
        ends within its budget: the last checkpoint and, where the run validates its budget's last step
        (:meth:`Validator.due_at_budget_end`), a validation, each as long as the last one took (0 before the first)."""
        reserve = self.clock.event_seconds("save")
        validates = self.run.valid_every_epochs or self.run.valid_every_steps
        if self.budget is not None and self.has_valid_fn and validates:
            reserve += self.clock.event_seconds("valid")
        return reserve

    def time_is_up(self, step: int) -> bool:
        """With a time budget: whether this run must stop after ``step``: its time (less :meth:`end_reserve`) is
        spent, or the schedule fitted to the time left has ended (lr 0 from here). Resume continues the run."""
        if self.run.max_time_s is None:
            return False
        if time.perf_counter() - self.t0 >= self.run.max_time_s - self.end_reserve():
            return True
        b = self.budget
        return b is not None and b.state == "fitted" and step >= b.total_steps

    def time_left_value(self, step: int) -> float | None:
        """With a time budget and a fitted schedule past its warm-up: the multiplier the time left calls for,
        ``m_w (t_end - now) / (t_end - t_w)``, linear in time from ``(t_w, m_w)`` (where this run's decay
        began: the warm-up's end, or the first step of a resumed run) to 0 at ``t_end`` (the budget's end less
        :meth:`end_reserve`). None otherwise (no time budget, no fitted schedule, still warming up)."""
        b = self.budget
        if self.run.max_time_s is None or b is None or b.state != "fitted":
            return None
        if b.warmup_end is not None and step < b.warmup_end:
            return None
        now = time.perf_counter()
        if self.decay_from is None:
            self.decay_from = (now, b(step))
        t_w, m_w = self.decay_from
        end = self.t0 + self.run.max_time_s - self.end_reserve()
        return m_w * max(end - now, 0.0) / (end - t_w) if end > t_w else 0.0

    def plan(self, step: int, epoch: int) -> None:
        """Estimate the steps the budget reaches; fit a :class:`~attnkit.training.budget.BudgetSchedule` to
        them (``auto``: only a run that ends within ``SHORT_RUN_EPOCHS`` epochs) and re-fit it as the
        estimate moves; warn once when a recipe's warm-up cannot finish within the budget."""
        total = self.estimate_steps(step, epoch)
        value = self.time_left_value(step) if total is not None else None
        if self.world_size > 1:  # every rank follows rank 0's estimate: the same schedule, the same last step
            total, value = broadcast_object((total, value))
        if total is None:
            return
        self.estimated_steps = total
        if self.planned_steps is None and self.clock.settled:
            self.planned_steps = total  # the plan: the estimate once a whole window of steps is timed
        self.log.set_total(total)
        b = self.budget
        if b is not None:
            if not b.decided:
                spe = self.steps_per_epoch(epoch)
                if b.mode == "always" or spe is None or total <= SHORT_RUN_EPOCHS * spe:
                    b.fit(step, total)
                else:
                    b.keep_recipe()
                apply_schedule(self.scheduler)
                self.log.write({"event": "schedule", "step": step, "estimated_steps": total, **b.describe()})
                self.record_schedule()
                if self.is_main and b.state == "fitted":
                    print(
                        f"attnkit: about {total} steps fit this budget: lr warm-up over {b.warmup_steps} steps to "
                        f"{self.scheduler.base_lrs[0] * b.peak:.3g}, then linear decay to 0 at step {total} "
                        "(budgeted training)",
                        file=sys.stderr,
                    )
            elif b.state == "fitted" and value is not None:  # a time budget: the decay follows the time left
                b.fit_through(step, total, value)
                apply_schedule(self.scheduler)
            elif b.state == "fitted" and total != b.total_steps:
                b.fit(step, total)
                apply_schedule(self.scheduler)
        if not self.warned:
            self.warned = True
            message = self.unreachable_schedule(total)
            if message is not None:
                self.log.write({"event": "warning", "step": step, "message": message})
                if self.is_main:
                    print(f"attnkit: warning: {message}", file=sys.stderr)

    def unreachable_schedule(self, total: int) -> str | None:
        """The warning for a recipe warm-up longer than the budget's ``total`` steps, or None."""
        b, fns = self.budget, getattr(self.scheduler, "lr_lambdas", None) or [None]
        if b is not None and b.state == "recipe" and b.base["kind"] == "inverse_sqrt":
            d, w, c = b.base["d_model"], b.base["warmup_steps"], b.base["factor"]
        elif b is None and isinstance(fns[0], InverseSqrtWarmup):
            d, w, c = fns[0].d_model, fns[0].warmup_steps, fns[0].factor
        else:
            return None
        base_lr = self.scheduler.base_lrs[0]
        return unreachable_warmup(w, base_lr * c * d**-0.5 * w**-0.5, total)

    def record_schedule(self) -> None:
        """Write the schedule that runs into ``train_config.json`` (its ``schedule`` key), atomically."""
        if self.budget is not None:
            schedule = self.budget.describe()
        else:
            fns = getattr(self.scheduler, "lr_lambdas", None) or [None]
            schedule = {"schedule": "recipe", "kind": type(fns[0]).__name__ if fns[0] is not None else None}
        self.update_record("schedule", {**schedule, "estimated_steps": self.estimated_steps})

    def update_record(self, key: str, value: dict) -> None:
        """Set ``key`` of ``train_config.json`` (the run's record) to ``value``, atomically; rank 0 only."""
        if self.record_path is None or not self.is_main or not self.record_path.is_file():
            return
        record = json.loads(self.record_path.read_text())
        record[key] = value
        temporary = self.record_path.with_name(self.record_path.name + ".tmp")  # named in the run's manifest
        atomic_write_text(self.record_path, json.dumps(record, indent=2), temporary=temporary)

    def report_budget(self, step: int, last_step_lr: float | None, governor: ThreadGovernor | None) -> None:
        """With a time budget: how the run kept to it, logged (a ``budget`` event) and recorded in
        ``train_config.json`` (its ``budget`` key): the steps first planned and made (``step``), the share
        lost, and the learning rate the last step ran at (``last_step_lr``) as a share of the fitted schedule's
        peak (near 0 at a budget's end), and when the thread ``governor`` changed the threads. Losing more than
        ``run.budget_shortfall`` of the plan (a slower machine than the first steps showed, another job sharing
        it) is said on stderr and logged as a warning."""
        planned = self.planned_steps or self.estimated_steps  # a run shorter than the clock's window: its last
        if self.run.max_time_s is None or planned is None:
            return
        b = self.budget
        lost = max(planned - step, 0) / max(planned, 1)
        report = {"planned_steps": planned, "steps": step, "lost_share": round(lost, 4)}
        if b is not None and b.state == "fitted" and last_step_lr is not None:
            peak_lr = self.scheduler.base_lrs[0] * b.peak
            report["last_lr_share_of_peak"] = round(last_step_lr / peak_lr, 4)
        if governor is not None and governor.changes:  # the cores were shared: when and how it adapted
            report["thread_changes"] = governor.changes[:50]
        self.log.write({"event": "budget", "step": step, **report})
        if lost > self.run.budget_shortfall:
            message = (
                f"this run made {step} steps of the {planned} its first steps planned for the "
                f"{self.run.max_time_s:g}-s budget ({100 * lost:.0f}% fewer): training ran slower than it started "
                "(another job on the machine?); the schedule was re-fitted as it went"
            )
            report["warning"] = message
            self.log.write({"event": "warning", "step": step, "message": message})
            if self.is_main:
                print(f"attnkit: warning: {message}", file=sys.stderr)
        self.update_record("budget", report)
