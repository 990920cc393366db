"""Checkpoint and resume glue of a :class:`~attnkit.training.Trainer` run.

A checkpoint (``out_dir/step-XXXXXXXX``, the last ``keep_last`` kept, plus ``out_dir/best``) holds the
model, the optimizer, the scheduler, the gradient scaler, python/numpy/torch RNG states (per rank), the
data source's position and every counter (:meth:`Resumer.trainer_state`), so that a run resumed from
it continues bit for bit. A fresh start seeds python and numpy with ``seed`` and torch with
``seed + rank``. The writing itself (atomic folders, rotation) is :mod:`attnkit.training.checkpoint`'s;
what the run may write, replace or remove in ``out_dir`` (only what its manifest lists) is
:mod:`attnkit.training.run_folder`'s.

:class:`Resumer` is the trainer's part that starts a run, writes its checkpoints and restores one. It is
the one part handed the whole trainer (``trainer``): a checkpoint is the trainer's whole state, every counter
and every stateful object it holds. Since ``trainer.py`` imports this module, ``trainer`` is not annotated
with its class here (an import back would be a cycle); it is always a :class:`~attnkit.training.Trainer`.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path
from typing import Any

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

__all__ = ["BEST_NAME", "TRAIN_CONFIG_NAME", "Resumer"]


@dataclasses.dataclass
class Resumer:
    """A run's start (fresh or resumed), its ``trainer_state`` and its checkpoints (see the module docstring)."""

    saved_at: tuple[int, int] | None = None  # (step, epoch) of the checkpoint last written or restored

    def start(self, trainer: Any, resume: bool) -> Path | None:
        """Prepare ``out_dir``; restore the newest checkpoint (``resume``) or seed a fresh start; open the log.
        The checkpoint resumed from, or None."""
        if trainer.is_main:  # the run folder was opened (and checked) by the Trainer's constructor
            remove_stale_temporaries(trainer.out_dir, folder=trainer.run_folder)
            trainer.run_folder.claim(LOG_NAME)
        barrier()
        resumed_from = self.find_checkpoint(trainer.out_dir, trainer.is_main) if resume else None
        if resumed_from is not None:
            self.restore(trainer, resumed_from)
        else:
            random.seed(trainer.run.seed)
            np.random.seed(trainer.run.seed)
            torch.manual_seed(trainer.run.seed + trainer.rank)
            trainer.step = trainer.epoch = 0
            trainer.train_batches.set_epoch(0)
        if trainer.is_main:
            trainer.run_log.open(trainer.out_dir / LOG_NAME)  # closed at the end of fit()
        trainer.run_log.write(
            {
                "event": "resume" if resumed_from else "start",
                "step": trainer.step,
                "epoch": trainer.epoch,
                "from": str(resumed_from) if resumed_from else None,
                "world_size": trainer.world_size,
            }
        )
        return resumed_from

    @staticmethod
    def trainer_state(trainer: Any) -> dict:
        """Everything besides the weights that exact resume needs (collective under DDP)."""
        rng = all_gather_object(get_rng_state())
        return {
            "step": trainer.step,
            "epoch": trainer.epoch,
            "optimizer": trainer.optimizer.state_dict(),
            "scheduler": trainer.scheduler.state_dict() if trainer.scheduler is not None else None,
            "sampler": trainer.train_batches.state_dict(),
            "rng": rng[trainer.rank],
            "rng_per_rank": rng,
            "world_size": trainer.world_size,
            **trainer.validator.state_dict(),  # best_metric, best_step, metric_for_best, bad_epochs, early_stopped
            "tokens_seen": trainer.tokens_seen,
            "seed": trainer.run.seed,
            "scaler": trainer.scaler.state_dict() if trainer.scaler.is_enabled() else None,
        }

    def restore(self, trainer: Any, ckpt_path: Path) -> None:
        """Load the checkpoint at ``ckpt_path`` into ``trainer``: weights, optimizer, scheduler, data position,
        scaler, RNG states and counters."""
        ckpt = load_checkpoint(ckpt_path)
        ts = ckpt.trainer_state
        if ts is None:
            raise CheckpointError(f"checkpoint {ckpt_path} has no trainer_state.pt; cannot resume from it")
        load_into(trainer.raw_model, ckpt.state_dict, source=ckpt.path)
        try:
            trainer.optimizer.load_state_dict(ts["optimizer"])
            if trainer.scheduler is not None:
                if ts.get("scheduler") is None:
                    raise CheckpointError(f"checkpoint {ckpt_path}: trainer_state has no scheduler state")
                trainer.scheduler.load_state_dict(ts["scheduler"])
            trainer.train_batches.load_state_dict(ts["sampler"])
            if trainer.scaler.is_enabled() and ts.get("scaler"):
                trainer.scaler.load_state_dict(ts["scaler"])
        except (KeyError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"checkpoint {ckpt_path}: trainer_state.pt does not fit this run: {e}") from e
        per_rank = ts.get("rng_per_rank")
        if per_rank is not None and len(per_rank) == trainer.world_size:
            set_rng_state(per_rank[trainer.rank])
        else:  # world size changed: the run goes on, but not bit-exactly
            set_rng_state(ts["rng"])
            torch.manual_seed(trainer.run.seed + 7919 * ts["step"] + trainer.rank)
        trainer.step = int(ts["step"])
        trainer.epoch = int(ts["epoch"])
        trainer.validator.load_state_dict(ts)
        trainer.tokens_seen = int(ts.get("tokens_seen", 0))
        self.saved_at = (trainer.step, trainer.epoch)

    @staticmethod
    def find_checkpoint(out_dir: Path, is_main: bool) -> Path | None:
        """Newest step checkpoint in ``out_dir`` that loads; corrupt ones are reported (rank 0) and skipped."""
        for path in reversed(list_checkpoints(out_dir)):
            try:
                load_checkpoint(path, load_trainer_state=False)
                return path
            except CheckpointError as e:
                if is_main:
                    print(f"attnkit: skipping unusable checkpoint: {e}", file=sys.stderr)
        return None

    def save(self, trainer: Any, *, best: bool = False) -> Path:
        """Write ``out_dir/step-XXXXXXXX`` (and ``out_dir/best`` if ``best``); collective under DDP."""
        state = self.trainer_state(trainer)  # collective (RNG gather): every rank calls it
        path = trainer.out_dir / step_dir_name(trainer.step)
        if trainer.is_main:
            saved = dict(
                model=trainer.raw_model,
                config=trainer.model_config,
                trainer_state=state,
                extra_files=trainer.extra_files,
            )
            save_in_run(trainer.run_folder, path.name, **saved)
            if best:
                save_in_run(trainer.run_folder, BEST_NAME, **saved)
            rotate_checkpoints(trainer.out_dir, trainer.run.keep_last, folder=trainer.run_folder)
            trainer.planner.record_schedule()
            trainer.run_log.write(
                {"event": "checkpoint", "step": trainer.step, "epoch": trainer.epoch, "path": str(path), "best": best}
            )
        barrier()
        self.saved_at = (trainer.step, trainer.epoch)
        return path
