"""Heads removed from a :class:`MultiHeadAttention` for good: smaller projections, the same function as the
heads zero-ablated (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?"; Voita et al. 2019).

``MultiHead(Q, K, V) = Concat(head_1..head_H) W_O + b_O``: head ``h`` reads rows ``h·D_h .. (h+1)·D_h`` of
each of ``W_Q``, ``W_K``, ``W_V`` (and of their biases) and writes through the same columns of ``W_O``. A
head whose output is set to zero adds nothing to ``W_O``'s product, so dropping those rows and columns
leaves every other head's numbers as they were: ``Concat(kept) W_O[:, kept] + b_O`` is the output of the
attention with the removed heads zero-ablated (``b_O`` stays; with every head removed the output is
``b_O`` at every position).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .multihead import MultiHeadAttention

__all__ = ["kept_heads", "pruned_attention"]


def kept_heads(num_heads: int, removed: Iterable[int]) -> list[int]:
    """The heads ``0..num_heads-1`` not in ``removed``, in order; ``ValueError`` naming a head out of range."""
    removed = list(removed)
    for h in removed:
        if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < num_heads:
            raise ValueError(f"heads must be ints in 0..{num_heads - 1} (0-based), got {h!r}")
    gone = set(removed)
    return [h for h in range(num_heads) if h not in gone]


def pruned_attention(mha: MultiHeadAttention, removed: Iterable[int]) -> MultiHeadAttention:
    """A new :class:`MultiHeadAttention` holding ``mha``'s heads except ``removed`` (0-based), in their
    order: ``W_Q, W_K, W_V`` (``(H·D_h, E) -> (H'·D_h, E)``) and their biases keep the kept heads' rows,
    ``W_O`` (``(E, H·D_h) -> (E, H'·D_h)``) their columns, ``b_O`` all of it. Same dtype and device, same
    training mode; the int8 copies of the projections (if any) are not carried over."""
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be an attnkit MultiHeadAttention, got {type(mha).__name__}")
    keep = kept_heads(mha.num_heads, removed)
    dh, e = mha.head_dim, mha.embed_dim
    bias = mha.in_proj_bias is not None
    new = MultiHeadAttention(
        e,
        len(keep),
        dropout=mha.dropout,
        bias=bias,
        kdim=mha.kdim,
        vdim=mha.vdim,
        head_dim=dh,
    ).to(device=mha.out_proj.weight.device, dtype=mha.out_proj.weight.dtype)
    rows = torch.tensor([h * dh + i for h in keep for i in range(dh)], dtype=torch.long)  # (H'·Dh,)
    rows = rows.to(mha.out_proj.weight.device)
    with torch.no_grad():
        if mha.packed:  # (3·H·Dh, E): the q, k and v blocks each keep the same rows
            new.in_proj_weight.copy_(torch.cat([w.index_select(0, rows) for w in mha.in_proj_weight.chunk(3)]))
        else:
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                getattr(new, name).copy_(getattr(mha, name).index_select(0, rows))
        if bias:
            new.in_proj_bias.copy_(torch.cat([b.index_select(0, rows) for b in mha.in_proj_bias.chunk(3)]))
            new.out_proj.bias.copy_(mha.out_proj.bias)
        new.out_proj.weight.copy_(mha.out_proj.weight.index_select(1, rows))  # (E, H'·Dh)
    new.train(mha.training)
    return new
