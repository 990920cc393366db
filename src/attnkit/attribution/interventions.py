"""Interventions on attention heads as typed requests: ablate a head, patch it from another input, gate it.

A head's output is its slice of the output projection's input: ``out = Concat(head_1..head_H) W_O``
(Vaswani et al. 2017), so head ``h`` is columns ``h·D_h .. (h+1)·D_h`` of what ``o_proj`` (attnkit's
language models, :class:`~attnkit.attention.CausalSelfAttention`) or ``out_proj`` (the Transformer
translator's :class:`~attnkit.attention.MultiHeadAttention`) reads. Every intervention replaces or
scales that slice, in a forward pre-hook on the projection registered for one ``with`` block by
:func:`intervene` and removed in ``finally``: no global state, and every path that runs the projection
(teacher forcing, the decoder's cached steps, greedy and beam search) sees it; another thread's pass of the
same model does not (:func:`attnkit.hooks.thread_hooks`).

The requests are data, as in pyvene (Wu et al. 2024) and TransformerLens's hook points (Nanda 2022):

- :class:`HeadAblation` — the head's output set to zero, to its mean over a reference set of inputs
  (mean ablation), or to its value on another input drawn from a reference set (resample ablation,
  Chan et al. 2022's causal scrubbing);
- :class:`HeadPatch` — activation patching (Vig et al. 2020; Meng et al. 2022): the head's output
  replaced by its value on a second input of the same shape, at every position or at some;
- :class:`HeadGate` — each head's output multiplied by a gate ``ξ_h`` (Michel, Levy & Neubig 2019):
  with ``ξ`` requiring grad, ``∂L/∂ξ_h`` is their head importance.

Sites: ``"self"`` (a language model's heads; a translator's decoder self-attention), ``"cross"`` (a
translator's decoder cross-attention) and ``"encoder"`` (a translator's encoder self-attention).
Layers, heads and positions are 0-based here, as tensor indices are (the CLI prints them 1-based).
:func:`record_heads` records every head's output for one ``with`` block: the clean run a patch
copies from, or the reference set a mean is taken over.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..hooks import thread_hooks

__all__ = [
    "ABLATION_MODES",
    "HEAD_SITES",
    "HeadAblation",
    "HeadGate",
    "HeadPatch",
    "HeadRecording",
    "HeadSite",
    "attention_sites",
    "core_model",
    "head_mean",
    "intervenable",
    "intervene",
    "record_heads",
]

#: where a head lives: decoder (or language-model) self-attention, cross-attention, encoder self-attention
HEAD_SITES = ("self", "cross", "encoder")
#: what a :class:`HeadAblation` puts in the head's place
ABLATION_MODES = ("zero", "mean", "resample")


def _check_site(site) -> None:
    if site not in HEAD_SITES:
        raise ValueError(f"site must be one of {HEAD_SITES}, got {site!r}")


def _check_index(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0 (0-based), got {value!r}")


@dataclass(frozen=True, eq=False)
class HeadAblation:
    """Ablate head ``head`` of layer ``layer`` (0-based) at ``site``.

    ``mode``: ``"zero"`` (its output set to 0); ``"mean"`` (set to ``reference``, a ``(D_h,)`` mean, e.g.
    :func:`head_mean` of a :class:`HeadRecording`; any ``(..., D_h)`` tensor is averaged to one); or
    ``"resample"`` (each row of the run takes the head's output on row ``r`` of ``reference (R, N, D_h)``,
    the head recorded on ``R`` other inputs of the run's ``N`` positions, ``r`` drawn with ``seed``).
    Zero and mean ablation hold at every position of any call, decoding steps included; resampling
    needs calls of ``N`` positions (a teacher-forced or language-model forward)."""

    layer: int
    head: int
    mode: str = "zero"
    site: str = "self"
    reference: Tensor | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        _check_index("layer", self.layer)
        _check_index("head", self.head)
        _check_site(self.site)
        if self.mode not in ABLATION_MODES:
            raise ValueError(f"mode must be one of {ABLATION_MODES}, got {self.mode!r}")
        if self.mode == "zero" and self.reference is not None:
            raise ValueError("reference is for mode='mean' or 'resample'; zero ablation takes none")
        if self.mode != "zero" and not isinstance(self.reference, Tensor):
            raise ValueError(f"mode={self.mode!r} needs reference: a tensor of the head's outputs (record_heads)")
        if self.mode == "resample" and self.reference.dim() != 3:
            raise ValueError(f"reference must be (R, N, D_h) for resampling, got {tuple(self.reference.shape)}")


@dataclass(frozen=True, eq=False)
class HeadPatch:
    """Activation patching: head ``head`` of layer ``layer`` (0-based) at ``site`` takes ``source``, its
    output on a second input (``(B, N, D_h)``, or ``(N, D_h)`` for every row), at ``positions`` (0-based
    indices of the call's ``N`` positions) or at all of them. The call must have the source's positions."""

    layer: int
    head: int
    source: Tensor
    site: str = "self"
    positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        _check_index("layer", self.layer)
        _check_index("head", self.head)
        _check_site(self.site)
        if not isinstance(self.source, Tensor) or self.source.dim() not in (2, 3):
            got = tuple(self.source.shape) if isinstance(self.source, Tensor) else type(self.source).__name__
            raise ValueError(f"source must be the head's output (B, N, D_h) or (N, D_h), got {got}")
        if self.positions is not None:
            object.__setattr__(self, "positions", tuple(self.positions))
            for p in self.positions:
                _check_index("positions", p)


@dataclass(frozen=True, eq=False)
class HeadGate:
    """Every head of layer ``layer`` (0-based) at ``site`` multiplied by its gate: ``gates (H,)``, or
    ``(B, H)`` one per row (each row's loss then has its own ``∂L_b/∂ξ``). Michel et al. (2019)'s
    ``ξ_h``; all ones changes nothing."""

    layer: int
    gates: Tensor
    site: str = "self"

    def __post_init__(self) -> None:
        _check_index("layer", self.layer)
        _check_site(self.site)
        if not isinstance(self.gates, Tensor) or self.gates.dim() not in (1, 2):
            got = tuple(self.gates.shape) if isinstance(self.gates, Tensor) else type(self.gates).__name__
            raise ValueError(f"gates must be (H,) or (B, H), got {got}")


Intervention = HeadAblation | HeadPatch | HeadGate


@dataclass(frozen=True)
class HeadSite:
    """One attention module's output projection: its site, layer (0-based), heads and head width."""

    site: str
    layer: int
    projection: nn.Module  # nn.Linear, or GPT-2's Conv1D: its input holds the heads side by side
    n_heads: int
    head_dim: int


def core_model(model) -> nn.Module:
    """The attnkit model under ``model``: itself, or the :class:`~attnkit.models.language_model.LanguageModel` or
    :class:`~attnkit.models.transformer.TransformerTranslator` inside a wrapper (a translator, a language model's
    generator, a :class:`attnkit.service.Model`); ``TypeError`` for any other model."""
    from ..models.language_model import LanguageModel
    from ..models.transformer import TransformerTranslator

    seen = model
    for _ in range(3):
        if isinstance(seen, (LanguageModel, TransformerTranslator)):
            return seen
        inner = getattr(seen, "impl", None)
        seen = getattr(seen, "model", None) if inner is None else inner
        if seen is None:
            break
    raise TypeError(
        "model must be attnkit's language model or Transformer translator (or a wrapper of one), "
        f"got {type(model).__name__}"
    )


def intervenable(model) -> nn.Module:
    """:func:`core_model`, or the ``transformers`` model under ``model`` (itself, or inside a text model, a
    Hugging Face translator's adapter, a :class:`attnkit.service.Model`): the models whose heads
    :func:`intervene` reaches."""
    from ..hf.head_sites import is_hf_model

    try:
        return core_model(model)
    except TypeError:
        seen = model
        for _ in range(4):
            if is_hf_model(seen):
                return seen
            seen = next((getattr(seen, a) for a in ("impl", "hf", "model") if getattr(seen, a, None) is not None), None)
            if seen is None:
                break
    raise TypeError(
        "model must be attnkit's language model or Transformer translator, a Hugging Face model attnkit reads, "
        f"or a wrapper of one; got {type(model).__name__}"
    )


def attention_sites(model) -> dict[tuple[str, int], HeadSite]:
    """Every attention module of ``model`` by ``(site, layer)``: a language model's ``"self"`` layers; a
    Transformer translator's ``"encoder"``, ``"self"`` and ``"cross"`` layers; the same of a Hugging Face
    model (:func:`attnkit.hf.head_sites.hf_head_sites`)."""
    from ..hf.head_sites import hf_head_sites, is_hf_model
    from ..models.language_model import LanguageModel

    core = intervenable(model)
    if is_hf_model(core):
        return {key: HeadSite(key[0], key[1], *site) for key, site in hf_head_sites(core).items()}
    sites: dict[tuple[str, int], HeadSite] = {}
    if isinstance(core, LanguageModel):
        for i, layer in enumerate(core.layers):
            a = layer.self_attn
            sites["self", i] = HeadSite("self", i, a.o_proj, a.n_heads, a.head_dim)
        return sites
    for i, layer in enumerate(core.encoder.layers):
        a = layer.self_attn
        sites["encoder", i] = HeadSite("encoder", i, a.out_proj, a.num_heads, a.head_dim)
    for i, layer in enumerate(core.decoder.layers):
        for site, a in (("self", layer.self_attn), ("cross", layer.multihead_attn)):
            sites[site, i] = HeadSite(site, i, a.out_proj, a.num_heads, a.head_dim)
    return sites


def _site_of(sites: dict, iv: Intervention) -> HeadSite:
    layers = sorted(layer for (s, layer) in sites if s == iv.site)
    if not layers:
        have = sorted({s for s, _ in sites})
        raise ValueError(f"site {iv.site!r} is not in this model (it has {', '.join(have)})")
    if iv.layer >= len(layers):
        raise ValueError(f"layer must be in 0..{len(layers) - 1} for site {iv.site!r}, got {iv.layer}")
    hs = sites[iv.site, iv.layer]
    if not isinstance(iv, HeadGate) and iv.head >= hs.n_heads:
        raise ValueError(f"head must be in 0..{hs.n_heads - 1}, got {iv.head}")
    dh = hs.head_dim
    if isinstance(iv, HeadAblation) and iv.reference is not None and iv.reference.shape[-1] != dh:
        raise ValueError(f"reference must end in the head width {dh}, got {tuple(iv.reference.shape)}")
    if isinstance(iv, HeadPatch) and iv.source.shape[-1] != dh:
        raise ValueError(f"source must end in the head width {dh}, got {tuple(iv.source.shape)}")
    if isinstance(iv, HeadGate) and iv.gates.shape[-1] != hs.n_heads:
        raise ValueError(f"gates must have one per head ({hs.n_heads}), got {tuple(iv.gates.shape)}")
    return hs


def _patched(iv: HeadPatch, current: Tensor) -> Tensor:
    """The head's slice ``current (B, N, D_h)`` with the source's values at the patched positions."""
    src = iv.source.to(dtype=current.dtype, device=current.device)
    if src.dim() == 2:
        src = src.unsqueeze(0).expand(current.shape[0], -1, -1)  # (B, N, D_h)
    if src.shape[:2] != current.shape[:2]:
        raise ValueError(
            f"source {tuple(iv.source.shape)} does not match the call's (B, N) = {tuple(current.shape[:2])}: "
            "patching needs inputs of equal shape (and a whole forward, not a decoding step)"
        )
    if iv.positions is None:
        return src
    n = current.shape[1]
    if any(p >= n for p in iv.positions):
        raise ValueError(f"positions must be < N = {n}, got {iv.positions}")
    keep = torch.ones(n, dtype=torch.bool, device=current.device)
    keep[list(iv.positions)] = False
    return torch.where(keep[None, :, None], current, src)


def _resampled(iv: HeadAblation, current: Tensor) -> Tensor:
    ref = iv.reference.to(dtype=current.dtype, device=current.device)  # (R, N, D_h)
    b, n, _ = current.shape
    if ref.shape[1] != n:
        raise ValueError(
            f"reference has {ref.shape[1]} positions, the call {n}: resampling needs inputs of the run's length "
            "(and a whole forward, not a decoding step)"
        )
    g = torch.Generator().manual_seed(iv.seed)
    rows = torch.randint(ref.shape[0], (b,), generator=g)
    return ref[rows.to(ref.device)]  # (B, N, D_h)


def _replacement(iv: HeadAblation | HeadPatch, current: Tensor) -> Tensor:
    """What head ``iv.head`` outputs under ``iv``, given what it output: ``(B, N, D_h)``."""
    if isinstance(iv, HeadPatch):
        return _patched(iv, current)
    if iv.mode == "zero":
        return torch.zeros_like(current)
    if iv.mode == "mean":
        mean = iv.reference.to(dtype=current.dtype, device=current.device).reshape(-1, current.shape[-1]).mean(0)
        return mean.expand_as(current)
    return _resampled(iv, current)


def _hook(site: HeadSite, ivs: list[Intervention]):
    h, dh = site.n_heads, site.head_dim

    def pre_hook(module, args):
        if h == 0:  # every head pruned (attnkit.models.head_pruning): nothing to change
            return None
        x = args[0]  # (B, N, H·D_h): the heads' outputs, concatenated
        heads = list(x.unflatten(-1, (h, dh)).unbind(-2))  # H × (B, N, D_h)
        for iv in ivs:
            if isinstance(iv, HeadGate):
                g = iv.gates.to(dtype=x.dtype, device=x.device)
                if g.dim() == 2 and g.shape[0] != x.shape[0]:
                    raise ValueError(f"gates has {g.shape[0]} rows, the call {x.shape[0]}")
                heads = [
                    t * (g[..., k] if g.dim() == 1 else g[:, k].view(-1, *([1] * (t.dim() - 1))))
                    for k, t in enumerate(heads)
                ]
            else:
                heads[iv.head] = _replacement(iv, heads[iv.head])
        return (torch.stack(heads, dim=-2).flatten(-2), *args[1:])  # (B, N, H·D_h)

    return pre_hook


@contextmanager
def intervene(model, interventions: Sequence[Intervention]) -> Iterator[None]:
    """Run ``model`` with ``interventions`` in place for the ``with`` block (several on one module apply
    in the order given): head requests, and a language model's residual-stream and MLP requests
    (:mod:`attnkit.attribution.stream_interventions`). Checked first: a site the model lacks, a layer or head out of range, a tensor
    of the wrong width raise ``ValueError``; shapes that depend on the call raise in the call."""
    from .stream_interventions import STREAM_TYPES, stream_hooks

    if isinstance(interventions, (HeadAblation, HeadPatch, HeadGate, *STREAM_TYPES)):
        interventions = [interventions]
    heads, stream = [], []
    for iv in interventions:
        if isinstance(iv, STREAM_TYPES):
            stream.append(iv)
        elif isinstance(iv, (HeadAblation, HeadPatch, HeadGate)):
            heads.append(iv)
        else:
            raise TypeError(
                "interventions must be HeadAblation, HeadPatch or HeadGate (or on a language model ResidualPatch, "
                f"ResidualAblation, MLPPatch, MLPAblation), got {type(iv).__name__}"
            )
    sites = attention_sites(model)
    by_site: dict[tuple[str, int], list[Intervention]] = {}
    for iv in heads:
        _site_of(sites, iv)
        by_site.setdefault((iv.site, iv.layer), []).append(iv)
    stream_pre, stream_post = stream_hooks(model, stream) if stream else ([], [])
    head_hooks = [(sites[key].projection, _hook(sites[key], ivs)) for key, ivs in by_site.items()]
    with thread_hooks(head_hooks + stream_pre, pre=True), thread_hooks(stream_post):
        yield


class HeadRecording:
    """Every head's output recorded by :func:`record_heads`: :meth:`get` a site's ``(B, N, H, D_h)``."""

    def __init__(self, sites: dict[tuple[str, int], HeadSite]):
        self.sites = sites
        self._calls: dict[tuple[str, int], list[Tensor]] = {key: [] for key in sites}

    def get(self, site: str, layer: int, head: int | None = None) -> Tensor:
        """The outputs at ``(site, layer)``: ``(B, N, H, D_h)``, or ``(B, N, D_h)`` of one ``head``.
        Several calls (a decoder's steps) are joined along the positions: a greedy search's steps give
        the positions of its output, row by row (beam search reorders rows between steps)."""
        _check_site(site)
        if (site, layer) not in self._calls:
            raise ValueError(f"no attention at site {site!r}, layer {layer}")
        calls = self._calls[site, layer]
        if not calls:
            raise ValueError(f"nothing was recorded at site {site!r}, layer {layer}: run the model inside the block")
        out = calls[0] if len(calls) == 1 else torch.cat(calls, dim=1)  # (B, N, H, D_h)
        return out if head is None else out[..., head, :]


@contextmanager
def record_heads(model, only=None) -> Iterator[HeadRecording]:
    """Record every head's output (detached) for the ``with`` block, or only at the ``(site, layer)`` pairs
    ``only`` names (what patching one layer needs: ``(B, N, H·D_h)``, not one per layer); hooks removed in
    ``finally``."""
    sites = attention_sites(model)
    if only is not None:
        only = {tuple(key) for key in only}
        missing = sorted(only - set(sites))
        if missing:
            raise ValueError(f"only: no attention at {missing} (the model has {sorted(sites)})")
        sites = {key: site for key, site in sites.items() if key in only}
    rec = HeadRecording(sites)

    def recorder(key, site: HeadSite):
        def pre_hook(module, args):
            rec._calls[key].append(args[0].detach().unflatten(-1, (site.n_heads, site.head_dim)))

        return pre_hook

    with thread_hooks(((site.projection, recorder(key, site)) for key, site in sites.items()), pre=True):
        yield rec


def head_mean(outputs: Tensor, mask: Tensor | None = None) -> Tensor:
    """The mean of a head's outputs ``(B, N, D_h)`` over rows and positions (``mask (B, N)``: ``True`` at
    the positions that count, e.g. real tokens, not padding): ``(D_h,)``, mean ablation's reference."""
    if not isinstance(outputs, Tensor) or outputs.dim() != 3:
        raise ValueError(f"outputs must be (B, N, D_h), got {tuple(getattr(outputs, 'shape', ()))}")
    if mask is None:
        return outputs.reshape(-1, outputs.shape[-1]).mean(0)
    if mask.shape != outputs.shape[:2]:
        raise ValueError(f"mask must be (B, N) = {tuple(outputs.shape[:2])}, got {tuple(mask.shape)}")
    if not bool(mask.any()):
        raise ValueError("mask selects no position")
    return outputs[mask.bool()].mean(0)  # (D_h,)
