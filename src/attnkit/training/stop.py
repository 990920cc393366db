"""Why a :class:`~attnkit.training.Trainer` run stopped: :class:`StopReason`.

Each reason's value is the string the run writes: the ``end`` line of ``train_log.jsonl`` and the summary
``fit`` returns carry it as ``stop_reason`` (``"max_steps"``, ...), as they did before the reasons were an
enum, so logs and scripts that read them are unchanged.
"""

from __future__ import annotations

import enum

__all__ = ["StopReason"]


class StopReason(enum.Enum):
    """Why ``fit`` returned, in the order the trainer checks after a step (:meth:`Trainer._stop_reason`)."""

    EARLY_STOPPING = "early_stopping"  # ``run.patience`` validations in a row without improvement
    INTERRUPTED = "interrupted"  # SIGINT/SIGTERM or ``Trainer.request_stop`` (on any rank)
    MAX_STEPS = "max_steps"  # ``run.max_steps`` optimizer steps made
    MAX_TIME = "max_time"  # ``run.max_time_s`` spent, or the schedule fitted to it has ended
    MAX_EPOCHS = "max_epochs"  # ``run.epochs`` passes over the training data made

    @property
    def ends_a_budget(self) -> bool:
        """Whether the run reached its step or time budget (where a fitted schedule ends at learning rate 0)."""
        return self in (StopReason.MAX_STEPS, StopReason.MAX_TIME)
