"""Additive (Bahdanau) scores with a hand-written backward that keeps no ``(B, Nq, Nk, A)`` tensor.

``e_ij = vᵀ tanh(a_i + b_j)`` with projected queries ``a (B, Nq, A)`` and keys ``b (B, Nk, A)``.
Autograd would keep the whole ``t = tanh(a_i + b_j)`` for the backward pass. Here the forward
computes the scores block by block in one reused buffer and keeps only ``a``, ``b`` and ``v``;
the backward recomputes each block and reduces it at once.

The tanh goes through the logistic sigmoid, ``tanh(x) = 2σ(2x) − 1``: PyTorch's CPU ``sigmoid``
runs several times faster than its ``tanh`` on the CPUs measured (benchmarks/RESULTS.md, section "Fused
additive attention"), and the ``− 1`` and the ``2`` fold into small tensors: with ``s_ij = σ(2a_i + 2b_j)``,

    e_ij    = (2v)ᵀ s_ij − Σ_k v_k
    ∂L/∂v   = Σ_{b,i,j} g_ij t_ij = 2 Σ g_ij s_ij − Σ g_ij
    ∂L/∂a_i = Σ_j g_ij v ⊙ (1 − t_ij²) = 4 v ⊙ Σ_j g_ij s_ij (1 − s_ij)    (1 − t² = 4 s (1 − s))
    ∂L/∂b_j = 4 v ⊙ Σ_i g_ij s_ij (1 − s_ij)

with ``g = ∂L/∂e``; a block is turned into ``g s (1 − s)`` in place, and no second block-sized
tensor is made. (Against float64 ``tanh`` the sigmoid form is within 2e-7, ``tanh`` itself 3e-8.)
A block (:func:`block_plan`) is at most :data:`BLOCK_ELEMS` floats, whole batch items when one item
fits and otherwise query rows of one item, so every pass after the first reads from the L2 cache.
Peak memory is one block, whatever Nq and Nk.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["BLOCK_ELEMS", "AdditiveScores", "additive_scores", "block_plan", "broadcast_scores", "scores_by_blocks"]

#: Floats in one block of the tanh layer: 256K = 1 MiB, the L2 cache of one core here; measured best
#: among 2^14..2^22 at decoder-step and NMT shapes for the forward pass without autograd.
BLOCK_ELEMS = 1 << 18


def block_plan(bsz: int, nq: int, nk: int, a: int, elems: int | None = None) -> list[tuple[int, int, int, int]]:
    """The blocks ``(b0, b1, q0, q1)`` of a ``(B, Nq, Nk, A)`` tanh layer, each of at most ``elems``
    floats where a single query row allows: several whole batch items when one item fits, else
    query rows of one item (whose score rows ``out[b, q0:q1]`` are then contiguous)."""
    elems = BLOCK_ELEMS if elems is None else elems
    per_item = nq * nk * a
    if per_item <= elems:
        nb = max(1, elems // max(1, per_item))
        return [(b0, min(bsz, b0 + nb), 0, nq) for b0 in range(0, bsz, nb)]
    rows = max(1, elems // max(1, nk * a))
    return [(b, b + 1, q0, min(nq, q0 + rows)) for b in range(bsz) for q0 in range(0, nq, rows)]


def _block(flat: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A contiguous view of the first ``prod(shape)`` floats of the reused buffer ``flat``."""
    n = 1
    for s in shape:
        n *= s
    return flat[:n].view(shape)


def _sigmoid_layer(a2: Tensor, b: Tensor, blk: tuple[int, int, int, int], flat: Tensor) -> Tensor:
    """``s = σ(2a_i + 2b_j)`` of one block from ``a2 = 2a`` and ``b``, in the buffer: ``(nb, r, Nk, A)``.
    (The keys are doubled inside the add: at a decoder step ``b`` is as large as the block.)"""
    b0, b1, q0, q1 = blk
    s = _block(flat, (b1 - b0, q1 - q0, b.shape[1], a2.shape[2]))
    torch.add(a2[b0:b1, q0:q1].unsqueeze(2), b[b0:b1].unsqueeze(1), alpha=2, out=s)  # (nb, r, Nk, A)
    return s.sigmoid_()


def _buffer(a: Tensor, plan, nk: int) -> Tensor:
    size = max(((b1 - b0) * (q1 - q0) for b0, b1, q0, q1 in plan), default=0) * nk * a.shape[2]
    return a.new_empty(size)


def scores_by_blocks(a: Tensor, b: Tensor, v: Tensor) -> Tensor:
    """``e (B, Nq, Nk)`` for ``a (B, Nq, A)``, ``b (B, Nk, A)``, block by block in one reused buffer
    (no autograd: the forward pass of :class:`AdditiveScores`, and inference)."""
    bsz, nq, A = a.shape
    nk = b.shape[1]
    out = a.new_empty(bsz, nq, nk)
    plan = block_plan(bsz, nq, nk, A)
    flat = _buffer(a, plan, nk)
    a2, v2 = a * 2, v * 2
    for b0, b1, q0, q1 in plan:
        s = _sigmoid_layer(a2, b, (b0, b1, q0, q1), flat)
        torch.matmul(s, v2, out=out[b0:b1, q0:q1])  # (nb, r, Nk)
    return out.sub_(v.sum())


class AdditiveScores(torch.autograd.Function):
    """``(a (B, Nq, A), b (B, Nk, A), v (A,)) -> e (B, Nq, Nk)``; see the module docstring."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, v: Tensor) -> Tensor:
        ctx.save_for_backward(a, b, v)
        return scores_by_blocks(a, b, v)

    @staticmethod
    def backward(ctx, g: Tensor):
        a, b, v = ctx.saved_tensors
        bsz, nq, A = a.shape
        nk = b.shape[1]
        g = g.contiguous()
        need_a, need_b, need_v = ctx.needs_input_grad[:3]
        grad_a = torch.empty_like(a) if need_a else None
        grad_b = torch.zeros_like(b) if need_b else None
        grad_v = torch.zeros_like(v)
        plan = block_plan(bsz, nq, nk, A)
        flat = _buffer(a, plan, nk)
        a2, v4 = a * 2, v * 4
        for b0, b1, q0, q1 in plan:
            s = _sigmoid_layer(a2, b, (b0, b1, q0, q1), flat)  # recomputed, not kept from the forward pass
            gb = g[b0:b1, q0:q1]  # (nb, r, Nk)
            if need_v:
                grad_v.addmv_(s.reshape(-1, A).t(), gb.reshape(-1), alpha=2)  # 2 Σ g s
            s.addcmul_(s, s, value=-1).mul_(gb.unsqueeze(-1))  # g s (1 − s), in place
            if need_a:
                torch.mul(s.sum(2), v4, out=grad_a[b0:b1, q0:q1])  # (nb, r, A)
            if need_b:  # summed over the query blocks of an item
                grad_b[b0:b1] += s.sum(1) * v4  # (nb, Nk, A)
        if need_v:
            grad_v -= g.sum()
        return grad_a, grad_b, (grad_v if need_v else None)


def additive_scores(a: Tensor, b: Tensor, v: Tensor) -> Tensor:
    """``vᵀ tanh(a_i + b_j)`` for ``a (B, Nq, A)``, ``b (B, Nk, A)`` through :class:`AdditiveScores`."""
    return AdditiveScores.apply(a.contiguous(), b.contiguous(), v)


def broadcast_scores(a: Tensor, b: Tensor, v: Tensor) -> Tensor:
    """The same scores in the same sigmoid form, as one broadcast autograd keeps whole:
    ``(a (B, Nq, A), b (B, Nk, A), v (A,)) -> (B, Nq, Nk)``. Faster than :class:`AdditiveScores`
    when the layer is small (one query per decoder step), which recomputes it in the backward pass."""
    s = torch.sigmoid(torch.add((a * 2).unsqueeze(2), b.unsqueeze(1), alpha=2))  # (B, Nq, Nk, A)
    return s @ (v * 2) - v.sum()
