"""``attend``: score, normalise, sum — the three steps every attention here shares, from Bahdanau et al.
(2015) to the Transformer (Vaswani et al. 2017) and Show, Attend and Tell (Xu et al. 2015).

Given queries ``Q (B, Nq, Dq)``, keys ``K (B, Nk, Dk)`` and values ``V (B, Nk, Dv)``:

1. **score**   ``e_ij = f(q_i, k_j)`` (see :mod:`attnkit.attention.scores`),
2. **normalise** ``α_ij = softmax_j(e_ij)`` over the keys the mask allows (soft attention), or a
   hard choice of one key: the best (``hard="argmax"``), or, with :func:`attend_hard`, one sampled
   from ``α`` (Show, Attend and Tell's stochastic hard attention, with what REINFORCE needs),
3. **sum**     ``c_i = Σ_j α_ij v_j``.

Heads are just more batch dimensions: ``(B, H, N, D)`` inputs work unchanged.
A query whose mask allows no key gets zero weights and a zero context, with finite gradients.
When the weights are not needed and the score is a dot product, the fused
:func:`torch.nn.functional.scaled_dot_product_attention` kernel does the work.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from .dropout import dropout, uses_fast_dropout
from .masks import check_mask
from .scores import Dot, ScaledDot, ScoreModule, additive, bilinear, canonical_score_name, scaled_dot

__all__ = [
    "HARD_MODES",
    "AttentionOutput",
    "HardAttention",
    "attend",
    "attend_hard",
    "fused_attention",
    "masked_softmax",
]

HARD_MODES = (None, "argmax")

#: The fused kernels :func:`fused_attention` lets half-precision CUDA inputs use: all but cuDNN's.
_PLANLESS_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def fused_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    dropout_p: float,
    scale: float | None,
    *,
    is_causal: bool = False,
    enable_gqa: bool = False,
) -> Tensor:
    """:func:`torch.nn.functional.scaled_dot_product_attention`, without cuDNN's backend for fp16/bf16
    CUDA inputs.

    cuDNN's attention builds an execution plan for each new shape, milliseconds of CPU per call, and
    translation batches change their lengths at every step (and every decoding step has one more key),
    so its plans are never reused: on a GPU a bf16-autocast training step of the shipped Transformer was
    many times slower than in fp32, each attention call spending far more CPU in cuDNN than GPU work
    (measured in benchmarks/RESULTS.md, section "GPU"). Flash and memory-efficient attention need no plan.
    Other devices and dtypes are unchanged. ``is_causal`` and ``enable_gqa`` are passed on (torch's
    meaning: a lower-triangular mask aligned at the first key; ``H_kv`` key/value heads shared by groups
    of ``H / H_kv`` query heads).
    """
    kwargs = {"attn_mask": mask, "dropout_p": dropout_p, "scale": scale, "is_causal": is_causal}
    if enable_gqa:
        kwargs["enable_gqa"] = True
    if query.is_cuda and query.dtype in (torch.float16, torch.bfloat16):
        with sdpa_kernel(_PLANLESS_BACKENDS):
            return F.scaled_dot_product_attention(query, key, value, **kwargs)
    return F.scaled_dot_product_attention(query, key, value, **kwargs)


class AttentionOutput(NamedTuple):
    """``(context, weights)``; ``weights`` is ``None`` unless requested."""

    context: Tensor  # (B, [H,] Nq, Dv)
    weights: Tensor | None  # (B, [H,] Nq, Nk)


class HardAttention(NamedTuple):
    """Result of :func:`attend_hard`: the context of one chosen key per query, and what led to it.

    ``weights`` is the one-hot choice ``s_i``; ``probs`` the soft distribution ``α_i`` it was drawn
    from (or whose argmax it is); ``log_prob`` ``log α_{i,s_i}`` (0 for a query with no allowed
    key), which REINFORCE multiplies by the reward; ``expected`` the soft context ``Σ_j α_ij v_j``
    (Xu et al.'s expected context, which some training steps use instead of the sample).
    """

    context: Tensor  # (B, [H,] Nq, Dv)
    weights: Tensor  # (B, [H,] Nq, Nk) one-hot
    log_prob: Tensor  # (B, [H,] Nq)
    probs: Tensor  # (B, [H,] Nq, Nk)
    index: Tensor  # (B, [H,] Nq) long
    expected: Tensor  # (B, [H,] Nq, Dv)


def masked_softmax(scores: Tensor, mask: Tensor | None, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` restricted to ``mask`` (``True`` = allowed).

    Masked entries are exactly 0; a row with nothing allowed is all zeros (not NaN) and its
    gradient is zero (finite). Scores are filled with the dtype's lowest finite value rather than
    ``-inf`` so that no ``inf - inf`` appears in the forward or backward pass.
    """
    if mask is None:
        return torch.softmax(scores, dim=dim)
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=dim) * mask  # zeros masked keys and fully masked rows


def _resolve_score(score, score_params: dict | None) -> tuple[str | None, object]:
    """Return (canonical name or None for a module/callable, callable computing scores)."""
    if isinstance(score, ScoreModule):
        return None, score
    if callable(score) and not isinstance(score, str):
        return None, score
    name = canonical_score_name(score)
    params = dict(score_params or {})
    if name in ("bilinear", "additive"):
        needed = ("weight",) if name == "bilinear" else ("w_query", "w_key", "v")
        missing = [p for p in needed if p not in params]
        if missing:
            raise ValueError(
                f"score {score!r} has learned parameters; pass them as score_params={{{', '.join(repr(p) + ': ...' for p in needed)}}} "
                f"(missing {missing}), or pass a score module such as attnkit.attention.scores.{'Bilinear' if name == 'bilinear' else 'Additive'}"
            )
    elif params and name == "dot":
        raise ValueError(f"score 'dot' takes no score_params, got {sorted(params)}")
    if name == "bilinear":
        return name, lambda q, k: bilinear(q, k, params["weight"])
    if name == "additive":
        return name, lambda q, k: additive(q, k, params["w_query"], params["w_key"], params["v"], params.get("bias"))
    return name, None


def _check_inputs(query: Tensor, key: Tensor, value: Tensor) -> None:
    for argname, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{argname} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"{argname} must have shape (B, [H,] N, D) or (N, D), got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{argname} must be a floating-point tensor, got dtype {t.dtype}")
    if not (query.dim() == key.dim() == value.dim()):
        raise ValueError(
            f"query, key and value must have the same rank, got query {tuple(query.shape)}, "
            f"key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if key.shape[:-1] != value.shape[:-1]:
        raise ValueError(
            f"key and value must agree on all but the last dimension (B, [H,] Nk), got key "
            f"{tuple(key.shape)} and value {tuple(value.shape)}"
        )
    if query.shape[:-2] != key.shape[:-2]:
        raise ValueError(
            f"query and key must have the same batch dimensions, got query {tuple(query.shape)} "
            f"(batch {tuple(query.shape[:-2])}) and key {tuple(key.shape)} (batch {tuple(key.shape[:-2])})"
        )


def attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    score="scaled_dot",
    mask: Tensor | None = None,
    hard: str | None = None,
    need_weights: bool = True,
    scale: float | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
    score_params: dict | None = None,
    chunk_size: int | None = None,
) -> AttentionOutput:
    """Attend from ``query`` over ``key``/``value``: ``c_i = Σ_j α_ij v_j`` with ``α = norm(f(q_i, k_j))``.

    Args:
        query: ``(B, [H,] Nq, Dq)`` (or ``(Nq, Dq)``).
        key: ``(B, [H,] Nk, Dk)``.
        value: ``(B, [H,] Nk, Dv)``.
        score: ``"dot"``, ``"scaled_dot"``, ``"bilinear"``/``"general"``,
            ``"additive"``/``"concat"``/``"bahdanau"``/``"mlp"``, a score module from
            :mod:`attnkit.attention.scores`, or any callable ``(q, k) -> (..., Nq, Nk)``.
        mask: bool, ``True`` = may attend, broadcastable to ``(B, [H,] Nq, Nk)``.
        hard: ``None`` (soft) or ``"argmax"`` (context = value of the best key). To draw a key at
            random (and get its log-probability), use :func:`attend_hard`.
        need_weights: return the weights; when ``False`` and the score is a dot product, the
            fused kernel runs and ``weights`` is ``None``.
        scale: multiplier of ``q·k`` for ``scaled_dot`` (default ``1/√d``).
        dropout_p, training: dropout on the weights (soft attention only), active when training.
        score_params: explicit parameters for a learned score named by string:
            ``{"weight": W}`` for bilinear, ``{"w_query", "w_key", "v", ["bias"]}`` for additive.
        chunk_size: compute over blocks of this many queries (bounded memory; same result).

    Returns:
        :class:`AttentionOutput` ``(context (B, [H,] Nq, Dv), weights (B, [H,] Nq, Nk) or None)``.
    """
    if hard == "sample":
        raise ValueError(
            "hard='sample' draws a key at random and returns its log-probability too: "
            "use attend_hard(query, key, value, mode='sample')"
        )
    if hard not in HARD_MODES:
        raise ValueError(f"hard must be one of {HARD_MODES}, got {hard!r}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    query, key, value, mask, unbatched = _batched(query, key, value, mask)

    if isinstance(score, ScaledDot):  # parameter-free modules take the named path (fused kernel)
        score, scale = "scaled_dot", score.scale if scale is None else scale
    elif isinstance(score, Dot):
        score = "dot"
    name, score_fn = _resolve_score(score, score_params)
    if name in ("dot", "scaled_dot"):
        if query.shape[-1] != key.shape[-1]:
            raise ValueError(
                f"query feature size {query.shape[-1]} (shape {tuple(query.shape)}) must equal key feature size "
                f"{key.shape[-1]} (shape {tuple(key.shape)}) for score {name!r}"
            )
        if name == "dot":
            scale = 1.0
        elif scale is None:
            scale = 1.0 / math.sqrt(query.shape[-1])
    elif scale is not None:
        raise ValueError(f"scale applies to the 'scaled_dot' score only, not {score!r}")

    # Fast path: the fused kernel, when nothing needs the weights. Not while training with dropout on
    # the CPU: there torch's kernel falls back to its explicit products and draws its dropout mask with a
    # slow bernoulli_ (see .dropout), so the explicit path below, with the fast dropout, is quicker.
    fused_ok = not uses_fast_dropout(query, dropout_p, training)
    if name is not None and score_fn is None and hard is None and not need_weights and chunk_size is None and fused_ok:
        ctx = fused_attention(query, key, value, mask, dropout_p if training else 0.0, scale)
        out = AttentionOutput(ctx, None)
        return AttentionOutput(ctx.squeeze(0), None) if unbatched else out

    if score_fn is None:
        score_fn = lambda q, k: scaled_dot(q, k, scale)

    nq = query.shape[-2]
    if chunk_size is not None and chunk_size < nq:
        parts = []
        for i in range(0, nq, chunk_size):
            m = None
            if mask is not None:
                m = mask if mask.shape[-2] == 1 else mask[..., i : i + chunk_size, :]
            parts.append(
                _attend_block(
                    query[..., i : i + chunk_size, :], key, value, score_fn, m, hard, need_weights, dropout_p, training
                )
            )
        ctx = torch.cat([p[0] for p in parts], dim=-2)
        weights = torch.cat([p[1] for p in parts], dim=-2) if need_weights else None
        out = AttentionOutput(ctx, weights)
    else:
        out = AttentionOutput(
            *_attend_block(query, key, value, score_fn, mask, hard, need_weights, dropout_p, training)
        )
    if unbatched:
        out = type(out)(*(t.squeeze(0) if t is not None else None for t in out))
    return out


def _batched(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None):
    """Checked inputs with a batch dimension (unbatched ``(N, D)`` ones get one, as torch allows),
    the mask checked against the scores' shape ``(B, [H,] Nq, Nk)``, and whether they were unbatched."""
    _check_inputs(query, key, value)
    unbatched = query.dim() == 2
    if unbatched:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
        if mask is not None and mask.dim() == 2:
            mask = mask.unsqueeze(0)
    if mask is not None:
        check_mask(mask, (*query.shape[:-1], key.shape[-2]), name="mask")
    return query, key, value, mask, unbatched


def _attend_block(query, key, value, score_fn, mask, hard, need_weights, dropout_p, training):
    scores = score_fn(query, key)  # (B, [H,] nq, Nk)
    if hard == "argmax":
        weights = _argmax_weights(scores, mask)
        ctx = weights @ value  # picks one value row (or zeros)
        return ctx, (weights if need_weights else None)
    weights = masked_softmax(scores, mask)
    attn = dropout(weights, dropout_p, training) if dropout_p > 0 else weights
    ctx = attn @ value  # (B, [H,] nq, Dv)
    return ctx, (weights if need_weights else None)


def _argmax_weights(scores: Tensor, mask: Tensor | None) -> Tensor:
    """One-hot weights at the best allowed key; all zeros for a row with no allowed key."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    idx = scores.argmax(dim=-1, keepdim=True)
    weights = torch.zeros_like(scores).scatter_(-1, idx, 1.0)
    if mask is not None:
        weights = weights * mask.expand_as(scores).any(dim=-1, keepdim=True)
    return weights.detach()


def attend_hard(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    mode: str = "sample",
    score="scaled_dot",
    mask: Tensor | None = None,
    scale: float | None = None,
    score_params: dict | None = None,
    generator: torch.Generator | None = None,
) -> HardAttention:
    """Hard attention: each query reads the value of ONE key, ``c_i = v_{s_i}``.

    ``mode="sample"`` draws ``s_i ~ α_i = softmax_j f(q_i, k_j)`` (Xu et al.'s stochastic hard
    attention, trained with REINFORCE from :attr:`HardAttention.log_prob`); ``mode="argmax"`` takes
    ``s_i = argmax_j α_ij`` (its deterministic test-time form). Arguments as in :func:`attend`.
    """
    if mode not in ("sample", "argmax"):
        raise ValueError(f"mode must be 'sample' or 'argmax', got {mode!r}")
    query, key, value, mask, unbatched = _batched(query, key, value, mask)
    name, score_fn = _resolve_score(score, score_params)
    if score_fn is None:
        if name == "dot":
            scale = 1.0
        s = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
        score_fn = lambda q, k: scaled_dot(q, k, s)
    scores = score_fn(query, key)  # (B, [H,] Nq, Nk)
    probs = masked_softmax(scores, mask)
    flat = probs.detach().reshape(-1, probs.shape[-1])
    alive = flat.sum(-1) > 0
    if mode == "sample":
        safe = torch.where(alive.unsqueeze(-1), flat, torch.ones_like(flat))  # any row works where nothing is allowed
        index = torch.multinomial(safe, 1, generator=generator).reshape(probs.shape[:-1])  # (B, [H,] Nq)
    else:
        index = flat.argmax(-1).reshape(probs.shape[:-1])
    alive = alive.reshape(probs.shape[:-1])
    onehot = torch.zeros_like(probs).scatter_(-1, index.unsqueeze(-1), 1.0) * alive.unsqueeze(-1)
    chosen = probs.gather(-1, index.unsqueeze(-1)).squeeze(-1)
    log_prob = torch.where(alive, torch.log(chosen.clamp_min(torch.finfo(chosen.dtype).tiny)), torch.zeros_like(chosen))
    out = HardAttention(onehot.detach() @ value, onehot.detach(), log_prob, probs, index, probs @ value)
    if unbatched:
        out = HardAttention(*(t.squeeze(0) for t in out))
    return out
