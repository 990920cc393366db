"""Training, checkpointing and distributed helpers shared by every attnkit model.

* :mod:`.checkpoint` — atomic checkpoint folders, the model registry, ``load_model``, averaging.
* :mod:`.trainer` — :class:`Trainer`, one loop with exact resume, DDP and early stopping.
* :mod:`.data` — the resumable batch-source interface and :class:`ListBatches`.
* :mod:`.schedules` — LR schedules as ``LambdaLR``; :mod:`.losses` — ``label_smoothed_nll``.
* :mod:`.distributed` — torchrun helpers.
"""

from .checkpoint import (
    Checkpoint,
    CheckpointError,
    average_checkpoints,
    build_model,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_into,
    load_model,
    register_model,
    save_checkpoint,
)
from .data import ListBatches
from .losses import label_smoothed_nll
from .schedules import constant, inverse_sqrt_with_warmup
from .trainer import Trainer

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "ListBatches",
    "Trainer",
    "average_checkpoints",
    "build_model",
    "constant",
    "inverse_sqrt_with_warmup",
    "label_smoothed_nll",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_into",
    "load_model",
    "register_model",
    "save_checkpoint",
]
