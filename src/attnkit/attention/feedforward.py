"""The position-wise blocks of decoder-only language models: GPT-2's GELU MLP and Llama's SwiGLU.

- :class:`GeluMLP` (GPT-2; Radford et al. 2019): ``down(GELU(up(x)))``, with biases.
- :class:`SwiGLU` (Shazeer 2020, "GLU Variants Improve Transformer"; Llama):
  ``down(SiLU(gate(x)) ⊙ up(x))``, no biases.

RMSNorm (Zhang & Sennrich 2019), the norm of the Llama shape, is ``torch.nn.RMSNorm``:
``x / sqrt(mean(x²) + ε) · g``. The parameter names (``up_proj``, ``gate_proj``, ``down_proj``) are
Hugging Face's Llama names, so an export is a renaming.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["GeluMLP", "SwiGLU", "swiglu_width"]


def swiglu_width(d_model: int, multiple_of: int = 32) -> int:
    """Llama's hidden width for SwiGLU: ``8/3 · d_model`` (the parameters of a ``4 · d_model`` MLP with
    a third matrix), rounded up to a multiple of ``multiple_of``."""
    width = -(-8 * d_model // 3)  # ceil(8 d / 3)
    return -(-width // multiple_of) * multiple_of


class GeluMLP(nn.Module):
    """``(B, N, D) -> (B, N, D)``: ``down_proj(GELU(up_proj(x)))`` (exact GELU, erf form)."""

    def __init__(self, d_model: int, d_ff: int, *, bias: bool = True):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.gelu(self.up_proj(x)))  # (B, N, d_ff) inside


class SwiGLU(nn.Module):
    """``(B, N, D) -> (B, N, D)``: ``down_proj(SiLU(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, d_model: int, d_ff: int, *, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # (B, N, d_ff) inside
