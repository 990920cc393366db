"""The step and schedule bookkeeping of a :class:`~attnkit.training.Trainer` run.

How many steps the run will take: its step cap (``epochs`` times the steps of an epoch, ``max_steps``)
and, with a time budget (``max_time_s``), what the measured seconds per step (and per validation) fit
in the time left (:func:`~attnkit.training.budget.estimate_total_steps`). A
:class:`~attnkit.training.budget.BudgetSchedule` is fitted to that estimate and re-fitted as it moves
(every rank follows rank 0's), the schedule that runs is recorded in ``train_config.json``, and a recipe
warm-up the budget cannot finish is warned about once.
"""

from __future__ import annotations

import json
import os
import sys
import time

from .budget import (
    PROBE_STEPS,
    SHORT_RUN_EPOCHS,
    Recurring,
    apply_schedule,
    estimate_total_steps,
    unreachable_warmup,
)
from .distributed import broadcast_object
from .progress import RunStats
from .schedules import InverseSqrtWarmup

__all__ = ["StepPlanMixin"]


class StepPlanMixin:
    """The :class:`~attnkit.training.Trainer`'s step estimate and the budget schedule fitted to it."""

    def _steps_per_epoch(self) -> int | None:
        """This rank's steps in the current epoch (a batch source plans its epoch to count them: cached
        per epoch, since the budget asks at every step)."""
        if self._spe is not None and self._spe[0] == self.epoch:
            return self._spe[1]
        try:
            n = len(self.train_batches) // self.world_size
        except TypeError:
            n = None
        self._spe = (self.epoch, n)
        return n

    def _step_cap(self) -> int | None:
        """The most steps this run can take by its step and epoch limits (None: unknown)."""
        caps = []
        spe = self._steps_per_epoch()
        if spe:
            caps.append(spe * self.run.epochs)
        if self.run.max_steps is not None:
            caps.append(self.run.max_steps)
        return min(caps) if caps else None

    def _estimate_steps(self, stats: RunStats) -> int | None:
        """The steps the run is expected to reach: its step cap; with a time budget, also what the
        measured speed fits in the time left (None until :data:`PROBE_STEPS` steps are timed)."""
        cap = self._step_cap()
        if self.run.max_time_s is None:
            return cap
        sps = self._clock.seconds_per_step()
        if sps is None or self._clock.seen < PROBE_STEPS:
            return None
        spe = self._steps_per_epoch()
        events = [Recurring.every(self.run.save_every_steps, self.step, self._clock.event_seconds("save"))]
        if self.run.valid_every_steps and self.valid_fn is not None:
            events.append(Recurring.every(self.run.valid_every_steps, self.step, self._clock.event_seconds("valid")))
        return estimate_total_steps(
            self.step,
            seconds_left=self.run.max_time_s - (time.perf_counter() - stats.t0) - self._end_reserve(),
            seconds_per_step=sps,
            epoch_end_seconds=self._clock.event_seconds("epoch_end"),
            steps_per_epoch=spe,
            step_in_epoch=max(self.step - self.epoch * spe, 0) if spe else 0,
            events=events,
            cap=cap,
        )

    def _end_reserve(self) -> float:
        """The seconds a time-budget run's end takes after its last step, kept out of the steps' time so the run
        ends within its budget: the last checkpoint and, where the run validates its budget's last step
        (:meth:`_final_validation`), a validation, each as long as the last one took (0 before the first)."""
        reserve = self._clock.event_seconds("save")
        validates = self.run.valid_every_epochs or self.run.valid_every_steps
        if self._budget is not None and self.valid_fn is not None and validates:
            reserve += self._clock.event_seconds("valid")
        return reserve

    def _time_left_value(self, stats: RunStats) -> float | None:
        """With a time budget and a fitted schedule past its warm-up: the multiplier the time left calls for,
        ``m_w (t_end - now) / (t_end - t_w)``, linear in time from ``(t_w, m_w)`` (where this run's decay
        began: the warm-up's end, or the first step of a resumed run) to 0 at ``t_end`` (the budget's end less
        :meth:`_end_reserve`). None otherwise (no time budget, no fitted schedule, still warming up)."""
        b = self._budget
        if self.run.max_time_s is None or b is None or b.state != "fitted":
            return None
        if b.warmup_end is not None and self.step < b.warmup_end:
            return None
        now = time.perf_counter()
        if self._decay_from is None:
            self._decay_from = (now, b(self.step))
        t_w, m_w = self._decay_from
        end = stats.t0 + self.run.max_time_s - self._end_reserve()
        return m_w * max(end - now, 0.0) / (end - t_w) if end > t_w else 0.0

    def _plan(self, stats: RunStats, pbar) -> None:
        """Estimate the steps the budget reaches; fit a :class:`~attnkit.training.budget.BudgetSchedule` to
        them (``auto``: only a run that ends within ``SHORT_RUN_EPOCHS`` epochs) and re-fit it as the
        estimate moves; warn once when a recipe's warm-up cannot finish within the budget."""
        total = self._estimate_steps(stats)
        value = self._time_left_value(stats) if total is not None else None
        if self.world_size > 1:  # every rank follows rank 0's estimate: the same schedule, the same last step
            total, value = broadcast_object((total, value))
        if total is None:
            return
        self.estimated_steps = total
        if self.planned_steps is None and self._clock.settled:
            self.planned_steps = total  # the plan: the estimate once a whole window of steps is timed
        if pbar is not None and pbar.total != total:
            pbar.total = total
        b = self._budget
        if b is not None:
            if not b.decided:
                spe = self._steps_per_epoch()
                if b.mode == "always" or spe is None or total <= SHORT_RUN_EPOCHS * spe:
                    b.fit(self.step, total)
                else:
                    b.keep_recipe()
                apply_schedule(self.scheduler)
                self._log({"event": "schedule", "step": self.step, "estimated_steps": total, **b.describe()})
                self._record_schedule()
                if self.is_main and b.state == "fitted":
                    print(
                        f"attnkit: about {total} steps fit this budget: lr warm-up over {b.warmup_steps} steps to "
                        f"{self.scheduler.base_lrs[0] * b.peak:.3g}, then linear decay to 0 at step {total} "
                        "(budgeted training)",
                        file=sys.stderr,
                    )
            elif b.state == "fitted" and value is not None:  # a time budget: the decay follows the time left
                b.fit_through(self.step, total, value)
                apply_schedule(self.scheduler)
            elif b.state == "fitted" and total != b.total_steps:
                b.fit(self.step, total)
                apply_schedule(self.scheduler)
        if not self._warned:
            self._warned = True
            message = self._unreachable_schedule(total)
            if message is not None:
                self._log({"event": "warning", "step": self.step, "message": message})
                if self.is_main:
                    print(f"attnkit: warning: {message}", file=sys.stderr)

    def _unreachable_schedule(self, total: int) -> str | None:
        """The warning for a recipe warm-up longer than the budget's ``total`` steps, or None."""
        b, fns = self._budget, getattr(self.scheduler, "lr_lambdas", None) or [None]
        if b is not None and b.state == "recipe" and b.base["kind"] == "inverse_sqrt":
            d, w, c = b.base["d_model"], b.base["warmup_steps"], b.base["factor"]
        elif b is None and isinstance(fns[0], InverseSqrtWarmup):
            d, w, c = fns[0].d_model, fns[0].warmup_steps, fns[0].factor
        else:
            return None
        base_lr = self.scheduler.base_lrs[0]
        return unreachable_warmup(w, base_lr * c * d**-0.5 * w**-0.5, total)

    def _record_schedule(self) -> None:
        """Write the schedule that runs into ``train_config.json`` (its ``schedule`` key), atomically."""
        if self._budget is not None:
            schedule = self._budget.describe()
        else:
            fns = getattr(self.scheduler, "lr_lambdas", None) or [None]
            schedule = {"schedule": "recipe", "kind": type(fns[0]).__name__ if fns[0] is not None else None}
        self._update_record("schedule", {**schedule, "estimated_steps": self.estimated_steps})

    def _update_record(self, key: str, value: dict) -> None:
        """Set ``key`` of ``train_config.json`` (the run's record) to ``value``, atomically; rank 0 only."""
        if self.record_path is None or not self.is_main or not self.record_path.is_file():
            return
        record = json.loads(self.record_path.read_text())
        record[key] = value
        tmp = self.record_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=2))
        os.replace(tmp, self.record_path)

    def _report_budget(self) -> None:
        """With a time budget: how the run kept to it, logged (a ``budget`` event) and recorded in
        ``train_config.json`` (its ``budget`` key): the steps first planned and made, the share lost, and the
        learning rate the last step ran at as a share of the fitted schedule's peak (near 0 at a budget's end).
        Losing more than ``run.budget_shortfall`` of the plan (a slower machine than the first steps showed,
        another job sharing it) is said on stderr and logged as a warning."""
        planned = self.planned_steps or self.estimated_steps  # a run shorter than the clock's window: its last
        if self.run.max_time_s is None or planned is None:
            return
        b = self._budget
        lost = max(planned - self.step, 0) / max(planned, 1)
        report = {"planned_steps": planned, "steps": self.step, "lost_share": round(lost, 4)}
        if b is not None and b.state == "fitted" and self.last_step_lr is not None:
            peak_lr = self.scheduler.base_lrs[0] * b.peak
            report["last_lr_share_of_peak"] = round(self.last_step_lr / peak_lr, 4)
        governor = getattr(self, "_threads", None)
        if governor is not None and governor.changes:  # the cores were shared: when and how it adapted
            report["thread_changes"] = governor.changes[:50]
        self._log({"event": "budget", "step": self.step, **report})
        if lost > self.run.budget_shortfall:
            message = (
                f"this run made {self.step} steps of the {planned} its first steps planned for the "
                f"{self.run.max_time_s:g}-s budget ({100 * lost:.0f}% fewer): training ran slower than it started "
                "(another job on the machine?); the schedule was re-fitted as it went"
            )
            report["warning"] = message
            self._log({"event": "warning", "step": self.step, "message": message})
            if self.is_main:
                print(f"attnkit: warning: {message}", file=sys.stderr)
        self._update_record("budget", report)
