"""One training loop for every attnkit model: exact resume, DDP, early stopping, logs.

The loop, per optimizer step::

    loss_sum, n_tokens, metrics = loss_fn(model, batch)
    loss = loss_sum / n_tokens_global          # per-token mean over the *global* batch
    loss.backward(); clip_grad_norm; optimizer.step(); scheduler.step()

``loss_fn`` returns a *sum* over tokens and the token count, not a mean: the trainer divides by
the count of the whole batch, so every token weighs the same however sentences are batched. Under
DDP the token counts are all-reduced and the loss scaled by ``world_size / n_tokens_global``;
since DDP averages gradients over ranks, the gradient equals the single-process gradient of the
global batch (the concatenation of every rank's batch).

Checkpoints (``out_dir/step-XXXXXXXX``, the last ``keep_last`` kept, plus ``out_dir/best``) are
written every ``save_every_steps`` steps, at the end of every epoch, at the end of ``fit`` and when
a stop is requested (SIGINT/SIGTERM or :meth:`Trainer.request_stop`), at a step boundary. They hold
the model, optimizer, scheduler, python/numpy/torch RNG states (per rank), the data source's
position and all counters, so that ``fit`` for N steps, then ``fit(resume=True)`` for M more,
gives bit-for-bit the weights of N+M steps in one run.

**Device and precision.** ``device`` (``"auto"``, ``"cpu"``, ``"cuda"``, ...; see
:mod:`attnkit.device`) is where the model and every batch go; ``precision`` (``"fp32"``, ``"bf16"``,
``"fp16"``, ``"auto"``) runs forward and loss under ``torch.autocast`` while the weights stay fp32 (the
master copy); fp16 adds a gradient scaler, saved and restored with the rest. Checkpoints hold CPU
tensors, so a run started on CUDA resumes on a CPU and the other way round.

Under ``torchrun`` (``WORLD_SIZE`` > 1) the trainer initialises the process group (nccl on CUDA, gloo
on the CPU), wraps the
model in ``DistributedDataParallel`` and gives rank r every ``world_size``-th batch (the last
incomplete group of an epoch is dropped, so all ranks take the same number of steps); only rank
0 writes checkpoints, the JSON-lines log and the progress bar.

Every run option is a field of :class:`~attnkit.training.RunConfig` (the ``run`` argument). This module
is the loop itself (epochs, steps, stop requests); the rest of a run sits beside it, one job a module:
:mod:`.resume` (fresh start or resume, trainer state, checkpoints), :mod:`.validation` (best metric,
early stopping), :mod:`.step_plan` (the step estimate and the budget schedule fitted to it) and
:mod:`.progress` (the JSON-lines log and the progress line).
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from ..checks import check_fields
from ..device import autocast, resolve_device, resolve_precision, to_device
from .budget import StepClock, find_budget_schedule
from .checkpoint import step_dir_name
from .distributed import all_reduce_sum, init_distributed, local_rank
from .progress import ProgressMixin, RunStats, run_totals
from .resume import ResumeMixin
from .run_config import RunConfig
from .run_folder import BEST_NAME, TRAIN_CONFIG_NAME, open_run_folder
from .step_plan import StepPlanMixin
from .threads import ThreadGovernor
from .validation import ValidationMixin

__all__ = ["Trainer", "run_totals"]


def _check_batches(train_batches: Any) -> None:
    for name in ("__iter__", "state_dict", "load_state_dict", "set_epoch"):
        if not callable(getattr(train_batches, name, None)):
            raise TypeError(
                f"Trainer: train_batches must have {name}() (a resumable batch source, see attnkit.training.data); "
                f"got {type(train_batches).__name__}"
            )


class Trainer(ResumeMixin, ValidationMixin, StepPlanMixin, ProgressMixin):
    """Train ``model`` with ``optimizer`` on ``train_batches`` for the run ``run`` describes (see the module
    docstring).

    ``run`` (a :class:`~attnkit.training.RunConfig`) holds every run option: how long (``epochs``,
    ``max_steps``, ``max_time_s``), when to validate and stop (``valid_every_epochs``,
    ``valid_every_steps``, ``patience``), where checkpoints go and how many are kept (``out_dir``, ``save_every_steps``, ``keep_last``), the gradient
    clipping, the seed, the log period, the progress bar, the device and the precision. A task's config
    nests one (its ``run`` field) and the command line builds it once. The keyword arguments are what only
    the task knows:

        loss_fn: ``loss_fn(model, batch) -> (loss_sum: Tensor, n_tokens: int, metrics: dict)``;
            ``model`` is the (possibly DDP-wrapped) training module; call it, do not unwrap it.
        train_batches: a resumable batch source (``__iter__``, ``set_epoch``, ``state_dict``,
            ``load_state_dict``; see :class:`attnkit.training.data.ListBatches`).
        valid_fn: ``valid_fn(model) -> dict`` of metrics, called at the end of every
            ``run.valid_every_epochs``-th epoch (and every ``run.valid_every_steps`` steps) on the
            unwrapped model in eval mode under ``torch.no_grad`` (on rank 0 only under DDP).
        scheduler: stepped once per optimizer step; saved and restored. A
            :class:`~attnkit.training.budget.BudgetSchedule` is fitted to the steps the budget (time, steps
            or epochs) reaches, and the budget's last step is validated.
        metric_for_best / greater_is_better: which ``valid_fn`` metric picks ``out_dir/best`` (and
            counts towards ``run.patience``).
        after_step: ``after_step(model, metrics)`` after every optimizer step, with the unwrapped
            model and the loss's metrics: state that training moves outside the optimizer (e.g. a
            REINFORCE baseline) is updated here, so the loss stays a pure function.
        extra_files: ``{name: bytes}`` copied into every checkpoint (tokenizer files).
        model_config: the model config written as config.json; default ``model.to_config()`` if the
            model has one, else ``{}`` (``model_type`` is filled in from the registry).
        task_config: the task's whole config (a dataclass), written to ``run.out_dir/train_config.json``,
            where the schedule that runs is recorded too.

    ``run.device`` ``None`` trains where the model's parameters already are; ``"auto"`` picks cuda, then mps,
    then cpu. Under torchrun on CUDA each rank takes ``cuda:LOCAL_RANK``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        run: RunConfig,
        *,
        loss_fn: Callable[[torch.nn.Module, Any], tuple[torch.Tensor, int, dict]],
        train_batches: Any,
        valid_fn: Callable[[torch.nn.Module], dict] | None = None,
        scheduler: Any = None,
        metric_for_best: str = "valid_loss",
        greater_is_better: bool = False,
        after_step: Callable[[torch.nn.Module, dict], None] | None = None,
        extra_files: Mapping[str, bytes] | None = None,
        model_config: Mapping[str, Any] | None = None,
        task_config: Any = None,
    ):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"Trainer: model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"Trainer: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if not isinstance(run, RunConfig):
            raise TypeError(f"Trainer: run must be a RunConfig, got {type(run).__name__}")
        check_fields(run)  # again: a RunConfig's fields may have been set after it was built
        if run.out_dir is None:
            raise ValueError("Trainer: run.out_dir must be set (the task config sets its default)")
        if not callable(loss_fn):
            raise TypeError("Trainer: loss_fn must be callable (model, batch) -> (loss_sum, n_tokens, metrics)")
        if valid_fn is not None and not callable(valid_fn):
            raise TypeError("Trainer: valid_fn must be callable (model) -> dict or None")
        if after_step is not None and not callable(after_step):
            raise TypeError("Trainer: after_step must be callable (model, metrics) or None")
        _check_batches(train_batches)
        if run.patience is not None and valid_fn is None:
            raise ValueError("Trainer: run.patience needs a valid_fn to compute metric_for_best")

        self.run = run
        device = run.device
        if device is None:
            first = next(iter(model.parameters()), None)
            device = first.device if first is not None else torch.device("cpu")
        self.device = resolve_device(device)
        self.amp_dtype = resolve_precision(run.precision, self.device)
        self.rank, self.world_size = init_distributed("nccl" if self.device.type == "cuda" else "gloo")
        if self.world_size > 1 and self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", local_rank())
        self.is_main = self.rank == 0
        self.raw_model = model.to(self.device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype == torch.float16)
        if self.world_size > 1 and not isinstance(model, DistributedDataParallel):
            model = DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.after_step = after_step
        self.train_batches = train_batches
        self.valid_fn = valid_fn
        self.scheduler = scheduler
        self.out_dir = Path(run.out_dir)
        self.metric_for_best = metric_for_best
        self.greater_is_better = bool(greater_is_better)
        self.extra_files = dict(extra_files or {})
        if model_config is None:
            to_config = getattr(self.raw_model, "to_config", None)
            model_config = to_config() if callable(to_config) else {}
        if dataclasses.is_dataclass(model_config) and not isinstance(model_config, type):
            model_config = dataclasses.asdict(model_config)
        self.model_config = dict(model_config)
        self.record_path: Path | None = None  # train_config.json, where the fitted schedule is recorded
        # what the run writes in out_dir, named there first (rank 0 writes; a folder of the user's is refused)
        self.run_folder = open_run_folder(self.out_dir) if self.is_main else None
        if task_config is not None:
            self.record_path = self.out_dir / TRAIN_CONFIG_NAME
            if self.is_main:
                self.run_folder.claim(TRAIN_CONFIG_NAME, TRAIN_CONFIG_NAME + ".tmp")  # the .tmp: step_plan's rewrite
                self.record_path.write_text(json.dumps(dataclasses.asdict(task_config), indent=2))

        # counters (saved in trainer_state)
        self.step = 0
        self.epoch = 0
        self.best_metric: float | None = None
        self.best_step: int | None = None
        self.bad_epochs = 0
        self.early_stopped = False
        self.tokens_seen = 0
        self._stop_requested = False
        self._saved_at: tuple[int, int] | None = None
        self._log_file = None
        # the time budget and the schedule fitted to it (attnkit.training.budget)
        self._budget = find_budget_schedule(scheduler)
        self._clock = StepClock()  # a step's seconds and each recurring event's, for a time budget
        self._threads: ThreadGovernor | None = None  # fewer CPU threads while the cores are shared
        self.planned_steps: int | None = None  # a time budget's first estimate of its steps, for the shortfall
        self.last_step_lr: float | None = None  # the learning rate the last optimizer step ran at
        self._decay_from: tuple[float, float] | None = None  # (time, multiplier): a time budget's decay start
        self._validated_at: int | None = None
        self._last_valid: dict | None = None
        self.estimated_steps: int | None = None  # the steps this run's budget is expected to reach
        self._warned = False
        self._spe: tuple[int, int | None] | None = None  # (epoch, steps in it)

    def request_stop(self) -> None:
        """Ask the loop to save a checkpoint at the next step boundary and return (what SIGINT does)."""
        self._stop_requested = True

    def _rank_batches(self) -> Iterator[Any]:
        """This rank's share of the current epoch: batch ``r`` of every group of ``world_size``."""
        if self.world_size == 1:
            yield from iter(self.train_batches)
            return
        if hasattr(self.train_batches, "shard"):  # makes only this rank's batches
            yield from self.train_batches.shard(self.rank, self.world_size)
            return
        group = []
        for batch in self.train_batches:
            group.append(batch)
            if len(group) == self.world_size:
                yield group[self.rank]
                group = []

    def train_step(self, batch: Any) -> tuple[float, int, dict, float | None]:
        """One optimizer step on ``batch``: ``(loss_sum, n_tokens, metrics, grad_norm)``, summed over ranks.

        The loss is the token mean (over all ranks under DDP); gradients are clipped to
        ``run.clip_grad_norm`` and the scheduler steps once. :meth:`fit` calls this for every batch;
        benchmarks call it to time exactly what training does.
        """
        self.optimizer.zero_grad(set_to_none=True)
        batch = to_device(batch, self.device)
        with autocast(self.device, self.amp_dtype):
            out = self.loss_fn(self.model, batch)
        if not (isinstance(out, tuple) and len(out) == 3):
            raise TypeError("Trainer: loss_fn must return (loss_sum: Tensor, n_tokens: int, metrics: dict)")
        loss_sum, n_tokens, metrics = out
        if not isinstance(loss_sum, torch.Tensor) or loss_sum.dim() != 0:
            raise TypeError(f"Trainer: loss_fn's loss_sum must be a scalar tensor, got {type(loss_sum).__name__}")
        n_tokens = int(n_tokens)
        if self.world_size > 1:
            stats = torch.tensor(
                [float(n_tokens), loss_sum.detach().double().item()], dtype=torch.float64, device=self.device
            )
            all_reduce_sum(stats)
            global_tokens, global_loss_sum = int(stats[0].item()), float(stats[1].item())
            loss = loss_sum * (self.world_size / max(global_tokens, 1))
        else:
            global_tokens, global_loss_sum = n_tokens, float(loss_sum.detach().item())
            loss = loss_sum / max(n_tokens, 1)
        self.scaler.scale(loss).backward()  # the scaler is a pass-through unless fp16
        grad_norm = None
        if self.run.clip_grad_norm:  # 0: no clipping
            self.scaler.unscale_(self.optimizer)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.run.clip_grad_norm))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scheduler is not None:
            self.scheduler.step()
        metrics = dict(metrics or {})
        if self.after_step is not None:
            self.after_step(self.raw_model, metrics)
        return global_loss_sum, global_tokens, metrics, grad_norm

    def _agree_to_stop(self) -> bool:
        """Whether any rank was asked to stop (so all ranks stop at the same step)."""
        if self.world_size == 1:
            return self._stop_requested
        flag = torch.tensor([1.0 if self._stop_requested else 0.0], device=self.device)
        all_reduce_sum(flag)
        self._stop_requested = bool(flag.item() > 0)
        return self._stop_requested

    def _install_signal_handlers(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}

        def handler(signum, frame):
            if self._stop_requested:  # second signal: give up at once
                raise KeyboardInterrupt
            self._stop_requested = True
            if self.is_main:
                print(f"\nattnkit: got signal {signum}; saving a checkpoint at the next step boundary", file=sys.stderr)

        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.getsignal(sig)
            signal.signal(sig, handler)
        return previous

    def fit(self, resume: bool = False) -> dict:
        """Train until max_epochs, max_steps, early stopping or a stop request; returns a summary.

        With ``resume=True`` the newest loadable checkpoint in ``out_dir`` is restored first (a
        fresh start if there is none). The summary has ``steps``, ``epochs``, ``time_s``,
        ``tokens``, ``tokens_per_s``, ``best_metric``, ``best_step``, ``stop_reason``,
        ``last_checkpoint`` and ``best_checkpoint``.
        """
        resumed_from = self._start(resume)
        pbar = self._progress_bar()
        previous_handlers = self._install_signal_handlers()
        self.raw_model.train()
        stats = RunStats(t0=time.perf_counter())
        stop_reason = (
            "early_stopping"
            if self.early_stopped
            else "max_steps"
            if self.run.max_steps is not None and self.step >= self.run.max_steps
            else None
        )
        self._clock = StepClock.for_budget(self.run.max_time_s)
        self._threads = self._thread_governor()
        self.planned_steps = None
        self._decay_from = None  # (time, multiplier) where this run's time-budget decay began
        self._plan(stats, pbar)
        try:
            while stop_reason is None and self.epoch < self.run.epochs:
                stop_reason = self._train_epoch(stats, pbar) or self._end_epoch(pbar)
            stop_reason = stop_reason or "max_epochs"
            improved = False
            if stop_reason in ("max_time", "max_steps") and self._budget is not None:
                improved = self._final_validation(pbar)
            if improved or self._saved_at != (self.step, self.epoch):
                self.save(best=improved)
            self._report_budget()
        finally:
            if self._threads is not None and self._threads.current != self._threads.threads:
                torch.set_num_threads(self._threads.threads)  # what the run was given, for whatever follows it
            for sig, h in previous_handlers.items():
                if h is not None:
                    signal.signal(sig, h)
            if pbar is not None:
                pbar.close()
        return self._finish(stats, stop_reason, resumed_from)

    def _thread_governor(self) -> ThreadGovernor | None:
        """With ``run.adapt_threads`` on a CPU with more than one torch thread: the governor that lowers
        them while the cores are shared (:mod:`attnkit.training.threads`)."""
        if not self.run.adapt_threads or self.device.type != "cpu" or torch.get_num_threads() < 2:
            return None
        return ThreadGovernor(torch.get_num_threads())

    def _train_epoch(self, stats: RunStats, pbar) -> str | None:
        """Train on the rest of the current epoch; a stop reason if training must stop within it."""
        t_last, c_last = time.perf_counter(), time.process_time()
        for batch in self._rank_batches():
            self.last_step_lr = self.optimizer.param_groups[0]["lr"]  # what this step runs at (the budget's record)
            loss_sum, n_tok, metrics, grad_norm = self.train_step(batch)
            self.step += 1
            self.tokens_seen += n_tok
            stats.add(loss_sum, n_tok, metrics)
            if self.step % self.run.log_every == 0:
                self._log_window(stats, grad_norm, pbar)
            if pbar is not None:
                pbar.update(1)
            step_s = time.perf_counter() - t_last
            self._clock.add(step_s)  # the step and its batch; events are timed apart
            if self._threads is not None and self._threads.step(step_s, time.process_time() - c_last) is not None:
                self._log({"event": "threads", "step": self.step, **self._threads.changes[-1]})
            improved = False
            if self.run.valid_every_steps and self.valid_fn is not None and self.step % self.run.valid_every_steps == 0:
                improved = self._validate_and_log(pbar, f"step {self.step}")  # the clock's "valid" event
            if improved or self.step % self.run.save_every_steps == 0:
                t_save = time.perf_counter()
                self.save(best=improved)
                self._clock.add_event("save", time.perf_counter() - t_save)
            t_last, c_last = time.perf_counter(), time.process_time()
            if self.early_stopped:
                return "early_stopping"
            if self._agree_to_stop():
                return "interrupted"
            if self.run.max_steps is not None and self.step >= self.run.max_steps:
                return "max_steps"
            if self.run.max_time_s is not None:
                self._plan(stats, pbar)
                if time.perf_counter() - stats.t0 >= self.run.max_time_s - self._end_reserve():
                    return "max_time"  # this run's time budget; resume continues it
                b = self._budget
                if b is not None and b.state == "fitted" and self.step >= b.total_steps:
                    return "max_time"  # the schedule fitted to the time left has ended: lr 0 from here
        return None

    def _end_epoch(self, pbar) -> str | None:
        """Validate, move the data source to the next epoch and save; a stop reason if one applies."""
        t = time.perf_counter()
        try:
            return self._end_epoch_work(pbar)
        finally:  # its validation, the next epoch's batches and the checkpoint: what a time budget charges
            self._clock.add_event("epoch_end", time.perf_counter() - t)

    def _end_epoch_work(self, pbar) -> str | None:
        improved = False
        every = self.run.valid_every_epochs
        if self.valid_fn is not None and every and (self.epoch + 1) % every == 0:
            improved = self._validate_and_log(pbar, f"epoch {self.epoch}")
        self.epoch += 1
        self.train_batches.set_epoch(self.epoch)
        self.save(best=improved)
        if self.early_stopped:
            return "early_stopping"
        return "interrupted" if self._agree_to_stop() else None

    def _finish(self, stats: RunStats, stop_reason: str, resumed_from: Path | None) -> dict:
        """The run's summary (also the log's last line); closes the log."""
        elapsed = time.perf_counter() - stats.t0
        last = self.out_dir / step_dir_name(self.step)
        summary = {
            "steps": self.step,
            "epochs": self.epoch,
            "time_s": elapsed,
            "tokens": stats.tokens,
            "tokens_per_s": stats.tokens / max(elapsed, 1e-9),
            "metric_for_best": self.metric_for_best,
            "best_metric": self.best_metric,
            "best_step": self.best_step,
            "stop_reason": stop_reason,
            "resumed_from": str(resumed_from) if resumed_from else None,
            "last_checkpoint": str(last) if last.is_dir() else None,
            "best_checkpoint": str(self.out_dir / BEST_NAME) if (self.out_dir / BEST_NAME).is_dir() else None,
        }
        self._log({"event": "end", **summary})
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self._stop_requested = False
        return summary
