"""Position encodings: attention treats its inputs as a set, so order must be added to them.

- :class:`SinusoidalPositionalEncoding` (Vaswani et al.): ``PE(p, 2i) = sin(p / 10000^{2i/d})``,
  ``PE(p, 2i+1) = cos(p / 10000^{2i/d})``; no parameters, any length.
- :class:`LearnedPositionalEncoding`: one learned vector per position up to ``max_len``.

Both add the encoding to ``x (B, N, D)`` and take an ``offset`` (the position of ``x[:, 0]``),
which incremental decoding uses to encode one new token at position ``offset``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .dropout import Dropout

__all__ = ["LearnedPositionalEncoding", "SinusoidalPositionalEncoding", "sinusoidal_encoding"]


def sinusoidal_encoding(positions: Tensor, dim: int) -> Tensor:
    """``(N,)`` positions (any numbers) ``-> (N, dim)`` sinusoidal encodings (float32)."""
    if dim % 2 != 0:
        raise ValueError(f"dim must be even for sinusoidal encodings, got {dim}")
    inv_freq = torch.exp(
        torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) * (-math.log(10000.0) / dim)
    )
    angles = positions.to(torch.float64).unsqueeze(1) * inv_freq  # (N, dim/2)
    pe = torch.empty(positions.shape[0], dim, dtype=torch.float64, device=positions.device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()


def _check_x(x: Tensor, dim: int) -> None:
    if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != dim:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must have shape (B, N, {dim}), got {shape}")


class SinusoidalPositionalEncoding(nn.Module):
    """``x + PE[offset : offset + N]`` with fixed sinusoids (then dropout). ``(B, N, D) -> (B, N, D)``.

    Encodings are cached up to the longest length seen and extended on demand.
    """

    def __init__(self, dim: int, *, dropout: float = 0.0, max_len: int = 1024):
        super().__init__()
        if dim % 2 != 0:
            raise ValueError(f"dim must be even for sinusoidal encodings, got {dim}")
        self.dim = dim
        self.dropout = Dropout(dropout)
        self.register_buffer("pe", sinusoidal_encoding(torch.arange(max_len), dim), persistent=False)

    def encoding(self, n: int, offset: int = 0) -> Tensor:
        """The ``(n, D)`` encodings of positions ``offset .. offset + n - 1``."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if offset + n > self.pe.shape[0]:
            self.pe = sinusoidal_encoding(torch.arange(2 * (offset + n), device=self.pe.device), self.dim)
        return self.pe[offset : offset + n]

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        _check_x(x, self.dim)
        return self.dropout(x + self.encoding(x.shape[1], offset).to(x.dtype))


class LearnedPositionalEncoding(nn.Module):
    """``x + P[offset : offset + N]`` with a learned table ``P (max_len, D)``. ``(B, N, D) -> (B, N, D)``."""

    def __init__(self, dim: int, max_len: int, *, dropout: float = 0.0):
        super().__init__()
        self.dim, self.max_len = dim, max_len
        self.table = nn.Embedding(max_len, dim)
        nn.init.normal_(self.table.weight, std=dim**-0.5)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        _check_x(x, self.dim)
        n = x.shape[1]
        if offset < 0 or offset + n > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + n - 1} exceed the learned table (max_len={self.max_len}); "
                "use a shorter input or a larger max_len"
            )
        pos = torch.arange(offset, offset + n, device=x.device)
        return self.dropout(x + self.table(pos).to(x.dtype))
