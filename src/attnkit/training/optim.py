"""The optimizer every attnkit task trains with: Adam (Kingma & Ba 2015), fused where PyTorch can.

PyTorch's default Adam on the CPU updates each parameter tensor with about ten separate
element-wise ops; ``fused=True`` does the whole update in one kernel per tensor (CPU, CUDA and
MPS, float parameters). The arithmetic is the same; only the number of passes over memory changes.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["adam"]

#: Every device attnkit runs on has the fused kernel, so an optimizer built before the Trainer moves
#: the model (from the CPU to cuda or mps) stays valid after the move.
_FUSED_DEVICES = ("cpu", "cuda", "mps")


def adam(params: Iterable[torch.nn.Parameter], **kwargs) -> torch.optim.Adam:
    """``torch.optim.Adam(params, **kwargs)`` with ``fused=True`` when every parameter is a floating
    point tensor on a device the fused kernel supports (otherwise PyTorch's default implementation)."""
    params = list(params)
    fused = bool(params) and all(p.is_floating_point() and p.device.type in _FUSED_DEVICES for p in params)
    return torch.optim.Adam(params, fused=fused or None, **kwargs)
