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
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from ..checks import NON_NEGATIVE, POSITIVE, POSITIVE_INT, check
from ..device import autocast, resolve_device, resolve_precision, to_device
from .budget import (
    PROBE_STEPS,
    SHORT_RUN_EPOCHS,
    StepClock,
    apply_schedule,
    estimate_total_steps,
    find_budget_schedule,
    unreachable_warmup,
)
from .checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    load_into,
    remove_stale_temporaries,
    rotate_checkpoints,
    save_checkpoint,
    step_dir_name,
)
from .distributed import all_gather_object, all_reduce_sum, barrier, broadcast_object, init_distributed, local_rank
from .rng import get_rng_state, set_rng_state
from .run_config import RunConfig
from .schedules import InverseSqrtWarmup

__all__ = ["Trainer", "run_totals"]

LOG_NAME = "train_log.jsonl"
TRAIN_CONFIG_NAME = "train_config.json"  # the task config a run was started with
BEST_NAME = "best"


def run_totals(out_dir) -> dict:
    """A whole run's training facts from its ``train_log.jsonl``: every ``end`` event counts (a resumed
    run has one per piece), so ``tokens_per_s`` = all target tokens / all training seconds.
    ``steps``, ``epochs`` and ``best_metric`` are the last piece's."""
    path = Path(out_dir) / LOG_NAME
    if not path.is_file():
        raise FileNotFoundError(f"out_dir: {out_dir} has no {LOG_NAME} (not a training run folder)")
    ends = [e for e in map(json.loads, path.read_text().splitlines()) if e.get("event") == "end"]
    time_s, tokens = sum(e["time_s"] for e in ends), sum(e["tokens"] for e in ends)
    last = ends[-1] if ends else {}
    return {
        "time_s": time_s,
        "tokens": tokens,
        "tokens_per_s": tokens / time_s if time_s > 0 else None,
        "steps": last.get("steps"),
        "epochs": last.get("epochs"),
        "best_metric": last.get("best_metric"),
    }


def _check_batches(train_batches: Any) -> None:
    for name in ("__iter__", "state_dict", "load_state_dict", "set_epoch"):
        if not callable(getattr(train_batches, name, None)):
            raise TypeError(
                f"Trainer: train_batches must have {name}() (a resumable batch source, see attnkit.training.data); "
                f"got {type(train_batches).__name__}"
            )


class Trainer:
    """Train ``model`` with ``optimizer`` on ``train_batches`` (see the module docstring).

    Arguments (all but model and optimizer keyword-only):
        loss_fn: ``loss_fn(model, batch) -> (loss_sum: Tensor, n_tokens: int, metrics: dict)``;
            ``model`` is the (possibly DDP-wrapped) training module; call it, do not unwrap it.
        train_batches: a resumable batch source (``__iter__``, ``set_epoch``, ``state_dict``,
            ``load_state_dict``; see :class:`attnkit.training.data.ListBatches`).
        valid_fn: ``valid_fn(model) -> dict`` of metrics, called at the end of every epoch on the
            unwrapped model in eval mode under ``torch.no_grad`` (on rank 0 only under DDP).
        scheduler: stepped once per optimizer step; saved and restored.
        clip_grad_norm: max global gradient L2 norm; None or 0 disables clipping.
        out_dir: where checkpoints and ``train_log.jsonl`` go.
        save_every_steps: checkpoint period in optimizer steps (also saved at each epoch end).
        keep_last: step checkpoints kept (``best`` is kept separately).
        max_epochs / max_steps: stop at whichever comes first (max_steps None: no step limit).
        max_time_s: stop (with a checkpoint) once this run has trained this many seconds; a
            later ``fit(resume=True)`` continues exactly where it stopped. A
            :class:`~attnkit.training.budget.BudgetSchedule` scheduler is fitted to the steps the budget
            (time, steps or epochs) reaches, and the budget's last step is validated.
        valid_every_steps: also validate every this many steps (patience then counts validations).
        early_stopping_patience: stop after this many epochs without improving ``metric_for_best``.
        metric_for_best / greater_is_better: which ``valid_fn`` metric picks ``out_dir/best``.
        seed: seeds python, numpy and torch (torch with ``seed + rank``) at a fresh start.
        log_every: steps between ``train_log.jsonl`` lines (and progress-bar updates of the loss).
        progress: show a tqdm bar (rank 0 only).
        extra_files: ``{name: bytes}`` copied into every checkpoint (tokenizer files).
        config: the model config written as config.json; default ``model.to_config()`` if the
            model has one, else ``{}`` (``model_type`` is filled in from the registry).
        after_step: ``after_step(model, metrics)`` after every optimizer step, with the unwrapped
            model and the loss's metrics: state that training moves outside the optimizer (e.g. a
            REINFORCE baseline) is updated here, so the loss stays a pure function.
        device: where to train (``None``: where the model's parameters already are; ``"auto"``: cuda,
            then mps, then cpu). Under torchrun on CUDA each rank takes ``cuda:LOCAL_RANK``.
        precision: ``"fp32"``, ``"bf16"``, ``"fp16"`` (autocast; fp16 with a gradient scaler) or ``"auto"``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        loss_fn: Callable[[torch.nn.Module, Any], tuple[torch.Tensor, int, dict]],
        train_batches: Any,
        valid_fn: Callable[[torch.nn.Module], dict] | None = None,
        scheduler: Any = None,
        clip_grad_norm: float | None = 1.0,
        out_dir: str | os.PathLike,
        save_every_steps: int,
        keep_last: int = 3,
        max_epochs: int,
        max_steps: int | None = None,
        max_time_s: float | None = None,
        valid_every_steps: int | None = None,
        early_stopping_patience: int | None = None,
        metric_for_best: str = "valid_loss",
        greater_is_better: bool = False,
        seed: int,
        log_every: int,
        progress: bool = True,
        extra_files: Mapping[str, bytes] | None = None,
        config: Mapping[str, Any] | None = None,
        after_step: Callable[[torch.nn.Module, dict], None] | None = None,
        device: str | torch.device | None = None,
        precision: str = "fp32",
    ):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"Trainer: model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"Trainer: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if not callable(loss_fn):
            raise TypeError("Trainer: loss_fn must be callable (model, batch) -> (loss_sum, n_tokens, metrics)")
        if valid_fn is not None and not callable(valid_fn):
            raise TypeError("Trainer: valid_fn must be callable (model) -> dict or None")
        _check_batches(train_batches)
        for name, value, allow_none in (
            ("save_every_steps", save_every_steps, False),
            ("keep_last", keep_last, False),
            ("max_epochs", max_epochs, False),
            ("log_every", log_every, False),
            ("max_steps", max_steps, True),
            ("valid_every_steps", valid_every_steps, True),
            ("early_stopping_patience", early_stopping_patience, True),
        ):
            check(f"Trainer: {name}", value, POSITIVE_INT, allow_none=allow_none)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"Trainer: seed must be an int, got {type(seed).__name__}")
        check("Trainer: clip_grad_norm", clip_grad_norm, NON_NEGATIVE, allow_none=True)
        check("Trainer: max_time_s", max_time_s, POSITIVE, allow_none=True)
        if early_stopping_patience is not None and valid_fn is None:
            raise ValueError("Trainer: early_stopping_patience needs a valid_fn to compute metric_for_best")

        if device is None:
            first = next(iter(model.parameters()), None)
            device = first.device if first is not None else torch.device("cpu")
        self.device = resolve_device(device)
        self.amp_dtype = resolve_precision(precision, self.device)
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
        if after_step is not None and not callable(after_step):
            raise TypeError("Trainer: after_step must be callable (model, metrics) or None")
        self.after_step = after_step
        self.train_batches = train_batches
        self.valid_fn = valid_fn
        self.scheduler = scheduler
        self.clip_grad_norm = clip_grad_norm or None
        self.out_dir = Path(out_dir)
        self.save_every_steps = save_every_steps
        self.keep_last = keep_last
        self.max_epochs = max_epochs
        self.max_steps = max_steps
        self.max_time_s = max_time_s
        self.valid_every_steps = valid_every_steps
        self.early_stopping_patience = early_stopping_patience
        self.metric_for_best = metric_for_best
        self.greater_is_better = bool(greater_is_better)
        self.seed = seed
        self.log_every = log_every
        self.progress = progress
        self.extra_files = dict(extra_files or {})
        if config is None:
            to_config = getattr(self.raw_model, "to_config", None)
            config = to_config() if callable(to_config) else {}
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            config = dataclasses.asdict(config)
        self.config = dict(config)

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
        self._clock = StepClock()
        self._valid_seconds = 0.0  # the last validation's duration
        self._validated_at: int | None = None
        self._last_valid: dict | None = None
        self.estimated_steps: int | None = None  # the steps this run's budget is expected to reach
        self._warned = False
        self.record_path: Path | None = None  # train_config.json, where the fitted schedule is recorded
        self._spe: tuple[int, int | None] | None = None  # (epoch, steps in it)

    @classmethod
    def from_config(
        cls,
        run: RunConfig,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        task_config: Any = None,
        **task: Any,
    ) -> Trainer:
        """A trainer for one task's run: every run option comes from ``run`` (a :class:`RunConfig`), and
        ``task`` gives what only the task knows (``loss_fn``, ``train_batches``, ``valid_fn``,
        ``scheduler``, ``metric_for_best``, ``greater_is_better``, ``extra_files``, ``after_step``).
        ``task_config`` (a dataclass, the task's whole config) is written to ``run.out_dir/train_config.json``."""
        if run.out_dir is None:
            raise ValueError("Trainer.from_config: run.out_dir must be set (the task config sets its default)")
        out = Path(run.out_dir)
        if task_config is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / TRAIN_CONFIG_NAME).write_text(json.dumps(dataclasses.asdict(task_config), indent=2))
        trainer = cls(
            model,
            optimizer,
            out_dir=out,
            clip_grad_norm=run.clip_grad_norm,
            save_every_steps=run.save_every_steps,
            keep_last=run.keep_last,
            max_epochs=run.epochs,
            max_steps=run.max_steps,
            max_time_s=run.max_time_s,
            valid_every_steps=run.valid_every_steps,
            early_stopping_patience=run.patience,
            seed=run.seed,
            log_every=run.log_every,
            progress=run.progress,
            device=run.device,
            precision=run.precision,
            **task,
        )
        if task_config is not None:
            trainer.record_path = out / TRAIN_CONFIG_NAME
        return trainer

    # ------------------------------------------------------------------ public controls

    def request_stop(self) -> None:
        """Ask the loop to save a checkpoint at the next step boundary and return (what SIGINT does)."""
        self._stop_requested = True

    # ------------------------------------------------------------------ state

    def trainer_state(self) -> dict:
        """Everything besides the weights that exact resume needs (collective under DDP)."""
        rng = all_gather_object(get_rng_state())
        return {
            "step": self.step,
            "epoch": self.epoch,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "sampler": self.train_batches.state_dict(),
            "rng": rng[self.rank],
            "rng_per_rank": rng,
            "world_size": self.world_size,
            "best_metric": self.best_metric,
            "best_step": self.best_step,
            "metric_for_best": self.metric_for_best,
            "bad_epochs": self.bad_epochs,
            "early_stopped": self.early_stopped,
            "tokens_seen": self.tokens_seen,
            "seed": self.seed,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
        }

    def _restore(self, ckpt_path: Path) -> None:
        ckpt = load_checkpoint(ckpt_path)
        ts = ckpt.trainer_state
        if ts is None:
            raise CheckpointError(f"checkpoint {ckpt_path} has no trainer_state.pt; cannot resume from it")
        load_into(self.raw_model, ckpt.state_dict, source=ckpt.path)
        try:
            self.optimizer.load_state_dict(ts["optimizer"])
            if self.scheduler is not None:
                if ts.get("scheduler") is None:
                    raise CheckpointError(f"checkpoint {ckpt_path}: trainer_state has no scheduler state")
                self.scheduler.load_state_dict(ts["scheduler"])
            self.train_batches.load_state_dict(ts["sampler"])
            if self.scaler.is_enabled() and ts.get("scaler"):
                self.scaler.load_state_dict(ts["scaler"])
        except (KeyError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"checkpoint {ckpt_path}: trainer_state.pt does not fit this run: {e}") from e
        per_rank = ts.get("rng_per_rank")
        if per_rank is not None and len(per_rank) == self.world_size:
            set_rng_state(per_rank[self.rank])
        else:  # world size changed: the run goes on, but not bit-exactly
            set_rng_state(ts["rng"])
            torch.manual_seed(self.seed + 7919 * ts["step"] + self.rank)
        self.step = int(ts["step"])
        self.epoch = int(ts["epoch"])
        self.best_metric = ts.get("best_metric")
        self.best_step = ts.get("best_step")
        self.bad_epochs = int(ts.get("bad_epochs", 0))
        self.early_stopped = bool(ts.get("early_stopped", False))
        self.tokens_seen = int(ts.get("tokens_seen", 0))
        self._saved_at = (self.step, self.epoch)

    def _find_resume_checkpoint(self) -> Path | None:
        """Newest step checkpoint that loads; corrupt ones are reported and skipped."""
        for path in reversed(list_checkpoints(self.out_dir)):
            try:
                load_checkpoint(path, load_trainer_state=False)
                return path
            except CheckpointError as e:
                if self.is_main:
                    print(f"attnkit: skipping unusable checkpoint: {e}", file=sys.stderr)
        return None

    def save(self, *, best: bool = False) -> Path:
        """Write ``out_dir/step-XXXXXXXX`` (and ``out_dir/best`` if ``best``); collective under DDP."""
        state = self.trainer_state()  # collective (RNG gather): every rank calls it
        path = self.out_dir / step_dir_name(self.step)
        if self.is_main:
            save_checkpoint(
                path, model=self.raw_model, config=self.config, trainer_state=state, extra_files=self.extra_files
            )
            if best:
                save_checkpoint(
                    self.out_dir / BEST_NAME,
                    model=self.raw_model,
                    config=self.config,
                    trainer_state=state,
                    extra_files=self.extra_files,
                )
            rotate_checkpoints(self.out_dir, self.keep_last)
            self._record_schedule()
            self._log({"event": "checkpoint", "step": self.step, "epoch": self.epoch, "path": str(path), "best": best})
        barrier()
        self._saved_at = (self.step, self.epoch)
        return path

    # ------------------------------------------------------------------ logging

    def _log(self, record: dict) -> None:
        if not self.is_main or self._log_file is None:
            return
        record = {"time": round(time.time(), 3), **record}
        self._log_file.write(json.dumps(record, default=float) + "\n")
        self._log_file.flush()

    # ------------------------------------------------------------------ the loop

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

    def train_step(self, batch: Any) -> tuple[float, int, dict, float | None]:
        """One optimizer step on ``batch``: ``(loss_sum, n_tokens, metrics, grad_norm)``, summed over ranks.

        The loss is the token mean (over all ranks under DDP); gradients are clipped to
        ``clip_grad_norm`` and the scheduler steps once. :meth:`fit` calls this for every batch;
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
        if self.clip_grad_norm is not None:
            self.scaler.unscale_(self.optimizer)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.clip_grad_norm))
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

    def _validate(self) -> tuple[dict, bool]:
        """Run valid_fn (rank 0), share the metrics, update best/patience; returns (metrics, improved)."""
        metrics = None
        if self.is_main:
            was_training = self.raw_model.training
            self.raw_model.eval()
            with torch.no_grad():
                metrics = self.valid_fn(self.raw_model)
            self.raw_model.train(was_training)
            if not isinstance(metrics, Mapping):
                raise TypeError(f"Trainer: valid_fn must return a dict of metrics, got {type(metrics).__name__}")
            metrics = {k: float(v) for k, v in metrics.items()}
        metrics = broadcast_object(metrics)
        if self.metric_for_best not in metrics:
            if self.early_stopping_patience is not None:
                raise ValueError(
                    f"Trainer: metric_for_best={self.metric_for_best!r} is not among valid_fn's metrics {sorted(metrics)}"
                )
            return metrics, False
        value = metrics[self.metric_for_best]
        improved = self.best_metric is None or (
            value > self.best_metric if self.greater_is_better else value < self.best_metric
        )
        if improved:
            self.best_metric, self.best_step, self.bad_epochs = value, self.step, 0
        else:
            self.bad_epochs += 1
            if self.early_stopping_patience is not None and self.bad_epochs >= self.early_stopping_patience:
                self.early_stopped = True
        return metrics, improved

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
        run = _RunStats(t0=time.perf_counter())
        stop_reason = (
            "early_stopping"
            if self.early_stopped
            else "max_steps"
            if self.max_steps is not None and self.step >= self.max_steps
            else None
        )
        self._clock = StepClock()
        self._plan(run, pbar)
        try:
            while stop_reason is None and self.epoch < self.max_epochs:
                stop_reason = self._train_epoch(run, pbar) or self._end_epoch(pbar)
            stop_reason = stop_reason or "max_epochs"
            improved = False
            if stop_reason in ("max_time", "max_steps") and self._budget is not None:
                improved = self._final_validation(pbar)
            if improved or self._saved_at != (self.step, self.epoch):
                self.save(best=improved)
        finally:
            for sig, h in previous_handlers.items():
                if h is not None:
                    signal.signal(sig, h)
            if pbar is not None:
                pbar.close()
        return self._finish(run, stop_reason, resumed_from)

    def _start(self, resume: bool) -> Path | None:
        """Prepare ``out_dir``; restore the newest checkpoint (``resume``) or seed a fresh start; open the log."""
        if self.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(self.out_dir)
        barrier()
        resumed_from = self._find_resume_checkpoint() if resume else None
        if resumed_from is not None:
            self._restore(resumed_from)
        else:
            random.seed(self.seed)
            np.random.seed(self.seed)
            torch.manual_seed(self.seed + self.rank)
            self.step = self.epoch = 0
            self.train_batches.set_epoch(0)
        if self.is_main:
            # open for the whole run (each record flushed as written); closed at the end of fit()
            self._log_file = open(self.out_dir / LOG_NAME, "a")  # noqa: SIM115
        self._log(
            {
                "event": "resume" if resumed_from else "start",
                "step": self.step,
                "epoch": self.epoch,
                "from": str(resumed_from) if resumed_from else None,
                "world_size": self.world_size,
            }
        )
        return resumed_from

    def _progress_bar(self):
        """A tqdm bar over the steps this run will take (rank 0, when ``progress``), or None."""
        if not (self.progress and self.is_main):
            return None
        from tqdm import tqdm

        spe = self._steps_per_epoch()
        total = None if spe is None else spe * self.max_epochs
        if self.max_steps is not None:
            total = self.max_steps if total is None else min(total, self.max_steps)
        return tqdm(total=total, initial=self.step, unit="step", dynamic_ncols=True, file=sys.stderr)

    def _train_epoch(self, run: _RunStats, pbar) -> str | None:
        """Train on the rest of the current epoch; a stop reason if training must stop within it."""
        for batch in self._rank_batches():
            t_step = time.perf_counter()
            loss_sum, n_tok, metrics, grad_norm = self.train_step(batch)
            self._clock.add(time.perf_counter() - t_step)
            self.step += 1
            self.tokens_seen += n_tok
            run.add(loss_sum, n_tok, metrics)
            if self.step % self.log_every == 0:
                self._log_window(run, grad_norm, pbar)
            if pbar is not None:
                pbar.update(1)
            improved = False
            if self.valid_every_steps and self.valid_fn is not None and self.step % self.valid_every_steps == 0:
                improved = self._validate_and_log(pbar, f"step {self.step}")
            if improved or self.step % self.save_every_steps == 0:
                self.save(best=improved)
            if self.early_stopped:
                return "early_stopping"
            if self._agree_to_stop():
                return "interrupted"
            if self.max_steps is not None and self.step >= self.max_steps:
                return "max_steps"
            if self.max_time_s is not None:
                self._plan(run, pbar)
                if time.perf_counter() - run.t0 >= self.max_time_s:
                    return "max_time"  # this run's time budget; resume continues it
                b = self._budget
                if b is not None and b.state == "fitted" and self.step >= b.total_steps:
                    return "max_time"  # the schedule fitted to the time left has ended: lr 0 from here
        return None

    def _log_window(self, run: _RunStats, grad_norm: float | None, pbar) -> None:
        """One ``train`` line of the log (the mean loss and tokens/s since the last one)."""
        now = time.perf_counter()
        rec = {
            "event": "train",
            "step": self.step,
            "epoch": self.epoch,
            "loss": run.win_loss / max(run.win_tokens, 1),
            "tokens_per_s": run.win_tokens / max(now - run.win_t, 1e-9),
            "lr": self.optimizer.param_groups[0]["lr"],
            "grad_norm": grad_norm,
            **{k: v / run.win_steps for k, v in run.win_metrics.items()},
        }
        self._log(rec)
        if pbar is not None:
            pbar.set_postfix(self._postfix(rec), refresh=False)
        run.new_window(now)

    def _postfix(self, rec: dict) -> dict:
        """The progress line's fields: loss, tokens/s, epoch, lr, the last validation's score (and the best),
        and the steps the budget is expected to leave."""
        post = {"loss": f"{rec['loss']:.4f}", "tok_s": f"{rec['tokens_per_s']:.0f}", "epoch": self.epoch}
        post["lr"] = f"{rec['lr']:.2e}"
        if self._last_valid is not None and self.metric_for_best in self._last_valid:
            value = self._last_valid[self.metric_for_best]
            post[self.metric_for_best] = f"{value:.4g} (best {self.best_metric:.4g})"
        if self.estimated_steps is not None:
            post["steps_left"] = max(self.estimated_steps - self.step, 0)
        return post

    def _end_epoch(self, pbar) -> str | None:
        """Validate, move the data source to the next epoch and save; a stop reason if one applies."""
        improved = False
        if self.valid_fn is not None:
            improved = self._validate_and_log(pbar, f"epoch {self.epoch}")
        self.epoch += 1
        self.train_batches.set_epoch(self.epoch)
        self.save(best=improved)
        if self.early_stopped:
            return "early_stopping"
        return "interrupted" if self._agree_to_stop() else None

    def _validate_and_log(self, pbar, label: str) -> bool:
        """Validate, log it, show it; whether the metric improved. The time it took is what later
        validations are expected to take, for the budget's step estimate."""
        t = time.perf_counter()
        metrics, improved = self._validate()
        self._valid_seconds = time.perf_counter() - t
        self._validated_at = self.step
        self._last_valid = metrics
        self._log(
            {
                "event": "valid",
                "step": self.step,
                "epoch": self.epoch,
                **metrics,
                "best_metric": self.best_metric,
                "bad_epochs": self.bad_epochs,
            }
        )
        if pbar is not None:
            pbar.write(f"{label}: " + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
        return improved

    def _final_validation(self, pbar) -> bool:
        """A budget's last step is where a fitted schedule ends (lr 0), so validate it (once) for ``best``."""
        if self.valid_fn is None or self._validated_at == self.step:
            return False
        return self._validate_and_log(pbar, f"step {self.step} (end of budget)")

    # ------------------------------------------------------------------ the budget

    def _step_cap(self) -> int | None:
        """The most steps this run can take by its step and epoch limits (None: unknown)."""
        caps = []
        spe = self._steps_per_epoch()
        if spe:
            caps.append(spe * self.max_epochs)
        if self.max_steps is not None:
            caps.append(self.max_steps)
        return min(caps) if caps else None

    def _estimate_steps(self, run: _RunStats) -> int | None:
        """The steps the run is expected to reach: its step cap; with a time budget, also what the
        measured speed fits in the time left (None until :data:`PROBE_STEPS` steps are timed)."""
        cap = self._step_cap()
        if self.max_time_s is None:
            return cap
        sps = self._clock.seconds_per_step()
        if sps is None or self._clock.seen < PROBE_STEPS:
            return None
        spe = self._steps_per_epoch()
        return estimate_total_steps(
            self.step,
            seconds_left=self.max_time_s - (time.perf_counter() - run.t0),
            seconds_per_step=sps,
            valid_seconds=self._valid_seconds if self.valid_fn is not None else 0.0,
            steps_per_epoch=spe,
            step_in_epoch=max(self.step - self.epoch * spe, 0) if spe else 0,
            cap=cap,
        )

    def _plan(self, run: _RunStats, pbar) -> None:
        """Estimate the steps the budget reaches; fit a :class:`~attnkit.training.budget.BudgetSchedule` to
        them (``auto``: only a run that ends within ``SHORT_RUN_EPOCHS`` epochs) and re-fit it as the
        estimate moves; warn once when a recipe's warm-up cannot finish within the budget."""
        total = self._estimate_steps(run)
        if self.world_size > 1:  # every rank follows rank 0's estimate: the same schedule, the same last step
            total = broadcast_object(total)
        if total is None:
            return
        self.estimated_steps = total
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
        if self.record_path is None or not self.is_main or not self.record_path.is_file():
            return
        record = json.loads(self.record_path.read_text())
        if self._budget is not None:
            schedule = self._budget.describe()
        else:
            fns = getattr(self.scheduler, "lr_lambdas", None) or [None]
            schedule = {"schedule": "recipe", "kind": type(fns[0]).__name__ if fns[0] is not None else None}
        record["schedule"] = {**schedule, "estimated_steps": self.estimated_steps}
        tmp = self.record_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=2))
        os.replace(tmp, self.record_path)

    def _finish(self, run: _RunStats, stop_reason: str, resumed_from: Path | None) -> dict:
        """The run's summary (also the log's last line); closes the log."""
        elapsed = time.perf_counter() - run.t0
        last = self.out_dir / step_dir_name(self.step)
        summary = {
            "steps": self.step,
            "epochs": self.epoch,
            "time_s": elapsed,
            "tokens": run.tokens,
            "tokens_per_s": run.tokens / max(elapsed, 1e-9),
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


@dataclasses.dataclass
class _RunStats:
    """Counters of one ``fit`` call: its start, its tokens, and the window since the last log line."""

    t0: float
    tokens: int = 0
    win_loss: float = 0.0
    win_tokens: int = 0
    win_steps: int = 0
    win_metrics: dict = dataclasses.field(default_factory=dict)
    win_t: float = 0.0

    def __post_init__(self) -> None:
        self.win_t = self.t0

    def add(self, loss_sum: float, n_tokens: int, metrics: Mapping) -> None:
        self.tokens += n_tokens
        self.win_loss += loss_sum
        self.win_tokens += n_tokens
        self.win_steps += 1
        for k, v in metrics.items():
            self.win_metrics[k] = self.win_metrics.get(k, 0.0) + float(v)

    def new_window(self, now: float) -> None:
        self.win_loss, self.win_tokens, self.win_steps, self.win_t, self.win_metrics = 0.0, 0, 0, now, {}
