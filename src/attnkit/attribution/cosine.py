"""The cosine distance ``1 − cos(a, b)`` written so that it keeps its digits when ``a`` and ``b`` are close.

``1 − cos`` subtracts two numbers near 1, so in float32 a distance below ~1e-4 is mostly rounding:
value zeroing (Mohebbi et al. 2023) scored a causal model's future tokens at up to 1e-5 where the
exact answer is 0. The same quantity is ``½‖a/|a| − b/|b|‖²`` (expand the square of two unit
vectors: ``½(1 + 1 − 2 cos)``), which subtracts the vectors' components instead and so is exact
(0) when the two are equal and keeps float32's relative precision when they are close.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["cosine_distance"]


def cosine_distance(a: Tensor, b: Tensor, dim: int = -1) -> Tensor:
    """``1 − cos(a, b)`` along ``dim`` (broadcast), computed as ``½‖a/|a| − b/|b|‖²``; in [0, 2]."""
    tiny = torch.finfo(a.dtype).tiny if a.is_floating_point() else 0.0
    ua = a / a.norm(dim=dim, keepdim=True).clamp_min(tiny)
    ub = b / b.norm(dim=dim, keepdim=True).clamp_min(tiny)
    return 0.5 * (ua - ub).pow(2).sum(dim)
