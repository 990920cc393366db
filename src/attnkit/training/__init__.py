"""Training, checkpointing and distributed helpers shared by every attnkit model.

* :mod:`.checkpoint` — atomic checkpoint folders, ``load_model`` (through the model registry,
  :mod:`attnkit.models.registry`), averaging, ``export_checkpoint``.
* :mod:`.trainer` — :class:`Trainer`, one loop with exact resume, DDP and early stopping, built from
  :mod:`.run_config`'s :class:`RunConfig` (the run options every task config nests); it holds its parts
  as fields, each in its own module: :mod:`.resume` (checkpoints and resume), :mod:`.validation` (best
  metric, early stopping), :mod:`.step_plan` (the step estimate and the budget schedule), :mod:`.progress`
  (log, progress line) and :mod:`.threads`; :mod:`.stop` names why a run stopped (:class:`StopReason`);
  :mod:`.run_folder` names everything a run writes in ``out_dir`` in its manifest first, so that it never
  replaces or removes a file of the user's there.
* :mod:`.data` — the resumable batch-source interface, :class:`Batches` and :class:`ListBatches`.
* :mod:`.rng` — the global RNG states a checkpoint saves for exact resume.
* :mod:`.optim` — Adam with attnkit's defaults; :mod:`.linear_cross_entropy` — the output layer's
  cross-entropy computed in row chunks, without the full logits.
* :mod:`.schedules` — LR schedules as ``LambdaLR``; :mod:`.losses` — ``label_smoothed_nll``.
* :mod:`.distributed` — torchrun helpers.
"""

from .checkpoint import (
    Checkpoint,
    CheckpointError,
    average_checkpoints,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_into,
    load_model,
    save_checkpoint,
)
from .data import ListBatches
from .losses import label_smoothed_nll
from .run_config import RunConfig
from .schedules import constant, inverse_sqrt_with_warmup
from .stop import StopReason
from .trainer import Trainer

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "ListBatches",
    "RunConfig",
    "StopReason",
    "Trainer",
    "average_checkpoints",
    "constant",
    "inverse_sqrt_with_warmup",
    "label_smoothed_nll",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_into",
    "load_model",
    "save_checkpoint",
]
