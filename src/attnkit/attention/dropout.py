"""Dropout (Srivastava et al. 2014) that is fast on the CPU: ``y = x · m / (1 - p)``, ``m_i ~ Bernoulli(1 - p)``.

PyTorch's CPU dropout draws its mask with ``bernoulli_``, which runs a scalar generator per element
unless MKL's vectorised one is used (Intel CPUs only), and multiplies twice. On an AMD EPYC (AVX2)
it took a sizeable share of a Transformer training step (measured in benchmarks/RESULTS.md, section
"Where a Transformer training step's time goes"), and the draw runs on
one thread whatever ``torch.get_num_threads()`` says. Here the mask is drawn as 16-bit uniform
integers, four from each 64-bit draw of the seeded generator: ``m_i = [u_i ≥ k]`` with
``u ~ U{0, …, 65535}`` and ``k = round(p · 2¹⁶)``, so the drop rate is ``k / 2¹⁶`` (within 2⁻¹⁷ of
``p``; the kept values are scaled by ``2¹⁶ / (2¹⁶ - k)``, so the expectation stays exactly ``x``).
That is a quarter of the generator's calls of a float draw per element and, with the compare, about
half the time of ``torch.rand_like(x) ≥ p``, itself a third of ``bernoulli_``'s. A ``p`` that the 16-bit
grid would move by more than 0.01 % of itself (some values below 0.08, such as 0.01) is drawn as
``u ≥ p`` with ``u ~ U[0, 1)`` from ``torch.rand_like`` instead. The result is the same function of
the mask as ``torch.nn.functional.dropout``; only the random stream differs (the masks are still
reproducible under ``torch.manual_seed``). bf16 and fp16 inputs (what autocast's layers return) are
scaled in their own dtype, as ``torch.nn.functional.dropout`` scales them (1/(1 - p) rounded to that
dtype). Other devices and evaluation keep ``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["FAST_DEVICES", "Dropout", "dropout", "keep_mask"]

#: Devices where :func:`dropout` draws its own mask; elsewhere it is ``torch.nn.functional.dropout``.
#: (``benchmarks/profile_training.py`` empties it to time PyTorch's dropout side by side.)
FAST_DEVICES: tuple[str, ...] = ("cpu",)

#: The dtypes whose masks :func:`dropout` draws itself.
_FAST_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)

#: The mask's resolution: 16-bit uniform integers, four per 64-bit draw.
_LEVELS = 1 << 16


def uses_fast_dropout(x: Tensor, p: float, training: bool) -> bool:
    """Whether :func:`dropout` would draw its own mask for ``x`` (a training CPU floating tensor, 0 < p < 1)."""
    return training and 0.0 < p < 1.0 and x.device.type in FAST_DEVICES and x.dtype in _FAST_DTYPES


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``x · m / (1 - p)`` with ``m ~ Bernoulli(1 - p)`` per element when training, else ``x``.

    Same shape as ``x``; differentiable in ``x`` (the gradient is ``m / (1 - p)``). See the module's
    docstring for how the mask is drawn (``p`` on a 2⁻¹⁶ grid when that moves it by under 0.01 %)."""
    if not uses_fast_dropout(x, p, training):
        return F.dropout(x, p, training)
    drop = round(p * _LEVELS)
    if drop >= _LEVELS or abs(drop - p * _LEVELS) > 1e-4 * p * _LEVELS:  # off the grid, or p within 2⁻¹⁷ of 1
        keep, kept_share = torch.rand_like(x).ge_(p), 1.0 - p  # (...) float 0/1
    else:
        keep, kept_share = keep_mask(x.shape, drop, x.device), (_LEVELS - drop) / _LEVELS  # (...) bool
    if keep.dtype == torch.bool:  # read as bytes: torch converts uint8 to floats vectorised, bool not (~3x)
        keep = keep.view(torch.uint8)
    return x * keep.to(x.dtype).mul_(1.0 / kept_share)  # scale (...) 0 or 1/(1-p), no grad


def keep_mask(shape: torch.Size, drop: int, device: torch.device) -> Tensor:
    """Boolean mask of ``shape``: each entry False with probability ``drop / 2¹⁶``, independently.

    Four 16-bit integers come from each 64-bit draw; read as int16 they are uniform on
    ``[-2¹⁵, 2¹⁵)``, and an entry is kept when it is at least ``drop - 2¹⁵``."""
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), 2**63 - 1)  # (⌈n/4⌉,)
    return words.view(torch.int16)[:n].view(shape).ge(drop - _LEVELS // 2)  # (*shape) True = keep


class Dropout(nn.Dropout):
    """``torch.nn.Dropout`` (same attributes, no parameters) that runs :func:`dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)
