"""Dropout (Srivastava et al. 2014) that is fast on the CPU: ``y = x · m / (1 - p)``, ``m_i ~ Bernoulli(1 - p)``.

PyTorch's CPU dropout draws its mask with ``bernoulli_``, which runs a scalar generator per element
unless MKL's vectorised one is used (Intel CPUs only), and multiplies twice. On an AMD EPYC (AVX2)
it took 11 % of a Transformer training step (``benchmarks/profile_training.py``). Drawing the mask
as ``u ≥ p`` with ``u ~ U[0, 1)`` from ``torch.rand_like`` (a vectorised float generator) and
scaling it in place gives the same distribution at about a third of the time. The result is the same
function of the mask as ``torch.nn.functional.dropout``; only the random stream differs (the masks
are still reproducible under ``torch.manual_seed``). Other devices, dtypes below float32 (whose
uniform draws are too coarse for an exact ``p``) and evaluation keep ``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["FAST_DEVICES", "Dropout", "dropout"]

#: Devices where :func:`dropout` draws its own mask; elsewhere it is ``torch.nn.functional.dropout``.
#: (``benchmarks/profile_training.py`` empties it to time PyTorch's dropout side by side.)
FAST_DEVICES: tuple[str, ...] = ("cpu",)


def uses_fast_dropout(x: Tensor, p: float, training: bool) -> bool:
    """Whether :func:`dropout` would draw its own mask for ``x`` (a training CPU float32/64 tensor, 0 < p < 1)."""
    return training and 0.0 < p < 1.0 and x.device.type in FAST_DEVICES and x.dtype in (torch.float32, torch.float64)


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``x · m / (1 - p)`` with ``m_i = [u_i ≥ p]``, ``u ~ U[0, 1)`` when training, else ``x``.

    Same shape as ``x``; differentiable in ``x`` (the gradient is ``m / (1 - p)``)."""
    if not uses_fast_dropout(x, p, training):
        return F.dropout(x, p, training)
    scale = torch.rand_like(x).ge_(p).mul_(1.0 / (1.0 - p))  # (...) 0 or 1/(1-p), no grad
    return x * scale


class Dropout(nn.Dropout):
    """``torch.nn.Dropout`` (same attributes, no parameters) that runs :func:`dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)
