"""Additive (Bahdanau) scores with a hand-written backward that keeps no ``(B, Nq, Nk, A)`` tensor.

``e_ij = vᵀ tanh(a_i + b_j)`` with projected queries ``a (B, Nq, A)`` and keys ``b (B, Nk, A)``.
Autograd would keep the whole ``t = tanh(a_i + b_j)`` for the backward pass. Here the forward
computes the scores block by block in one reused buffer and keeps only ``a``, ``b`` and ``v``;
the backward recomputes each block's ``t`` and reduces it at once. With ``g = ∂L/∂e``:

    ∂L/∂v   = Σ_{b,i,j} g_ij t_ij
    z_ij    = g_ij · v ⊙ (1 − t_ij²)          (the gradient at the tanh's input, per block)
    ∂L/∂a_i = Σ_j z_ij        ∂L/∂b_j = Σ_i z_ij

Peak memory is one block, whatever Nq and Nk.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["AdditiveScores", "additive_scores"]

_BLOCK_ELEMS = 1 << 20  # floats per block buffer (4 MiB)


def _blocks(bsz: int, nq: int, nk: int, a: int):
    per_item = max(1, nq * nk * a)
    step = max(1, _BLOCK_ELEMS // per_item)
    return [(b0, min(bsz, b0 + step)) for b0 in range(0, bsz, step)]


class AdditiveScores(torch.autograd.Function):
    """``(a (B, Nq, A), b (B, Nk, A), v (A,)) -> e (B, Nq, Nk)``; see the module docstring."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, v: Tensor) -> Tensor:
        bsz, nq, A = a.shape
        nk = b.shape[1]
        out = a.new_empty(bsz, nq, nk)
        buf = None
        for b0, b1 in _blocks(bsz, nq, nk, A):
            if buf is None or buf.shape[0] < b1 - b0:
                buf = a.new_empty(b1 - b0, nq, nk, A)
            t = buf[: b1 - b0]
            torch.add(a[b0:b1].unsqueeze(2), b[b0:b1].unsqueeze(1), out=t)  # (nb, Nq, Nk, A)
            t.tanh_()
            torch.matmul(t, v, out=out[b0:b1])  # (nb, Nq, Nk)
        ctx.save_for_backward(a, b, v)
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        a, b, v = ctx.saved_tensors
        bsz, nq, A = a.shape
        nk = b.shape[1]
        g = g.contiguous()
        grad_a = torch.empty_like(a) if ctx.needs_input_grad[0] else None
        grad_b = torch.empty_like(b) if ctx.needs_input_grad[1] else None
        grad_v = torch.zeros_like(v)
        buf = None
        for b0, b1 in _blocks(bsz, nq, nk, A):
            n = b1 - b0
            if buf is None or buf.shape[0] < n:
                buf = a.new_empty(n, nq, nk, A)
            t = buf[:n]
            torch.add(a[b0:b1].unsqueeze(2), b[b0:b1].unsqueeze(1), out=t)
            t.tanh_()  # recomputed, not kept from the forward pass
            gb = g[b0:b1]  # (nb, Nq, Nk)
            grad_v.addmv_(t.reshape(-1, A).t(), gb.reshape(-1))  # Σ g t
            t = torch.ops.aten.tanh_backward(gb.unsqueeze(-1) * v, t)  # z = g v (1 − t²), one fused pass
            if grad_a is not None:
                torch.sum(t, dim=2, out=grad_a[b0:b1])  # (nb, Nq, A)
            if grad_b is not None:
                torch.sum(t, dim=1, out=grad_b[b0:b1])  # (nb, Nk, A)
        return grad_a, grad_b, (grad_v if ctx.needs_input_grad[2] else None)


def additive_scores(a: Tensor, b: Tensor, v: Tensor) -> Tensor:
    """``vᵀ tanh(a_i + b_j)`` for ``a (B, Nq, A)``, ``b (B, Nk, A)`` through :class:`AdditiveScores`."""
    return AdditiveScores.apply(a.contiguous(), b.contiguous(), v)
