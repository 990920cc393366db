"""How much each head of a Transformer translator matters: ablation importance and gradient importance.

Both score head ``h`` by the loss ``L(x)`` of a verse ``x``: the negative log-likelihood of its reference
(and eos) under teacher forcing, per target piece.

- **Ablation importance**: ``E_x [L_{−h}(x) − L(x)]``, the loss added when the head's output is set
  to zero (every other head intact); Michel, Levy & Neubig (2019, "Are Sixteen Heads Really Better
  than One?") report the same difference in BLEU.
- **Gradient importance** (Michel et al. 2019, eq. 2): each head's output multiplied by a gate
  ``ξ_h = 1`` (:class:`~attnkit.attribution.interventions.HeadGate`), and ``I_h = E_x |∂L(x)/∂ξ_h|``,
  a first-order estimate of what removing the head (``ξ_h = 0``) costs, for every head from one backward
  pass. One gate per verse and head (``(B, H)``) gives every verse's own gradient in that one pass, since
  a verse's loss reads only its own gates. Michel et al. normalise the scores per layer; these are raw.

Heads are scored in the three attention types of an encoder–decoder (Voita et al. 2019): encoder
self-attention, decoder self-attention and the decoder's cross-attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .intervention_effects import ForcedBatch, forced_batch, forced_log_likelihood, translator_of
from .interventions import HEAD_SITES, HeadAblation, HeadGate, attention_sites, core_model, intervene

__all__ = [
    "HeadImportance",
    "HeadImportanceReport",
    "ablation_losses",
    "gate_gradients",
    "head_importance",
    "verse_losses",
]

#: the attention types in the order they are reported, and their names
SITE_NAMES = {"encoder": "encoder self-attention", "self": "decoder self-attention", "cross": "cross-attention"}


def verse_losses(model, batch: ForcedBatch) -> Tensor:
    """``L(x)`` of each verse: ``−log p(reference, eos | source)`` per target piece, ``(B,)``."""
    return -forced_log_likelihood(model, batch) / batch.mask.sum(-1)


def _check_sites(sites: Sequence[str]) -> tuple[str, ...]:
    sites = tuple(sites)
    if not sites or any(s not in HEAD_SITES for s in sites):
        raise ValueError(f"sites must be some of {HEAD_SITES}, got {sites!r}")
    return sites


def gate_gradients(model, batch: ForcedBatch, sites: Sequence[str] = HEAD_SITES) -> dict[tuple[str, int], Tensor]:
    """``∂L(x_b)/∂ξ_{b,h}`` at ``ξ = 1`` for every verse ``b`` of ``batch`` and every head: per
    ``(site, layer)`` (0-based) a ``(B, H)`` tensor, signed. The model must be in eval mode."""
    sites = _check_sites(sites)
    spots = [hs for key, hs in attention_sites(model).items() if key[0] in sites]
    dtype = next(core_model(model).parameters()).dtype
    b = batch.src.shape[0]
    gates = [torch.ones(b, hs.n_heads, dtype=dtype, device=batch.src.device, requires_grad=True) for hs in spots]
    ivs = [HeadGate(hs.layer, g, hs.site) for hs, g in zip(spots, gates)]
    with torch.enable_grad(), intervene(model, ivs):
        loss = verse_losses(model, batch).sum()  # verse b's loss reads only gates[.][b]
        grads = torch.autograd.grad(loss, gates, allow_unused=True)  # unused: a layer whose heads were all pruned
    return {
        (hs.site, hs.layer): torch.zeros_like(t) if g is None else g.detach() for hs, g, t in zip(spots, grads, gates)
    }


@torch.no_grad()
def ablation_losses(model, batch: ForcedBatch, sites: Sequence[str] = HEAD_SITES) -> dict[tuple[str, int], Tensor]:
    """``L_{−h}(x_b) − L(x_b)`` for every verse and head, each head zero-ablated alone: per
    ``(site, layer)`` (0-based) a ``(B, H)`` tensor. The model must be in eval mode."""
    sites = _check_sites(sites)
    clean = verse_losses(model, batch)  # (B,)
    out = {}
    for (site, layer), hs in attention_sites(model).items():
        if site not in sites:
            continue
        cols = []
        for h in range(hs.n_heads):
            with intervene(model, [HeadAblation(layer, h, site=site)]):
                cols.append(verse_losses(model, batch) - clean)
        out[site, layer] = torch.stack(cols, -1) if cols else clean.new_zeros(len(clean), 0)  # (B, H); H=0: pruned
    return out


@dataclass
class HeadImportance:
    """One head's scores: ``layer`` and ``head`` 0-based; ``ablation`` and ``gradient`` in nats per piece."""

    site: str
    layer: int
    head: int
    ablation: float
    gradient: float

    def to_dict(self) -> dict:
        """JSON-ready, layer and head numbered from 1 (as the CLI prints them)."""
        return {
            "site": self.site,
            "layer": self.layer + 1,
            "head": self.head + 1,
            "ablation": self.ablation,
            "gradient": self.gradient,
        }


@dataclass
class HeadImportanceReport:
    """Every head's :class:`HeadImportance` over ``verses`` verses (``pieces`` target pieces with eos),
    and the clean loss ``E_x L(x)``."""

    verses: int
    pieces: int
    clean_loss: float
    heads: list[HeadImportance] = field(default_factory=list)

    def ranked(self, by: str = "ablation") -> list[HeadImportance]:
        """The heads, most important first, by ``"ablation"`` or ``"gradient"``."""
        if by not in ("ablation", "gradient"):
            raise ValueError(f"by must be 'ablation' or 'gradient', got {by!r}")
        return sorted(self.heads, key=lambda h: -getattr(h, by))

    def to_dict(self) -> dict:
        return {
            "verses": self.verses,
            "pieces": self.pieces,
            "clean_loss": self.clean_loss,
            "heads": [h.to_dict() for h in self.heads],
        }


def head_importance(
    translator,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    sites: Sequence[str] = HEAD_SITES,
    batch_size: int = 16,
) -> HeadImportanceReport:
    """Ablation and gradient importance of every head of ``translator`` (attnkit's Transformer) at
    ``sites``, over the verses ``sources`` with their ``references`` (batches of ``batch_size``)."""
    sites = _check_sites(sites)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    tr = translator_of(translator)
    core = tr.model
    was = core.training
    core.eval()
    abl: dict[tuple[str, int], list[Tensor]] = {}
    grad: dict[tuple[str, int], list[Tensor]] = {}
    clean, pieces = [], 0
    try:
        for start in range(0, len(sources), batch_size):
            batch = forced_batch(tr, sources[start : start + batch_size], references[start : start + batch_size])
            with torch.no_grad():
                clean.append(verse_losses(core, batch))
            pieces += int(batch.mask.sum())
            for key, t in ablation_losses(core, batch, sites).items():
                abl.setdefault(key, []).append(t)
            for key, t in gate_gradients(core, batch, sites).items():
                grad.setdefault(key, []).append(t.abs())
    finally:
        core.train(was)
    heads = []
    for site in (s for s in SITE_NAMES if s in sites):
        for key in sorted(k for k in abl if k[0] == site):
            a, g = torch.cat(abl[key]).mean(0), torch.cat(grad[key]).mean(0)  # (H,) means over verses
            heads.extend(HeadImportance(site, key[1], h, float(a[h]), float(g[h])) for h in range(len(a)))
    return HeadImportanceReport(len(sources), pieces, float(torch.cat(clean).mean()), heads)
