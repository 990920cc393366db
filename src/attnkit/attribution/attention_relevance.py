"""Gradient-weighted attention relevance (Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability
for Interpreting Bi-Modal and Encoder-Decoder Transformers"), for a language model's next tokens.

Each token's relevance starts as itself, ``R = I`` (``n × n``), and every layer in order adds what its
attention moves, weighted by how much the prediction's score depends on it::

    Ā_l = E_h[(∇_{A_l} y ⊙ A_l)⁺],        R ← R + Ā_l · R

with ``A_l`` the layer's attention weights ``(H, n, n)``, ``y = log p(token)`` the score of the token being
explained and ``⁺`` the positive part; the row of ``R`` at the position that predicts the token is its
relevance over the input tokens. Where rollout averages the heads blindly, the gradient keeps the heads
(and the keys) the prediction actually uses; the self-attention rule is the paper's (its rules for
cross-attention and bi-modal models are for encoder-decoders). One forward pass with the weights in the
autograd graph, and one backward pass per explained token: a heavy method.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import InputError
from .result import MethodRows

__all__ = ["compose", "relevance_rows"]


def compose(maps: list[Tensor], grads: list[Tensor]) -> Tensor:
    """``(n, n)``: ``R = Π_l (I + Ā_l)`` applied in layer order, ``Ā_l = E_h[(∇A_l ⊙ A_l)⁺]``, from each
    layer's weights ``maps[l] (H, n, n)`` and their gradients ``grads[l]``."""
    n = maps[0].shape[-1]
    r = torch.eye(n, dtype=torch.float64, device=maps[0].device)
    for a, g in zip(maps, grads, strict=True):
        bar = (g.double() * a.double()).clamp_min(0.0).mean(0)  # (n, n)
        r = r + bar @ r
    return r


def relevance_rows(sa, ids: list[int], prompt_len: int, *, layer=None, head=None) -> MethodRows:
    """The rows of :func:`attnkit.attribution.explain_generation` by gradient-weighted attention relevance:
    ``scores (G, n − 1)``, row ``t`` the relevance of every input token to ``log p(ids[P + t])`` at its
    predicting position ``P − 1 + t``. ``sa``: a text model (:meth:`attention_with_grad`)."""
    if layer is not None or head is not None:
        raise InputError("attention_relevance composes every layer and head: --layer and --head do not apply")
    logits, maps = sa.attention_with_grad(ids[:-1])  # (n-1, V), [(1, H, n-1, n-1)]
    logp = torch.log_softmax(logits.float(), dim=-1)
    rows = []
    positions = range(prompt_len - 1, len(ids) - 1)
    for t, p in enumerate(positions):
        grads = torch.autograd.grad(logp[p, ids[p + 1]], maps, retain_graph=t < len(positions) - 1)
        r = compose([a[0].detach() for a in maps], [g[0] for g in grads])
        rows.append(r[p])
    return MethodRows(torch.stack(rows).cpu())  # (G, n-1)
