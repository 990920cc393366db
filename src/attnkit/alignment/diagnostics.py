"""Signs of attention gone wrong, per target position: how spread it is, and how much of it sits on
tokens that carry no content.

- **entropy** ``H_t = −Σ_j α_tj log α_tj`` (nats): near 0 for a sharp alignment, ``log S`` for uniform.
- **end-of-sentence mass**: attention on the source's final piece. attnkit's encoders read the
  source pieces without an end-of-sentence token, so the final piece (usually the full stop) is the
  one that plays the role ``</s>`` plays in toolkits that append it: the place attention parks when
  the model has nothing to align (an "attention sink"), which users of those toolkits report.
- **punctuation mass**: attention on pieces made only of punctuation.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import torch
from torch import Tensor

from .words import WORD_START

__all__ = ["attention_diagnostics", "is_punctuation"]


def is_punctuation(piece: str) -> bool:
    """True when the piece (without the word-start mark) is only punctuation characters."""
    text = piece.replace(WORD_START, "")
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def attention_diagnostics(attention: Tensor, source_pieces: Sequence[str]) -> dict:
    """``attention (T, S)`` → ``{"entropy", "eos_mass", "punctuation_mass"}``, one list of T floats
    each, and ``"eos_position"`` (the final source piece's index), as in the module docstring."""
    if not isinstance(attention, Tensor) or attention.dim() != 2 or attention.shape[1] != len(source_pieces):
        raise ValueError(
            f"attention must be (T, S) with S = {len(source_pieces)} source pieces, "
            f"got {getattr(attention, 'shape', None)}"
        )
    a = attention.double()
    entropy = -(a * torch.log(a.clamp_min(1e-30))).sum(-1)  # (T,)
    punct = torch.tensor([is_punctuation(p) for p in source_pieces], dtype=torch.bool)
    return {
        "entropy": entropy.tolist(),
        "eos_mass": a[:, -1].tolist(),
        "punctuation_mass": (a * punct).sum(-1).tolist(),
        "eos_position": len(source_pieces) - 1,
    }
