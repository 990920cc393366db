"""Validation inside a :class:`~attnkit.training.Trainer` run: the best checkpoint and early stopping.

``valid_fn(model) -> {metric: value}`` runs on rank 0, on the unwrapped model in eval mode under
``torch.no_grad`` and the run's precision (the autocast its training steps run under, as PyTorch
Lightning's mixed-precision plugin validates: a bf16 run on a CPU with bf16 units validates ~1.3× faster,
to the same loss within 1e-3); the metrics are broadcast so every rank takes the same decision. ``metric_for_best``
improves when it is larger (``greater_is_better``) or smaller than the best seen; ``patience``
validations in a row without improvement stop the run. A run with a budget also validates its last step,
where a fitted schedule ends at learning rate 0.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch

from ..device import autocast
from .distributed import broadcast_object

__all__ = ["ValidationMixin"]


class ValidationMixin:
    """The :class:`~attnkit.training.Trainer`'s validations: the best metric, the patience counter, the log."""

    def _validate(self) -> tuple[dict, bool]:
        """Run valid_fn (rank 0), share the metrics, update best/patience; returns (metrics, improved)."""
        metrics = None
        if self.is_main:
            was_training = self.raw_model.training
            self.raw_model.eval()
            with torch.no_grad(), autocast(self.device, self.amp_dtype):
                metrics = self.valid_fn(self.raw_model)
            self.raw_model.train(was_training)
            if not isinstance(metrics, Mapping):
                raise TypeError(f"Trainer: valid_fn must return a dict of metrics, got {type(metrics).__name__}")
            metrics = {k: float(v) for k, v in metrics.items()}
        metrics = broadcast_object(metrics)
        if self.metric_for_best not in metrics:
            if self.run.patience is not None:
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
            if self.run.patience is not None and self.bad_epochs >= self.run.patience:
                self.early_stopped = True
        return metrics, improved

    def _validate_and_log(self, pbar, label: str) -> bool:
        """Validate, log it (with its seconds, ``valid_s``), show it; whether the metric improved."""
        t = time.perf_counter()
        metrics, improved = self._validate()
        self._validated_at = self.step
        self._last_valid = metrics
        seconds = time.perf_counter() - t
        self._clock.add_event("valid", seconds)  # for a time budget's estimate
        self._log(
            {
                "event": "valid",
                "step": self.step,
                "epoch": self.epoch,
                **metrics,
                "best_metric": self.best_metric,
                "bad_epochs": self.bad_epochs,
                "valid_s": round(seconds, 3),
            }
        )
        if pbar is not None:
            pbar.write(f"{label}: " + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
        return improved

    def _final_validation(self, pbar) -> bool:
        """A budget's last step is where a fitted schedule ends (lr 0), so validate it (once) for ``best``;
        not in a run that never validates (``valid_every_epochs`` 0, no ``valid_every_steps``)."""
        never = not (self.run.valid_every_epochs or self.run.valid_every_steps)
        if self.valid_fn is None or never or self._validated_at == self.step:
            return False
        return self._validate_and_log(pbar, f"step {self.step} (end of budget)")
