"""Score functions: how well each key matches a query.

Every score maps a query ``s`` and a key ``h`` to a real number ``e``:

=================  ===============================  ====================================
name (aliases)     formula                          parameters
=================  ===============================  ====================================
``dot``            ``e = s·h``                      none (Luong "dot")
``scaled_dot``     ``e = s·h / √d``                 none (Vaswani et al.)
``bilinear``       ``e = sᵀ W h``                   ``W (Dq, Dk)`` (Luong "general")
(``general``)
``additive``       ``e = vᵀ tanh(W s + U h + b)``   ``W (A, Dq)``, ``U (A, Dk)``, ``v (A,)``,
(``concat``,                                        optional ``b (A,)`` (Bahdanau; the MLP
``bahdanau``,                                       ``f_att`` of Show, Attend and Tell)
``mlp``)
=================  ===============================  ====================================

Shapes: queries ``(..., Nq, Dq)``, keys ``(..., Nk, Dk)``, scores ``(..., Nq, Nk)``.

Each score is split in two steps so that a decoder can project the keys **once per sentence**
and reuse them at every step (Bahdanau's ``U h_j`` term): ``prepare_keys(keys)`` then
``score_prepared(query, prepared)``. The functional forms take the parameters explicitly; the
modules (:class:`Dot`, :class:`ScaledDot`, :class:`Bilinear`, :class:`Additive`) own them.

The additive score is the expensive one: the naive form materialises ``(B, Nq, Nk, A)``.
:func:`additive_prepared` computes it over cache-sized blocks (:mod:`attnkit.attention.additive_fused`)
and, without autograd, in place in one reused buffer (no page faults on fresh large temporaries).
Its tanh is computed as ``2σ(2x) − 1``: PyTorch's CPU sigmoid is vectorised where its tanh is not
(several times faster: measured in benchmarks/RESULTS.md, section "Fused additive attention"), and the result is within
2e-7 of float64 tanh.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import additive_fused

__all__ = [
    "SCORE_ALIASES",
    "Additive",
    "Bilinear",
    "Dot",
    "ScaledDot",
    "ScoreModule",
    "additive",
    "additive_prepared",
    "bilinear",
    "canonical_score_name",
    "dot",
    "make_score",
    "scaled_dot",
]

SCORE_ALIASES = {
    "dot": "dot",
    "scaled_dot": "scaled_dot",
    "scaled-dot": "scaled_dot",
    "bilinear": "bilinear",
    "general": "bilinear",
    "additive": "additive",
    "concat": "additive",
    "bahdanau": "additive",
    "mlp": "additive",
}


def canonical_score_name(name: str) -> str:
    """Map a score name or alias to one of ``dot``, ``scaled_dot``, ``bilinear``, ``additive``."""
    if not isinstance(name, str):
        raise TypeError(f"score must be a string or a score module, got {type(name).__name__}")
    try:
        return SCORE_ALIASES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown score {name!r}; expected one of {sorted(SCORE_ALIASES)}") from None


def _check_qk(query: Tensor, key: Tensor, *, same_dim: bool) -> None:
    if query.dim() < 2 or key.dim() < 2:
        raise ValueError(
            f"query and key must be at least 2-D (..., N, D), got query {tuple(query.shape)} and key {tuple(key.shape)}"
        )
    if same_dim and query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query feature size {query.shape[-1]} (shape {tuple(query.shape)}) must equal key feature "
            f"size {key.shape[-1]} (shape {tuple(key.shape)}) for a dot-product score; use 'bilinear' "
            "or 'additive' for different sizes"
        )


def dot(query: Tensor, key: Tensor) -> Tensor:
    """``e_ij = q_i · k_j``. ``(..., Nq, D), (..., Nk, D) -> (..., Nq, Nk)``."""
    _check_qk(query, key, same_dim=True)
    return query @ key.transpose(-2, -1)


def scaled_dot(query: Tensor, key: Tensor, scale: float | None = None) -> Tensor:
    """``e_ij = q_i · k_j / √d`` (or ``· scale``). ``(..., Nq, D), (..., Nk, D) -> (..., Nq, Nk)``."""
    _check_qk(query, key, same_dim=True)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    return (query * scale) @ key.transpose(-2, -1)


def bilinear(query: Tensor, key: Tensor, weight: Tensor) -> Tensor:
    """``e_ij = q_iᵀ W k_j`` with ``W (Dq, Dk)``. ``(..., Nq, Dq), (..., Nk, Dk) -> (..., Nq, Nk)``."""
    _check_qk(query, key, same_dim=False)
    if weight.shape != (query.shape[-1], key.shape[-1]):
        raise ValueError(
            f"weight must have shape (Dq, Dk) = {(query.shape[-1], key.shape[-1])}, got {tuple(weight.shape)}"
        )
    return query @ (key @ weight.transpose(0, 1)).transpose(-2, -1)  # W k_j: (..., Nk, Dq)


def additive(
    query: Tensor,
    key: Tensor,
    w_query: Tensor,
    w_key: Tensor,
    v: Tensor,
    bias: Tensor | None = None,
) -> Tensor:
    """``e_ij = vᵀ tanh(W q_i + U k_j + b)``.

    ``W = w_query (A, Dq)``, ``U = w_key (A, Dk)``, ``v (A,)``, ``b (A,)`` optional.
    ``(..., Nq, Dq), (..., Nk, Dk) -> (..., Nq, Nk)``.
    """
    _check_qk(query, key, same_dim=False)
    if w_query.dim() != 2 or w_query.shape[1] != query.shape[-1]:
        raise ValueError(f"w_query must be (A, Dq={query.shape[-1]}), got {tuple(w_query.shape)}")
    if w_key.shape != (w_query.shape[0], key.shape[-1]):
        raise ValueError(f"w_key must be (A={w_query.shape[0]}, Dk={key.shape[-1]}), got {tuple(w_key.shape)}")
    if v.shape != (w_query.shape[0],):
        raise ValueError(f"v must be (A={w_query.shape[0]},), got {tuple(v.shape)}")
    return additive_prepared(F.linear(query, w_query), F.linear(key, w_key, bias), v)


def _broadcast_batch(q: Sequence[int], k: Sequence[int]) -> tuple[int, ...]:
    """The broadcast of the query's and the key's batch shapes (NumPy's rules), in plain Python:
    ``torch.broadcast_shapes`` imports torch's symbolic-shape machinery (sympy) on first use, a
    noticeable part of a whole ``attnkit translate`` run (measured in benchmarks/RESULTS.md, section
    "RNNsearch against OpenNMT-py")."""
    n = max(len(q), len(k))
    q, k = (1,) * (n - len(q)) + tuple(q), (1,) * (n - len(k)) + tuple(k)
    if any(a != b and 1 not in (a, b) for a, b in zip(q, k)):
        raise ValueError(f"projected query batch shape {q} and key batch shape {k} do not broadcast")
    return tuple(b if a == 1 else a for a, b in zip(q, k))


def additive_prepared(query_proj: Tensor, key_proj: Tensor, v: Tensor) -> Tensor:
    """``e_ij = vᵀ tanh(a_i + b_j)`` from projected queries ``(..., Nq, A)`` and keys ``(..., Nk, A)``.

    Computed over cache-sized blocks (:func:`attnkit.attention.additive_fused.block_plan`) instead of
    materialising ``(..., Nq, Nk, A)``. Without autograd the block lives in one reused buffer and is
    updated in place (no page faults on fresh large temporaries).
    """
    if query_proj.shape[-1] != key_proj.shape[-1] or v.shape[-1] != query_proj.shape[-1]:
        raise ValueError(
            f"projected query {tuple(query_proj.shape)}, key {tuple(key_proj.shape)} and v {tuple(v.shape)} "
            "must share the last (attention hidden) size"
        )
    batch = _broadcast_batch(query_proj.shape[:-2], key_proj.shape[:-2])
    nq, nk, a = query_proj.shape[-2], key_proj.shape[-2], query_proj.shape[-1]
    # one dtype for the three (under autocast the projections come in bf16/fp16 and v in float32)
    dtype = torch.promote_types(torch.promote_types(query_proj.dtype, key_proj.dtype), v.dtype)
    q = query_proj.to(dtype).expand(*batch, nq, a).reshape(-1, nq, a)  # (B*, Nq, A)
    k = key_proj.to(dtype).expand(*batch, nk, a).reshape(-1, nk, a)  # (B*, Nk, A)
    v = v.to(dtype)
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)

    if grad:
        if nq > 1:
            # Many queries per key set (a whole target sentence, self-attention): the fused function,
            # which keeps no (B, Nq, Nk, A) tanh and recomputes it in the backward pass
            # (benchmarks/RESULTS.md: 1.65× faster and a tenth of the memory at B=64, 50×50, A=512).
            return additive_fused.additive_scores(q, k, v).reshape(*batch, nq, nk)
        # One query per step (a decoder step): autograd's broadcast form is faster there (the fused
        # function recomputes the layer: 114 against 72 ms for 50 steps at B=64, Nk=50, A=256, two threads).
        return additive_fused.broadcast_scores(q, k, v).reshape(*batch, nq, nk)

    return additive_fused.scores_by_blocks(q, k, v).reshape(
        *batch, nq, nk
    )  # blocks in one reused buffer, updated in place


class ScoreModule(nn.Module):
    """Base of the score modules: ``forward(query, key) = score_prepared(query, prepare_keys(key))``.

    ``prepare_keys`` holds the work that depends on the keys alone, so a decoder that attends
    over the same keys at every step calls it once.
    """

    #: True when the score is ``q·k·scale`` and so may use the fused attention kernel.
    is_dot_product: bool = False
    #: The formula, in the notation of the RNN encoder-decoder (query ``s``, key ``h_j``), for display.
    formula: str = "e_j = f(s, h_j)"

    def prepare_keys(self, key: Tensor) -> Tensor:
        return key

    def score_prepared(self, query: Tensor, prepared_key: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, query: Tensor, key: Tensor) -> Tensor:
        return self.score_prepared(query, self.prepare_keys(key))


class Dot(ScoreModule):
    """``e = s·h`` (Luong's "dot")."""

    is_dot_product = True
    scale = 1.0
    formula = "e_j = sᵀ h_j"

    def score_prepared(self, query: Tensor, prepared_key: Tensor) -> Tensor:
        return dot(query, prepared_key)


class ScaledDot(ScoreModule):
    """``e = s·h / √d`` (Vaswani et al.), or ``s·h · scale`` with an explicit ``scale``."""

    is_dot_product = True
    formula = "e_j = sᵀ h_j / √d"

    def __init__(self, scale: float | None = None):
        super().__init__()
        self.scale = scale

    def score_prepared(self, query: Tensor, prepared_key: Tensor) -> Tensor:
        return scaled_dot(query, prepared_key, self.scale)


class Bilinear(ScoreModule):
    """``e = sᵀ W h`` (Luong's "general"); ``W (query_dim, key_dim)``; keys prepared as ``W h``."""

    formula = "e_j = sᵀ W h_j"

    def __init__(self, query_dim: int, key_dim: int | None = None):
        super().__init__()
        key_dim = query_dim if key_dim is None else key_dim
        self.weight = nn.Parameter(torch.empty(query_dim, key_dim))
        nn.init.xavier_uniform_(self.weight)

    def prepare_keys(self, key: Tensor) -> Tensor:
        if key.shape[-1] != self.weight.shape[1]:
            raise ValueError(f"key feature size must be {self.weight.shape[1]}, got shape {tuple(key.shape)}")
        return key @ self.weight.transpose(0, 1)  # (..., Nk, Dq)

    def score_prepared(self, query: Tensor, prepared_key: Tensor) -> Tensor:
        if query.shape[-1] != self.weight.shape[0]:
            raise ValueError(f"query feature size must be {self.weight.shape[0]}, got shape {tuple(query.shape)}")
        return query @ prepared_key.transpose(-2, -1)


class Additive(ScoreModule):
    """``e = vᵀ tanh(W s + U h + b)`` (Bahdanau's alignment model, the MLP ``f_att``).

    ``hidden_dim`` (A) is the size of the tanh layer. Keys are prepared as ``U h + b`` once.
    """

    formula = "e_j = vᵀ tanh(W s + U h_j + b)"

    def __init__(self, query_dim: int, key_dim: int | None = None, hidden_dim: int | None = None):
        super().__init__()
        key_dim = query_dim if key_dim is None else key_dim
        hidden_dim = query_dim if hidden_dim is None else hidden_dim
        self.w_query = nn.Linear(query_dim, hidden_dim, bias=False)
        self.w_key = nn.Linear(key_dim, hidden_dim, bias=True)
        self.v = nn.Parameter(
            torch.empty(hidden_dim).uniform_(-1.0 / math.sqrt(hidden_dim), 1.0 / math.sqrt(hidden_dim))
        )

    def prepare_keys(self, key: Tensor) -> Tensor:
        if key.shape[-1] != self.w_key.in_features:
            raise ValueError(f"key feature size must be {self.w_key.in_features}, got shape {tuple(key.shape)}")
        return self.w_key(key)  # (..., Nk, A)

    def score_prepared(self, query: Tensor, prepared_key: Tensor) -> Tensor:
        if query.shape[-1] != self.w_query.in_features:
            raise ValueError(f"query feature size must be {self.w_query.in_features}, got shape {tuple(query.shape)}")
        return additive_prepared(self.w_query(query), prepared_key, self.v)


def make_score(
    score: str | ScoreModule,
    query_dim: int | None = None,
    key_dim: int | None = None,
    hidden_dim: int | None = None,
    scale: float | None = None,
) -> ScoreModule:
    """Build a score module from a name (or return the module given)."""
    if isinstance(score, ScoreModule):
        return score
    name = canonical_score_name(score)
    if name == "dot":
        return Dot()
    if name == "scaled_dot":
        return ScaledDot(scale)
    if query_dim is None:
        raise ValueError(f"score {score!r} has learned parameters: query_dim is required")
    if name == "bilinear":
        return Bilinear(query_dim, key_dim)
    return Additive(query_dim, key_dim, hidden_dim)


ScoreFn = Callable[[Tensor, Tensor], Tensor]
