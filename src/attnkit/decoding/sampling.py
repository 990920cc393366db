"""Sampling as a decoding strategy beside greedy and beam search: :class:`Sampling` picks each row's next token
by drawing from the model's distribution, for :func:`attnkit.decoding.greedy_search` (``pick=``), the one
token loop every attnkit model decodes through.

Each step draws ``y ~ softmax(z / T)`` restricted to the ``top_k`` most likely tokens (Fan et al. 2018) and to
the smallest set whose probability reaches ``top_p`` (nucleus sampling, Holtzman et al. 2020), with the
``generator`` given, so the same seed gives the same text. ``z`` is the step's log-probabilities (a constant
away from its logits, the same distribution after the softmax).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Sampling"]


@dataclass(frozen=True)
class Sampling:
    """Draw each row's next token (see the module docstring): ``temperature`` ``T > 0``, ``top_k`` (None: every
    token), ``top_p`` in ``(0, 1]`` (None: no nucleus), ``generator`` (None: torch's global one)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"temperature must be a finite number > 0, got {t!r}")
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1
        ):
            raise ValueError(f"top_k must be an int >= 1 or None, got {self.top_k!r}")
        p = self.top_p
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1):
            raise ValueError(f"top_p must be a number in (0, 1] or None, got {p!r}")

    def __call__(self, log_probs: Tensor) -> Tensor:
        """``(R, V)`` log-probabilities → ``(R,)`` drawn tokens."""
        z = log_probs.float() / self.temperature  # (R, V)
        if self.top_k is not None and self.top_k < z.shape[-1]:
            kth = z.topk(self.top_k, dim=-1).values[:, -1:]  # (R, 1)
            z = z.masked_fill(z < kth, float("-inf"))
        if self.top_p is not None and self.top_p < 1:
            probs, order = torch.softmax(z, dim=-1).sort(dim=-1, descending=True)  # (R, V)
            before = probs.cumsum(-1) - probs  # the mass of the tokens ranked above each one
            drop = torch.zeros_like(z, dtype=torch.bool).scatter(-1, order, before >= self.top_p)
            z = z.masked_fill(drop, float("-inf"))  # the top token always stays (its mass before is 0)
        probs = torch.softmax(z, dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(1)
