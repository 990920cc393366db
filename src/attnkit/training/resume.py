"""Checkpoint and resume glue of a :class:`~attnkit.training.Trainer` run.

A checkpoint (``out_dir/step-XXXXXXXX``, the last ``keep_last`` kept, plus ``out_dir/best``) holds the
model, the optimizer, the scheduler, the gradient scaler, python/numpy/torch RNG states (per rank), the
data source's position and every counter (:meth:`ResumeMixin.trainer_state`), so that a run resumed from
it continues bit for bit. A fresh start seeds python and numpy with ``seed`` and torch with
``seed + rank``. The writing itself (atomic folders, rotation) is :mod:`attnkit.training.checkpoint`'s;
what the run may write, replace or remove in ``out_dir`` (only what its manifest lists) is
:mod:`attnkit.training.run_folder`'s.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import torch

from .checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    load_into,
    remove_stale_temporaries,
    rotate_checkpoints,
    step_dir_name,
)
from .distributed import all_gather_object, barrier
from .progress import LOG_NAME
from .rng import get_rng_state, set_rng_state
from .run_folder import BEST_NAME, TRAIN_CONFIG_NAME, save_in_run

__all__ = ["BEST_NAME", "TRAIN_CONFIG_NAME", "ResumeMixin"]


class ResumeMixin:
    """The :class:`~attnkit.training.Trainer`'s start (fresh or resumed), its state and its checkpoints."""

    def _start(self, resume: bool) -> Path | None:
        """Prepare ``out_dir``; restore the newest checkpoint (``resume``) or seed a fresh start; open the log."""
        if self.is_main:  # the run folder was opened (and checked) by the Trainer's constructor
            remove_stale_temporaries(self.out_dir, folder=self.run_folder)
            self.run_folder.claim(LOG_NAME)
        barrier()
        resumed_from = self._find_resume_checkpoint() if resume else None
        if resumed_from is not None:
            self._restore(resumed_from)
        else:
            random.seed(self.run.seed)
            np.random.seed(self.run.seed)
            torch.manual_seed(self.run.seed + self.rank)
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
            "seed": self.run.seed,
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
            torch.manual_seed(self.run.seed + 7919 * ts["step"] + self.rank)
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
            saved = dict(
                model=self.raw_model, config=self.model_config, trainer_state=state, extra_files=self.extra_files
            )
            save_in_run(self.run_folder, path.name, **saved)
            if best:
                save_in_run(self.run_folder, BEST_NAME, **saved)
            rotate_checkpoints(self.out_dir, self.run.keep_last, folder=self.run_folder)
            self._record_schedule()
            self._log({"event": "checkpoint", "step": self.step, "epoch": self.epoch, "path": str(path), "best": best})
        barrier()
        self._saved_at = (self.step, self.epoch)
        return path
