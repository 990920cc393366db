"""Position encodings: attention treats its inputs as a set, so order must be added to them.

- :class:`SinusoidalPositionalEncoding` (Vaswani et al.): ``PE(p, 2i) = sin(p / 10000^{2i/d})``,
  ``PE(p, 2i+1) = cos(p / 10000^{2i/d})``; no parameters, any length.
- :class:`LearnedPositionalEncoding`: one learned vector per position up to ``max_len``.
- :class:`RotaryEmbedding` (Su et al. 2021, RoFormer; the positions of Llama): rotates each query and
  key instead of adding to the input, so that ``q_m·k_n`` depends on ``m - n`` only.

The first two add the encoding to ``x (B, N, D)`` and take an ``offset`` (the position of ``x[:, 0]``),
which incremental decoding uses to encode one new token at position ``offset``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .dropout import Dropout

__all__ = [
    "LearnedPositionalEncoding",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "rotate_half",
    "sinusoidal_encoding",
]


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


def rotate_half(x: Tensor) -> Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dimension's two halves (the rotary pairing of Llama and
    Hugging Face: dimension ``i`` is paired with ``i + D/2``)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE; Su et al. 2021, "RoFormer"), as Llama applies it.

    Dimensions ``i`` and ``i + D/2`` of a head vector at position ``p`` are rotated by the angle
    ``p · θ^(-2i/D)``: ``x' = x·cos + rotate_half(x)·sin``. The dot product of a rotated query at ``m``
    and a rotated key at ``n`` then depends only on ``m - n``. No parameters: the angles ``p · θ^(-2i/D)``
    are float32 products, as in ``transformers``, and their cosines and sines are kept for the positions
    seen so far (an attribute, not a buffer: nothing in a checkpoint; grown to twice the length asked
    for when a longer one comes), so that every layer and every step slices one table instead of
    recomputing it; each entry depends on its own position only.
    """

    def __init__(self, head_dim: int, *, theta: float = 10000.0):
        super().__init__()
        if head_dim % 2 != 0:
            raise ValueError(f"head_dim must be even for rotary positions, got {head_dim}")
        if theta <= 0:
            raise ValueError(f"theta must be > 0, got {theta}")
        self.head_dim, self.theta = head_dim, float(theta)
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (D/2,), float32 as in transformers
        # (device, dtype, inv_freq's device and dtype) -> cos, sin (N_max, D); replaced, never mutated, so a
        # call in another thread reads a complete entry
        self._tables: dict[tuple, tuple[Tensor, Tensor]] = {}

    def _angles(self, n: int, offset: int) -> Tensor:
        pos = torch.arange(offset, offset + n, device=self.inv_freq.device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)  # (N, D/2)
        return torch.cat((freqs, freqs), dim=-1)  # (N, D)

    def cos_sin(self, n: int, offset: int = 0, *, device=None, dtype=torch.float32) -> tuple[Tensor, Tensor]:
        """``(N, D)`` cosines and sines of positions ``offset .. offset + n - 1``."""
        device = self.inv_freq.device if device is None else torch.device(device)
        key = (device, dtype, self.inv_freq.device, self.inv_freq.dtype)
        entry = self._tables.get(key)
        if entry is None or entry[0].shape[0] < offset + n:
            with torch.inference_mode(False):  # a table made under inference mode still serves training
                emb = self._angles(max(2 * (offset + n), 64), 0)  # (N_max, D)
                entry = (emb.cos().to(device=device, dtype=dtype), emb.sin().to(device=device, dtype=dtype))
            self._tables = {**self._tables, key: entry}
        cos, sin = entry
        return cos[offset : offset + n], sin[offset : offset + n]

    def forward(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """Rotate ``q (B, H, N, D)`` and ``k (B, Hkv, N, D)`` for positions ``offset ..``."""
        if q.shape[-1] != self.head_dim or k.shape[-1] != self.head_dim:
            raise ValueError(f"q and k must end in head_dim={self.head_dim}, got {tuple(q.shape)}, {tuple(k.shape)}")
        cos, sin = self.cos_sin(q.shape[-2], offset, device=q.device, dtype=q.dtype)  # (N, D)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
