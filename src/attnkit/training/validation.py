"""Validation inside a :class:`~attnkit.training.Trainer` run: the best checkpoint and early stopping.

``valid_fn(model) -> {metric: value}`` runs on rank 0, on the unwrapped model in eval mode under
``torch.no_grad`` and the run's precision (the autocast its training steps run under, as PyTorch
Lightning's mixed-precision plugin validates: a bf16 run on a CPU with bf16 units validates faster, to the
same loss; benchmarks/RESULTS.md, "Figures formerly in docstrings"); the metrics are broadcast so every rank takes the same decision. ``metric_for_best``
improves when it is larger (``greater_is_better``) or smaller than the best seen; ``patience``
validations in a row without improvement stop the run. A run with a budget also validates its last step,
where a fitted schedule ends at learning rate 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import torch

from ..device import autocast
from .distributed import broadcast_object
from .run_config import RunConfig

__all__ = ["Validator"]


@dataclasses.dataclass
class Validator:
    """A run's validations: runs ``valid_fn`` and keeps the best metric and the patience counter.

    The fields below ``greater_is_better`` are the run's validation state; :meth:`state_dict` is what a
    checkpoint's ``trainer_state`` holds of it (under the keys it always had) and :meth:`load_state_dict`
    restores it. The trainer logs and times each validation; this class runs it and judges it.
    """

    run: RunConfig  # patience and how often the run validates (read when used: a caller may change them)
    metric_for_best: str  # the valid_fn metric that picks out_dir/best and counts towards patience
    greater_is_better: bool  # whether a larger metric_for_best is better
    best_metric: float | None = None  # the best metric_for_best seen (saved)
    best_step: int | None = None  # the step it was seen at (saved)
    bad_epochs: int = 0  # validations in a row without improvement (saved; named when they came once an epoch)
    early_stopped: bool = False  # run.patience such validations were reached: the run stops (saved)
    validated_at: int | None = None  # the step of the last validation in this process (not saved)
    last_metrics: dict[str, float] | None = None  # that validation's metrics, for the progress line (not saved)

    def evaluate(
        self,
        valid_fn: Callable[[torch.nn.Module], Mapping],
        model: torch.nn.Module,
        *,
        device: torch.device,
        amp_dtype: torch.dtype,
        is_main: bool,
    ) -> dict[str, float]:
        """``valid_fn(model)`` on rank 0, in eval mode under ``torch.no_grad`` and the run's autocast; the
        metrics (floats) broadcast to every rank, so that all take the same decisions."""
        metrics = None
        if is_main:
            was_training = model.training
            model.eval()
            with torch.no_grad(), autocast(device, amp_dtype):
                metrics = valid_fn(model)
            model.train(was_training)
            if not isinstance(metrics, Mapping):
                raise TypeError(f"Trainer: valid_fn must return a dict of metrics, got {type(metrics).__name__}")
            metrics = {k: float(v) for k, v in metrics.items()}
        return broadcast_object(metrics)

    def judge(self, metrics: Mapping[str, float], step: int) -> bool:
        """Record the validation of ``step``: update the best metric and the patience counter (and
        ``early_stopped``); whether ``metric_for_best`` improved (False when ``valid_fn`` does not return it,
        which only a run without patience allows)."""
        self.validated_at = step
        self.last_metrics = dict(metrics)
        if self.metric_for_best not in metrics:
            if self.run.patience is not None:
                raise ValueError(
                    f"Trainer: metric_for_best={self.metric_for_best!r} is not among valid_fn's metrics {sorted(metrics)}"
                )
            return False
        value = metrics[self.metric_for_best]
        improved = self.best_metric is None or (
            value > self.best_metric if self.greater_is_better else value < self.best_metric
        )
        if improved:
            self.best_metric, self.best_step, self.bad_epochs = value, step, 0
        else:
            self.bad_epochs += 1
            if self.run.patience is not None and self.bad_epochs >= self.run.patience:
                self.early_stopped = True
        return improved

    def due_at_budget_end(self, step: int) -> bool:
        """Whether a budget's last step (where a fitted schedule ends at lr 0) is to be validated, for
        ``best``: once, and not in a run that never validates (``valid_every_epochs`` 0, no
        ``valid_every_steps``)."""
        validates = self.run.valid_every_epochs or self.run.valid_every_steps
        return bool(validates) and self.validated_at != step

    def state_dict(self) -> dict:
        """What a checkpoint's ``trainer_state`` holds of the validations (its keys, in its order)."""
        return {
            "best_metric": self.best_metric,
            "best_step": self.best_step,
            "metric_for_best": self.metric_for_best,
            "bad_epochs": self.bad_epochs,
            "early_stopped": self.early_stopped,
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Restore :meth:`state_dict`'s fields from a ``trainer_state`` (older ones may lack the counters)."""
        self.best_metric = state.get("best_metric")
        self.best_step = state.get("best_step")
        self.bad_epochs = int(state.get("bad_epochs", 0))
        self.early_stopped = bool(state.get("early_stopped", False))
