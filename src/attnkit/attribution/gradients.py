"""Gradient attributions: saliency, input × gradient and integrated gradients, for every target piece at
once, through a shared-forward engine (the Transformer) or Captum (Kokhlikyan et al. 2020; the others).

The function explained is ``f_t(x) = log p(y_t | y_<t, x)``, the log-probability of the forced target
piece ``t`` given the source, as a function of the model's *input*: the source pieces' embeddings
``(S, E)`` for a translator (the source side of the embedding layer only; the target prefix is held
fixed), the image ``(1, C, C)`` for a captioner.

- saliency (Simonyan et al. 2014): ``|∂f_t/∂x|``;
- input × gradient (Shrikumar et al. 2016): ``x ⊙ ∂f_t/∂x``;
- integrated gradients (Sundararajan et al. 2017): ``(x − x') ⊙ ∫₀¹ ∂f_t(x' + α(x − x'))/∂x dα``
  from a baseline ``x'`` (zero embeddings, i.e. the padding piece's, for a translator: the model
  minus the source's content, positions kept; a black image for a captioner), by Gauss-Legendre
  quadrature. Completeness: the attributions sum to ``Δ_t = f_t(x) − f_t(x')``. By default each
  target piece starts with :data:`DEFAULT_STEPS` points and is refined (points doubled, up to
  :data:`MAX_STEPS`) until ``|Σ a − Δ_t| ≤ 1 % · max(|Δ_t|, 0.1 nats)``; ``extra["convergence_delta"]``
  is Captum's remaining gap per piece and ``extra["steps"]`` the points each piece used.

Every method is batched over target pieces and interpolation points: a row is one (piece, point) pair,
and one backward pass serves up to ``batch`` rows (:data:`DEFAULT_BATCH`; the memory bound). Two engines:

- **shared forward** (:class:`SplitForward`, the attention-only translators): every piece's function is
  read off one forward pass at each point, so the model runs once per point (per group of pieces decoded
  to the same length), not once per row. The output layer's gradient at every position comes from one
  backward (a position's log-probability reads its own features only), and the rows' vector-Jacobian
  products from the features back to the input run batched over pieces
  (``torch.autograd.grad(..., is_grads_batched=True)``, vmap over the backward, attention in its
  composite form, whose backward vmap batches). The work left is one vector-Jacobian product per row.
- **Captum** (every other model): row ``i`` explained for its own piece only (Captum's per-row
  ``target``), so the gradient of the sum over rows of each row's chosen log-probability is every row's
  own gradient; one forward and one vector-Jacobian product per row. vmap over the backward of torch's
  recurrent kernels unrolls them a time step at a time, so RNNs stay here (measured faster).

Every method returns per-feature attributions ``(T, *input_shape)``; :mod:`attnkit.attribution.methods`
reduces them to pieces or grid cells (the L2 norm over a piece's features for ``scores``, the signed
sum for ``raw``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..errors import InputError
from ..hooks import thread_hooks
from ..method_registry import GRADIENTS, names

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_STEPS",
    "GRADIENT_METHODS",
    "SplitForward",
    "attribute",
    "source_embedding_override",
]

#: integrated gradients' first number of quadrature points; by default a target piece whose attributions
#: miss completeness by more than COMPLETENESS · max(|Δ_t|, GAP_FLOOR) is run again with twice the points,
#: up to MAX_STEPS (ReLU kinks along the path, as in the captioners' CNN, need more points than smooth paths)
DEFAULT_STEPS = 32
MAX_STEPS = 256
COMPLETENESS = 0.01
GAP_FLOOR = 0.1
GRADIENT_METHODS = names(needs=GRADIENTS)
#: the most rows one forward+backward pass takes, a row being one (target piece, interpolation point) pair
#: for integrated gradients and one target piece for saliency and input × gradient: the memory a gradient
#: method needs is about ``batch`` copies of the model's activations for one input (``attnkit explain --batch``)
DEFAULT_BATCH = 256
#: the shared-forward engine decodes the pieces in this many groups by position, each to its own last
#: position (the decoder is causal): fewer wasted positions in the backward against one more forward
#: pass per group (4: 7.0 s, 1: 8.9 s, 8: 7.0 s for integrated gradients at 32 points on a 51-piece verse)
SPLIT_GROUPS = 4
#: ... and each group has at least this many pieces: a group's forward pass costs about one piece's backward,
#: so the refinement's few pieces share one (integrated gradients refined to 1 %: 28.1 s with a group per
#: piece, up to 4, against 22.2 s)
SPLIT_MIN_GROUP = 16


class SplitForward(NamedTuple):
    """A model cut where its output layer starts, for the shared-forward engine.

    ``features(x (N, *shape), length) -> (N, length, D)``: the output layer's input at the first
    ``length`` target positions (a causal decoder: position ``t`` reads the target prefix ``≤ t`` only).
    ``log_probs(h (N, L, D)) -> (N, L)``: the log-probability of the forced piece at each position, where
    column ``t`` reads ``h[:, t]`` only.

    ``vmap``: the columns' vector-Jacobian products run batched (vmap over the backward, the forward in the
    composite attention kernel, whose ``(H, L, L)`` maps it holds); False: one backward per column over the
    retained graph, the model's own attention kernel (a decoder-only model's long text, where the maps of
    every layer would outweigh the rest of its activations and vmap gains nothing measurable on a CPU)."""

    features: Callable[[Tensor, int], Tensor]
    log_probs: Callable[[Tensor], Tensor]
    vmap: bool = True


@contextmanager
def source_embedding_override(embedding: torch.nn.Module, src: Tensor, replacement: Tensor):
    """While active, ``embedding(src)`` (this very tensor object, the source) returns ``replacement``;
    the same layer called on anything else (the target prefix of a tied embedding) is unchanged."""

    def hook(module, inputs, output):
        return replacement if inputs[0] is src else None

    with thread_hooks([(embedding, hook)]):
        yield


def _check_batch(batch) -> int:
    if batch is None:
        return DEFAULT_BATCH
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch must be an int >= 1 (rows per forward+backward pass), got {batch!r}")
    return batch


def _chunks(columns: list[int], batch: int) -> list[list[int]]:
    """``columns`` split into the fewest runs of at most ``batch``, of near-equal length."""
    n = -(-len(columns) // batch)
    size = -(-len(columns) // n) if n else 0
    return [columns[i : i + size] for i in range(0, len(columns), size)] if columns else []


def _integrated_gradients(counted, forward, x, base, steps, max_steps, current, batch):
    """Integrated gradients for every target column (input row i is explained for column i), refined per
    column: a column whose completeness gap ``|Σ a − Δ_t|`` exceeds ``COMPLETENESS · max(|Δ_t|, GAP_FLOOR)``
    is run again with twice the points, up to ``max_steps``. Each round's columns go to Captum in runs of at
    most ``batch``, with ``internal_batch_size=batch``: every forward+backward pass takes at most ``batch``
    rows, ``⌊batch / run⌋`` interpolation points of each column of the run (Captum stacks them point-major).
    ``counted`` is the function Captum differentiates; ``current["columns"]`` (set here) says which column
    each row of its input is explained for. Returns ``(attributions, delta, steps used per column)``."""
    from captum.attr import IntegratedGradients

    with torch.no_grad():
        gap = forward(x[:1])[0] - forward(base[:1])[0]  # (T,): Δ_t = f_t(x) − f_t(x')

    def one_round(pending: list[int], steps: int) -> Tensor:
        attrs = []
        for run in _chunks(pending, batch):
            rows = torch.tensor(run, device=x.device)
            current["columns"] = rows
            a = IntegratedGradients(counted).attribute(
                x[rows],
                baselines=base[rows],
                target=run,
                n_steps=steps,
                method="gausslegendre",
                internal_batch_size=batch,
            )  # no return_convergence_delta: Captum would run both ends again per run; _refine has Δ_t
            attrs.append(a.detach())
        return torch.cat(attrs)

    return _refine(torch.zeros_like(x), gap, steps, max_steps, one_round)


def _refine(attr: Tensor, gap: Tensor, steps: int, max_steps: int, one_round) -> tuple[Tensor, Tensor, list[int]]:
    """Integrated gradients' refinement, whatever the engine: ``one_round(columns, steps) -> attributions
    (len(columns), *shape)`` explains the pending columns at ``steps`` points; a column whose completeness
    gap (convergence delta) ``Σ a − Δ_t`` exceeds ``COMPLETENESS · max(|Δ_t|, GAP_FLOOR)`` in size is
    pending again with twice the points, up to ``max_steps``. Fills ``attr (T, *shape)``; returns ``(attr,
    delta (T,), steps used per column)``."""
    n = gap.shape[0]
    delta = torch.zeros(n, dtype=gap.dtype, device=gap.device)
    used = [0] * n
    pending = list(range(n))
    while pending:
        a = one_round(pending, steps)
        rows = torch.tensor(pending, device=attr.device)
        attr[rows] = a
        d = a.flatten(1).sum(1).to(delta.dtype) - gap[rows]  # (len(pending),) Σ a − Δ_t
        delta[rows] = d
        tol = COMPLETENESS * gap[rows].abs().clamp_min(GAP_FLOOR)
        for i in pending:
            used[i] = steps
        pending = [i for i, bad in zip(pending, (d.abs() > tol).tolist()) if bad]
        steps *= 2
        if steps > max_steps:
            break
    return attr, delta, used


def _groups(columns: list[int]) -> list[list[int]]:
    """``columns`` sorted and split into at most :data:`SPLIT_GROUPS` runs of near-equal length, each of at
    least :data:`SPLIT_MIN_GROUP` columns (one run if there are fewer)."""
    ordered = np.array(sorted(columns), dtype=np.int64)
    n = max(1, min(SPLIT_GROUPS, len(ordered) // SPLIT_MIN_GROUP))
    return [g.tolist() for g in np.array_split(ordered, n)] if len(ordered) else []


def _weighted_gradients(
    split: SplitForward, points: Tensor, weights: list[float], columns: list[int], batch: int, tick
) -> Tensor:
    """``Σ_p weights[p] · ∂f_t/∂x (points[p])`` for every column ``t`` of ``columns``:
    ``(len(columns), *shape)``, the shared-forward engine (see the module's docstring). For each group of
    columns (by position) and each run of at most ``batch`` points: one forward pass to the group's last
    position, one backward for the output layer's gradient at every position, then the columns' own
    vector-Jacobian products batched over columns, ``⌊batch / points⌋`` columns a pass. ``tick()`` after
    each of these passes."""
    out = points.new_zeros(len(columns), *points.shape[1:])
    slot = {c: i for i, c in enumerate(columns)}
    w = torch.tensor(weights, dtype=points.dtype, device=points.device)
    for group in _groups(columns):
        length = group[-1] + 1
        for p0 in range(0, points.shape[0], batch):
            x = points[p0 : p0 + batch].detach().requires_grad_(True)  # (p, *shape)
            with sdpa_kernel([SDPBackend.MATH]) if split.vmap else nullcontext():  # vmap batches MATH's backward
                h = split.features(x, length)  # (p, L, D)
            hd = h.detach().requires_grad_(True)
            (g_h,) = torch.autograd.grad(split.log_probs(hd).sum(), hd)  # (p, L, D): column t's at position t
            wp = w[p0 : p0 + x.shape[0]].view(1, -1, *([1] * (points.dim() - 1)))  # (1, p, 1...)
            if not split.vmap:  # one backward per column, the forward's graph retained
                for c in group:
                    cot = torch.zeros_like(h)  # (p, L, D): the column's gradient at its own position only
                    cot[:, c] = g_h[:, c]
                    (g,) = torch.autograd.grad(h, x, cot, retain_graph=True)  # (p, *shape)
                    out[slot[c]] += (g * wp[0]).sum(0)
                    tick()
                continue
            per_pass = max(1, batch // x.shape[0])
            for c0 in range(0, len(group), per_pass):
                run = group[c0 : c0 + per_pass]
                at = torch.tensor(run, device=h.device)
                cot = h.new_zeros(len(run), *h.shape)  # (c, p, L, D): row i's gradient at its own position only
                cot[torch.arange(len(run), device=h.device), :, at] = g_h[:, at].transpose(0, 1)
                (g,) = torch.autograd.grad(h, x, cot, retain_graph=True, is_grads_batched=True)  # (c, p, *shape)
                out[[slot[c] for c in run]] += (g * wp).sum(1)
                tick()
    return out


def _split_passes(n_targets: int, n_points: int, batch: int, vmap: bool = True) -> int:
    """Backward passes of :func:`_weighted_gradients` over ``n_targets`` columns at ``n_points`` points."""
    point_runs = -(-n_points // batch)
    if not vmap:
        return point_runs * n_targets
    per_pass = max(1, batch // min(n_points, batch))
    return point_runs * sum(-(-len(g) // per_pass) for g in _groups(list(range(n_targets))))


def _gauss_legendre(steps: int, dtype, device) -> tuple[Tensor, list[float]]:
    """Gauss-Legendre nodes on [0, 1] ``(steps,)`` and their weights (Captum's ``gausslegendre``)."""
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    return torch.tensor((nodes + 1) / 2, dtype=dtype, device=device), (weights / 2).tolist()


def _integrated_gradients_split(split: SplitForward, x, base, n, steps, max_steps, batch, tick):
    """:func:`_integrated_gradients` on the shared-forward engine for ``n`` columns: the same quadrature,
    refinement rule and results (to float rounding); ``x`` and ``base`` are one input ``(*shape)``."""
    with torch.no_grad():
        ends = [split.log_probs(split.features(end[None], n))[0] for end in (x, base)]  # 2 × (T,)
        gap = (ends[0] - ends[1]).float()  # (T,): Δ_t = f_t(x) − f_t(x')

    def one_round(pending: list[int], steps: int) -> Tensor:
        alphas, weights = _gauss_legendre(steps, x.dtype, x.device)
        points = base + alphas.view(-1, *([1] * x.dim())) * (x - base)  # (steps, *shape)
        return (x - base) * _weighted_gradients(split, points, weights, pending, batch, tick)  # (len(pending), *shape)

    return _refine(x.new_zeros(n, *x.shape), gap, steps, max_steps, one_round)


def _passes(method: str, n_targets: int, steps: int, batch: int) -> int:
    """Forward passes of the first round (the progress estimate: refinement adds more)."""
    runs = _chunks(list(range(n_targets)), batch)
    if method != "integrated_gradients":
        return len(runs)
    return sum(-(-steps // max(1, batch // len(r))) for r in runs)  # Captum's passes over the path


def attribute(
    method: str,
    forward: Callable[[Tensor], Tensor],
    inputs: Tensor,
    n_targets: int,
    *,
    baseline: Tensor | None = None,
    steps: int | None = None,
    batch: int | None = None,
    progress: Callable[[float], None] | None = None,
    forward_at: Callable[[Tensor, Tensor], Tensor] | None = None,
    split: SplitForward | None = None,
) -> tuple[Tensor, Tensor | None, list[int] | None]:
    """Attributions of ``forward (N, *shape) -> (N, n_targets)`` at ``inputs (*shape)`` for every output
    column: ``(attributions (n_targets, *shape), convergence delta (n_targets,) or None, steps per column
    or None)``. Integrated gradients: ``steps`` quadrature points, or by default :data:`DEFAULT_STEPS`
    doubled per column until complete within 1 % (see :func:`_integrated_gradients`).
    ``progress(fraction)`` is called after every forward pass (an estimate: refinement adds passes).

    Batched over target columns and interpolation points: input row ``i`` is explained for column ``i``
    only (Captum's per-row ``target``), so the gradient of the sum of the rows' chosen outputs gives every
    row its own gradient, and one forward+backward pass serves up to ``batch`` rows (default
    :data:`DEFAULT_BATCH`; it bounds the memory, and does not change the attributions beyond float rounding).

    ``forward_at(batch (N, *shape), columns (N,)) -> (N,)``, where given, computes only column
    ``columns[i]`` of row ``i``: the one value Captum reads from that row. The attributions are the same;
    the work is a fraction of the whole table.

    ``split``, where given, runs the shared-forward engine instead of Captum (``forward`` and
    ``forward_at`` are then unused): one forward pass per point serves every column (module docstring)."""
    if method not in GRADIENT_METHODS:
        raise ValueError(f"method must be one of {GRADIENT_METHODS}, got {method!r}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 2):
        raise InputError(f"steps must be an int >= 2, got {steps!r}")
    batch = _check_batch(batch)
    first = steps or DEFAULT_STEPS
    if split is not None:
        return _attribute_split(method, split, inputs, n_targets, baseline, first, steps, batch, progress)
    try:
        from captum.attr import InputXGradient, Saliency
    except ImportError:
        raise InputError(
            f"{method} needs Captum: pip install 'attnkit[explain]' (or captum); the other methods work without it"
        ) from None

    x = inputs.detach().unsqueeze(0).expand(n_targets, *inputs.shape).contiguous().requires_grad_(True)
    calls = {"n": 0}
    total = _passes(method, n_targets, first, batch)

    current = {"columns": torch.arange(n_targets, device=inputs.device)}  # the column of each input row

    def one_column_per_row(rows: Tensor) -> Tensor:
        columns = current["columns"]
        repeats, rest = divmod(rows.shape[0], len(columns))
        if rest:
            raise RuntimeError(f"expected a multiple of {len(columns)} rows, got {rows.shape[0]}")
        cols = columns.repeat(repeats)  # Captum stacks the path's points point-major: row r is input row r mod n
        values = forward_at(rows, cols)  # (N,)
        index = torch.arange(rows.shape[0], device=rows.device)
        return values.new_zeros(rows.shape[0], n_targets).index_put((index, cols), values)  # (N, n_targets)

    def counted(rows: Tensor) -> Tensor:
        out = forward(rows) if forward_at is None else one_column_per_row(rows)
        calls["n"] += 1
        if progress is not None:
            progress(min(0.99, calls["n"] / total))
        return out

    with torch.enable_grad():
        if method == "integrated_gradients":
            base = torch.zeros_like(x) if baseline is None else baseline.detach().expand_as(x).contiguous()
            return _integrated_gradients(
                counted, forward, x, base, first, first if steps else MAX_STEPS, current, batch
            )
        attr = torch.zeros_like(x)
        explainer = Saliency(counted) if method == "saliency" else InputXGradient(counted)
        for run in _chunks(list(range(n_targets)), batch):
            rows = torch.tensor(run, device=x.device)
            current["columns"] = rows
            extra = {"abs": True} if method == "saliency" else {}
            attr[rows] = explainer.attribute(x[rows], target=run, **extra).detach()
        return attr, None, None


def _attribute_split(method, split, inputs, n_targets, baseline, first, steps, batch, progress):
    """:func:`attribute` on the shared-forward engine."""
    x = inputs.detach()
    total = _split_passes(n_targets, first if method == "integrated_gradients" else 1, batch, split.vmap)
    calls = {"n": 0}

    def tick() -> None:
        calls["n"] += 1
        if progress is not None:
            progress(min(0.99, calls["n"] / total))

    with torch.enable_grad():
        if method == "integrated_gradients":
            base = torch.zeros_like(x) if baseline is None else baseline.detach().expand_as(x).to(x.dtype)
            return _integrated_gradients_split(
                split, x, base, n_targets, first, first if steps else MAX_STEPS, batch, tick
            )
        g = _weighted_gradients(split, x[None], [1.0], list(range(n_targets)), batch, tick)  # (T, *shape)
    return (g.abs() if method == "saliency" else x * g), None, None
