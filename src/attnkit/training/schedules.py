"""Learning-rate schedules as ``torch.optim.lr_scheduler.LambdaLR``, so they checkpoint.

Both step once per optimizer step (the trainer calls ``scheduler.step()`` after
``optimizer.step()``). The multipliers are small picklable classes holding only numbers, so
``scheduler.state_dict()`` round-trips through ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from ..checks import POSITIVE_INT, check

__all__ = ["ConstantMultiplier", "InverseSqrtWarmup", "constant", "inverse_sqrt_with_warmup"]


class ConstantMultiplier:
    """Multiplier 1.0 at every step."""

    def __call__(self, step: int) -> float:
        return 1.0


class InverseSqrtWarmup:
    """Vaswani et al. (2017): ``factor * d_model**-0.5 * min(k**-0.5, k * warmup**-1.5)``.

    ``k = step + 1`` so that the k-th optimizer step (1-based) uses rate(k) and step 0 is finite.
    """

    def __init__(self, d_model: int, warmup_steps: int, factor: float = 1.0):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.factor = factor

    def __call__(self, step: int) -> float:
        k = step + 1
        return self.factor * self.d_model**-0.5 * min(k**-0.5, k * self.warmup_steps**-1.5)


def _check_optimizer(optimizer) -> None:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")


def constant(optimizer: torch.optim.Optimizer) -> LambdaLR:
    """Keep the optimizer's learning rate (a scheduler only so that the trainer code has one path)."""
    _check_optimizer(optimizer)
    return LambdaLR(optimizer, ConstantMultiplier())


def inverse_sqrt_with_warmup(
    optimizer: torch.optim.Optimizer, d_model: int, warmup_steps: int, factor: float = 1.0
) -> LambdaLR:
    """The Transformer schedule: linear warm-up for ``warmup_steps``, then decay as 1/sqrt(step).

    LambdaLR multiplies the optimizer's base lr by this rate, so build the optimizer with
    ``lr=1.0`` to get the paper's absolute rates (e.g. Adam(betas=(0.9, 0.98), eps=1e-9)).
    """
    _check_optimizer(optimizer)
    check("inverse_sqrt_with_warmup: d_model", d_model, POSITIVE_INT)
    check("inverse_sqrt_with_warmup: warmup_steps", warmup_steps, POSITIVE_INT)
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
        raise ValueError(f"inverse_sqrt_with_warmup: factor must be a positive number, got {factor!r}")
    return LambdaLR(optimizer, InverseSqrtWarmup(d_model, warmup_steps, float(factor)))
