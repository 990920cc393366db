"""Attribution patching: activation patching's first-order approximation, from one backward pass.

Nanda (2023), "Attribution Patching: Activation Patching At Industrial Scale"; Syed, Rager & Conmy (2023),
"Attribution Patching Outperforms Automated Circuit Discovery". Patching activation ``a`` from its value
``a_base`` on the run patched into to ``a_source`` changes the metric ``m`` by about::

    m(a_source) − m(a_base) ≈ (a_source − a_base) · ∂m/∂a |_base

the Taylor expansion at the base run. Denoising (the default) the base is the corrupted run and the
source the clean one; noising, the reverse (:mod:`attnkit.attribution.patching`). One forward on the
source run records every head's output and the residual stream; one forward and one backward on the base
run give every gradient at once, so **every** head and residual-stream cell is estimated from 3 passes,
where activation patching runs one forward per cell. The estimates are normalised as the patching maps are
(:attr:`~attnkit.attribution.patching.PatchingMap.effect`: the fraction of the answer restored, or lost).
The approximation is exact for a metric linear in the activation and degrades where the patch moves an
attention pattern or a softmax far (Nanda's caveats; Syed et al. measure how well it ranks edges);
:func:`compare_with_activation_patching` reports the Pearson correlation with the real maps and the cost of each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from ..hooks import thread_hooks
from .interventions import attention_sites, record_heads
from .patching import (
    PatchingMap,
    base_and_source,
    eval_mode,
    normalised_effect,
    patch_heads,
    patch_metric,
    patch_residual,
)
from .stream_interventions import record_stream

__all__ = ["AttributionComparison", "AttributionPatching", "attribution_patch", "compare_with_activation_patching"]


@dataclass
class AttributionPatching:
    """The first-order estimates of the metric after each patch: ``heads (L, H)`` and ``residual (L+1, N)``
    (raw metric values, ``base + (a_source − a_base)·∂m/∂a``, as :attr:`PatchingMap.scores` holds them), the
    metric on the clean and corrupted runs, ``passes`` (2 forwards, 1 backward) in ``seconds``."""

    direction: str
    metric: str
    heads: Tensor
    residual: Tensor
    clean: float
    corrupt: float
    position: int
    passes: int
    seconds: float

    def _map(self, site: str, scores: Tensor) -> PatchingMap:
        args = (self.clean, self.corrupt, self.position, self.passes, self.seconds, self.direction)
        return PatchingMap(site, self.metric, scores, *args)

    def head_map(self) -> PatchingMap:
        """The head estimates as a :class:`PatchingMap` (its ``runs`` the passes)."""
        return self._map("heads", self.heads)

    def residual_map(self) -> PatchingMap:
        """The residual-stream estimates as a :class:`PatchingMap`."""
        return self._map("residual", self.residual)

    def to_dict(self) -> dict:
        return {
            "method": "attribution patching (first order)",
            "passes": self.passes,
            "seconds": self.seconds,
            "heads": self.head_map().to_dict(),
            "residual": self.residual_map().to_dict(),
        }


def attribution_patch(
    model, clean_ids, corrupt_ids, target, foil=None, *, position: int = -1, direction: str = "denoise"
) -> AttributionPatching:
    """Every head's and every residual-stream cell's patching effect estimated to first order (see the
    module docstring), from a forward on the source run and a forward and backward on the base run.
    The model's parameters get no ``.grad`` (the gradient is taken with respect to the activations alone)."""
    from ..models.language_model import LanguageModel

    core, clean, corrupt, metric = patch_metric(model, clean_ids, corrupt_ids, target, foil, position)
    if not isinstance(core, LanguageModel):
        raise TypeError(
            f"attribution patching takes the gradient from attnkit's language model's embeddings, not a "
            f"{type(core).__name__}: patch_heads and patch_residual run the exact sweep on it"
        )
    base, source = base_and_source(direction, clean, corrupt)
    n_layers = core.config.n_layers
    layers = list(range(n_layers + 1))
    sites = attention_sites(core)
    start = time.perf_counter()
    with eval_mode(core):
        with torch.no_grad(), record_heads(core) as heads_src, record_stream(core, residual=layers) as resid_src:
            m_source = float(metric(core(source).logits))
        outs: dict[int, Tensor] = {}

        def keep(layer):
            def pre_hook(module, args):
                outs[layer] = args[0]  # (B, N, H·D_h), in the graph

            return pre_hook

        hooks = [(sites["self", i].projection, keep(i)) for i in range(n_layers)]
        with (
            torch.enable_grad(),
            thread_hooks(hooks, pre=True),
            record_stream(core, residual=layers, detach=False) as r,
        ):
            embeds = core.embed_tokens(base).detach().requires_grad_(True)  # (B, N, D): a leaf the graph hangs from
            m = metric(core(None, embeds=embeds).logits)
            acts = [outs[i] for i in range(n_layers)] + [r.residual(i) for i in layers]
            grads = torch.autograd.grad(m, acts, allow_unused=True)
        m_base = float(m.detach())
        n_heads, head_dim = core.config.n_heads, sites["self", 0].head_dim
        heads = torch.empty(n_layers, n_heads, dtype=torch.float64)
        for i in range(n_layers):
            diff = heads_src.get("self", i).double() - acts[i].detach().unflatten(-1, (n_heads, head_dim)).double()
            g = torch.zeros_like(diff) if grads[i] is None else grads[i].unflatten(-1, (n_heads, head_dim)).double()
            heads[i] = (diff * g).sum((0, 1, 3))  # (H,): Σ over rows, positions and the head's width
        residual = torch.empty(len(layers), clean.shape[1], dtype=torch.float64)
        for i in layers:
            diff = resid_src.residual(i).double() - acts[n_layers + i].detach().double()  # (B, N, D)
            g = grads[n_layers + i]
            residual[i] = 0.0 if g is None else (diff * g.double()).sum((0, 2))  # (N,)
    seconds = time.perf_counter() - start
    m_clean, m_corrupt = (m_source, m_base) if direction == "denoise" else (m_base, m_source)
    return AttributionPatching(
        direction, metric.name, m_base + heads, m_base + residual, m_clean, m_corrupt, metric.position, 3, seconds
    )


def _pearson(a: Tensor, b: Tensor) -> float:
    a, b = a.flatten().double(), b.flatten().double()
    a, b = a - a.mean(), b - b.mean()
    den = float(a.norm() * b.norm())
    return float("nan") if den == 0 else float((a * b).sum()) / den


@dataclass
class AttributionComparison:
    """Attribution patching beside activation patching on the same inputs: the Pearson correlation of their
    effects over every layer × head (and every residual-stream cell), and the cost of each (passes, seconds)."""

    attribution: AttributionPatching
    heads: PatchingMap
    residual: PatchingMap | None
    head_correlation: float
    residual_correlation: float | None

    def to_dict(self) -> dict:
        return {
            "direction": self.heads.direction,
            "metric": self.heads.metric,
            "head_correlation": self.head_correlation,
            "residual_correlation": self.residual_correlation,
            "attribution": {"passes": self.attribution.passes, "seconds": self.attribution.seconds},
            "activation_heads": {"passes": self.heads.runs, "seconds": self.heads.seconds},
            "activation_residual": None
            if self.residual is None
            else {"passes": self.residual.runs, "seconds": self.residual.seconds},
        }


def compare_with_activation_patching(
    model, clean_ids, corrupt_ids, target, foil=None, *, position: int = -1, direction="denoise", residual=True
) -> AttributionComparison:
    """Attribution patching and activation patching (every head; with ``residual``, every residual-stream
    cell too) on the same inputs, and the Pearson correlation of their effects."""
    kw = {"position": position, "direction": direction}
    attr = attribution_patch(model, clean_ids, corrupt_ids, target, foil, **kw)
    heads = patch_heads(model, clean_ids, corrupt_ids, target, foil, **kw)
    res = patch_residual(model, clean_ids, corrupt_ids, target, foil, **kw) if residual else None

    def corr(est: Tensor, real: PatchingMap) -> float:
        return _pearson(normalised_effect(est, real.clean, real.corrupt, direction), real.effect)

    return AttributionComparison(
        attr, heads, res, corr(attr.heads, heads), None if res is None else corr(attr.residual, res)
    )
