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
is the loop itself (epochs, steps, stop requests, and why it stopped: :class:`~attnkit.training.stop.StopReason`).
The rest of a run is held by the trainer as parts, one job a module, each with its state declared on it:
``resumer`` (:class:`~.resume.Resumer`: fresh start or resume, trainer state, checkpoints), ``validator``
(:class:`~.validation.Validator`: best metric, early stopping), ``planner`` (:class:`~.step_plan.StepPlanner`:
the step estimate and the budget schedule fitted to it), ``run_log`` (:class:`~.progress.RunLog`: the
JSON-lines log and the progress bar) and ``governor`` (:class:`~.threads.ThreadGovernor`: fewer CPU threads
while another job shares the cores).
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
from typing import Any, Literal

import torch
from torch.nn.parallel import DistributedDataParallel

from ..checks import check_fields
from ..device import autocast, resolve_device, resolve_precision, to_device
from ..paths import atomic_write_text
from .checkpoint import step_dir_name
from .distributed import all_reduce_sum, init_distributed, local_rank
from .progress import RunLog, RunStats, run_totals
from .resume import Resumer
from .run_config import RunConfig
from .run_folder import BEST_NAME, TRAIN_CONFIG_NAME, open_run_folder
from .step_plan import StepPlanner
from .stop import StopReason
from .threads import ThreadGovernor
from .validation import Validator

__all__ = ["StopReason", "Trainer", "run_totals"]


def _check_batches(train_batches: Any) -> None:
    for name in ("__iter__", "state_dict", "load_state_dict", "set_epoch"):
        if not callable(getattr(train_batches, name, None)):
            raise TypeError(
                f"Trainer: train_batches must have {name}() (a resumable batch source, see attnkit.training.data); "
                f"got {type(train_batches).__name__}"
            )


class Trainer:
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

        # what the run is given (the objects are the caller's; the trainer steps and saves them)
        self.run = run  # every run option (a RunConfig), read when used
        device = run.device
        if device is None:
            first = next(iter(model.parameters()), None)
            device = first.device if first is not None else torch.device("cpu")
        self.device: torch.device = resolve_device(device)  # where the model and every batch go
        self.amp_dtype: torch.dtype = resolve_precision(run.precision, self.device)  # autocast (fp32: none)
        # this process's rank and the number of ranks (0 and 1 outside torchrun)
        self.rank, self.world_size = init_distributed("nccl" if self.device.type == "cuda" else "gloo")
        if self.world_size > 1 and self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", local_rank())
        self.is_main: bool = self.rank == 0  # rank 0 writes checkpoints, the log and the bar
        self.raw_model: torch.nn.Module = model.to(self.device)  # the unwrapped model (saved, validated)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype == torch.float16)  # fp16 only
        if self.world_size > 1 and not isinstance(model, DistributedDataParallel):
            model = DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        self.model: torch.nn.Module = model  # what loss_fn calls: DDP-wrapped under torchrun
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.after_step = after_step
        self.train_batches = train_batches
        self.valid_fn = valid_fn
        self.scheduler = scheduler
        self.out_dir = Path(run.out_dir)
        self.extra_files = dict(extra_files or {})  # copied into every checkpoint
        if model_config is None:
            to_config = getattr(self.raw_model, "to_config", None)
            model_config = to_config() if callable(to_config) else {}
        if dataclasses.is_dataclass(model_config) and not isinstance(model_config, type):
            model_config = dataclasses.asdict(model_config)
        self.model_config = dict(model_config)  # every checkpoint's config.json
        # what the run writes in out_dir, named there first (rank 0 writes; a folder of the user's is refused)
        self.run_folder = open_run_folder(self.out_dir) if self.is_main else None
        record_path = None  # train_config.json, where the fitted schedule is recorded
        if task_config is not None:
            record_path = self.out_dir / TRAIN_CONFIG_NAME
            if self.is_main:
                self.run_folder.claim(TRAIN_CONFIG_NAME, TRAIN_CONFIG_NAME + ".tmp")  # the .tmp: the planner's rewrite
                atomic_write_text(
                    record_path,
                    json.dumps(dataclasses.asdict(task_config), indent=2),
                    temporary=record_path.with_name(TRAIN_CONFIG_NAME + ".tmp"),
                )

        # the loop's counters (the first three are saved in trainer_state)
        self.step = 0  # optimizer steps made
        self.epoch = 0  # whole passes over the training data made
        self.tokens_seen = 0  # the tokens loss_fn counted, over all ranks
        self.last_step_lr: float | None = None  # the learning rate the last optimizer step ran at
        self._stop_requested = False  # a signal or request_stop(): stop at the next step boundary

        # the run's parts, each holding its own state
        self.run_log = RunLog()  # the JSON-lines log and the progress bar (rank 0)
        self.validator = Validator(run, metric_for_best, bool(greater_is_better))  # best metric, patience
        self.planner = StepPlanner(  # the step estimate, the budget schedule fitted to it, the run's record
            run, scheduler, train_batches, self.world_size, self.is_main, self.run_log, record_path
        )
        self.resumer = Resumer()  # start or resume, trainer_state, checkpoints
        self.governor: ThreadGovernor | None = None  # fewer CPU threads while the cores are shared (per fit)

    # what the parts hold, under the names the trainer always had
    @property
    def metric_for_best(self) -> str:
        """The ``valid_fn`` metric that picks ``out_dir/best`` and counts towards ``run.patience``."""
        return self.validator.metric_for_best

    @property
    def greater_is_better(self) -> bool:
        return self.validator.greater_is_better

    @property
    def best_metric(self) -> float | None:
        """The best ``metric_for_best`` seen (None before the first validation)."""
        return self.validator.best_metric

    @property
    def best_step(self) -> int | None:
        """The step ``best_metric`` was seen at."""
        return self.validator.best_step

    @property
    def bad_epochs(self) -> int:
        """Validations in a row without improvement."""
        return self.validator.bad_epochs

    @property
    def early_stopped(self) -> bool:
        """Whether ``run.patience`` validations without improvement stopped the run."""
        return self.validator.early_stopped

    @property
    def planned_steps(self) -> int | None:
        """A time budget's first settled estimate of its steps (what a shortfall is measured against)."""
        return self.planner.planned_steps

    @property
    def estimated_steps(self) -> int | None:
        """The steps this run's budget is expected to reach (the latest estimate)."""
        return self.planner.estimated_steps

    @property
    def record_path(self) -> Path | None:
        """``out_dir/train_config.json``, the run's record (None without a ``task_config``)."""
        return self.planner.record_path

    @record_path.setter
    def record_path(self, path: Path | None) -> None:
        self.planner.record_path = path

    def request_stop(self) -> None:
        """Ask the loop to save a checkpoint at the next step boundary and return (what SIGINT does)."""
        self._stop_requested = True

    def save(self, *, best: bool = False) -> Path:
        """Write ``out_dir/step-XXXXXXXX`` (and ``out_dir/best`` if ``best``); collective under DDP."""
        return self.resumer.save(self, best=best)

    def trainer_state(self) -> dict:
        """Everything besides the weights that exact resume needs (collective under DDP)."""
        return self.resumer.trainer_state(self)

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
        """Train until max_epochs, max_steps, max_time_s, early stopping or a stop request; returns a summary.

        With ``resume=True`` the newest loadable checkpoint in ``out_dir`` is restored first (a
        fresh start if there is none). The summary has ``steps``, ``epochs``, ``time_s``,
        ``tokens``, ``tokens_per_s``, ``best_metric``, ``best_step``, ``stop_reason`` (a
        :class:`StopReason`'s value), ``last_checkpoint`` and ``best_checkpoint``.
        """
        resumed_from = self.resumer.start(self, resume)
        self._open_progress_bar()
        previous_handlers = self._install_signal_handlers()
        self.raw_model.train()
        stats = RunStats(t0=time.perf_counter())
        self.planner.start(stats.t0, has_valid_fn=self.valid_fn is not None)
        self.governor = self._thread_governor()
        stop = self._stop_reason("start")
        self.planner.plan(self.step, self.epoch)
        try:
            while stop is None:
                stop = self._train_epoch(stats) or self._end_epoch()
            improved = False
            if stop.ends_a_budget and self.planner.budget is not None:
                improved = self._final_validation()
            if improved or self.resumer.saved_at != (self.step, self.epoch):
                self.save(best=improved)
            self.planner.report_budget(self.step, self.last_step_lr, self.governor)
        finally:
            if self.governor is not None and self.governor.current != self.governor.threads:
                torch.set_num_threads(self.governor.threads)  # what the run was given, for whatever follows it
            for sig, h in previous_handlers.items():
                if h is not None:
                    signal.signal(sig, h)
            self.run_log.close_bar()
        return self._finish(stats, stop, resumed_from)

    def _stop_reason(self, at: Literal["start", "step", "epoch_end"]) -> StopReason | None:
        """Why the run stops here (at the start of ``fit``, after a step, at an epoch's end), or None: in this
        order, patience ran out; a stop was requested (not checked at the start: a run makes a step first);
        the step limit; the time budget (after a step only: it first re-plans with that step's time); the
        epoch limit.

        Every rank takes the same decision at the same point: the validations' metrics are broadcast, a
        stop request is agreed (a collective call, on every rank), the time budget follows rank 0's plan.
        """
        if self.validator.early_stopped:
            return StopReason.EARLY_STOPPING
        if at != "start" and self._agree_to_stop():
            return StopReason.INTERRUPTED
        if self.run.max_steps is not None and self.step >= self.run.max_steps:
            return StopReason.MAX_STEPS
        if at == "step" and self.run.max_time_s is not None:
            self.planner.plan(self.step, self.epoch)  # the estimate and the schedule follow the time left
            if self.planner.time_is_up(self.step):
                return StopReason.MAX_TIME  # this run's time budget; resume continues it
        if self.epoch >= self.run.epochs:
            return StopReason.MAX_EPOCHS
        return None

    def _thread_governor(self) -> ThreadGovernor | None:
        """With ``run.adapt_threads`` on a CPU with more than one torch thread: the governor that lowers
        them while the cores are shared (:mod:`attnkit.training.threads`)."""
        if not self.run.adapt_threads or self.device.type != "cpu" or torch.get_num_threads() < 2:
            return None
        return ThreadGovernor(torch.get_num_threads())

    def _open_progress_bar(self) -> None:
        """A bar over the steps this run will take by its epoch and step limits (rank 0, when ``progress``)."""
        if not (self.run.progress and self.is_main):
            return
        spe = self.planner.steps_per_epoch(self.epoch)
        total = None if spe is None else spe * self.run.epochs
        if self.run.max_steps is not None:
            total = self.run.max_steps if total is None else min(total, self.run.max_steps)
        self.run_log.open_bar(total, self.step)

    def _train_epoch(self, stats: RunStats) -> StopReason | None:
        """Train on the rest of the current epoch; a stop reason if training must stop within it."""
        clock = self.planner.clock
        t_last, c_last = time.perf_counter(), time.process_time()
        for batch in self._rank_batches():
            self.last_step_lr = self.optimizer.param_groups[0]["lr"]  # what this step runs at (the budget's record)
            loss_sum, n_tok, metrics, grad_norm = self.train_step(batch)
            self.step += 1
            self.tokens_seen += n_tok
            stats.add(loss_sum, n_tok, metrics)
            if self.step % self.run.log_every == 0:
                self._log_window(stats, grad_norm)
            self.run_log.advance()
            step_s = time.perf_counter() - t_last
            clock.add(step_s)  # the step and its batch; events are timed apart
            if self.governor is not None and self.governor.step(step_s, time.process_time() - c_last) is not None:
                self.run_log.write({"event": "threads", "step": self.step, **self.governor.changes[-1]})
            improved = False
            if self.run.valid_every_steps and self.valid_fn is not None and self.step % self.run.valid_every_steps == 0:
                improved = self._validate(f"step {self.step}")  # the clock's "valid" event
            if improved or self.step % self.run.save_every_steps == 0:
                t_save = time.perf_counter()
                self.save(best=improved)
                clock.add_event("save", time.perf_counter() - t_save)
            t_last, c_last = time.perf_counter(), time.process_time()
            stop = self._stop_reason("step")
            if stop is not None:
                return stop
        return None

    def _end_epoch(self) -> StopReason | None:
        """Validate, move the data source to the next epoch and save; a stop reason if one applies. Its
        seconds (the validation, the next epoch's batches, the checkpoint) are what a time budget charges."""
        t = time.perf_counter()
        try:
            improved = False
            every = self.run.valid_every_epochs
            if self.valid_fn is not None and every and (self.epoch + 1) % every == 0:
                improved = self._validate(f"epoch {self.epoch}")
            self.epoch += 1
            self.train_batches.set_epoch(self.epoch)
            self.save(best=improved)
            return self._stop_reason("epoch_end")
        finally:
            self.planner.clock.add_event("epoch_end", time.perf_counter() - t)

    def _validate(self, label: str) -> bool:
        """Validate (:class:`~.validation.Validator`), log it with its seconds (``valid_s``), show it above the
        bar as ``label: metric=value, ...``; whether ``metric_for_best`` improved."""
        t = time.perf_counter()
        metrics = self.validator.evaluate(
            self.valid_fn, self.raw_model, device=self.device, amp_dtype=self.amp_dtype, is_main=self.is_main
        )
        improved = self.validator.judge(metrics, self.step)
        seconds = time.perf_counter() - t
        self.planner.clock.add_event("valid", seconds)  # for a time budget's estimate
        self.run_log.write(
            {
                "event": "valid",
                "step": self.step,
                "epoch": self.epoch,
                **metrics,
                "best_metric": self.validator.best_metric,
                "bad_epochs": self.validator.bad_epochs,
                "valid_s": round(seconds, 3),
            }
        )
        self.run_log.say(f"{label}: " + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
        return improved

    def _final_validation(self) -> bool:
        """Validate a budget's last step (once, where the run validates at all): a fitted schedule ends there
        at lr 0, so ``best`` is the finished model; whether it improved."""
        if self.valid_fn is None or not self.validator.due_at_budget_end(self.step):
            return False
        return self._validate(f"step {self.step} (end of budget)")

    def _log_window(self, stats: RunStats, grad_norm: float | None) -> None:
        """One ``train`` line of the log and the progress line (the window since the last one)."""
        self.run_log.log_window(
            stats,
            step=self.step,
            epoch=self.epoch,
            lr=self.optimizer.param_groups[0]["lr"],
            grad_norm=grad_norm,
            estimated_steps=self.planner.estimated_steps,
            timed=self.run.max_time_s is not None,
            last_valid=self.validator.last_metrics,
            metric_for_best=self.validator.metric_for_best,
            best_metric=self.validator.best_metric,
        )

    def _finish(self, stats: RunStats, stop: StopReason, resumed_from: Path | None) -> dict:
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
            "stop_reason": stop.value,
            "resumed_from": str(resumed_from) if resumed_from else None,
            "last_checkpoint": str(last) if last.is_dir() else None,
            "best_checkpoint": str(self.out_dir / BEST_NAME) if (self.out_dir / BEST_NAME).is_dir() else None,
        }
        self.run_log.write({"event": "end", **summary})
        self.run_log.close()
        self._stop_requested = False
        return summary
