"""Activation patching heat maps: which heads, residual-stream positions and MLPs carry the answer.

Two inputs of equal length: a **clean** one on which the model gives the answer, and a **corrupted** one,
the same with what the answer rests on changed (Meng et al. 2022's causal tracing; Wang et al. 2022, the
IOI circuit; the TransformerLens tutorials, Nanda 2023). Each site's clean activation is patched into the
corrupted run, one site at a time, and the metric read at ``position`` (the last by default):

- with a ``foil``: the logit difference ``logit(target) − logit(foil)`` (Wang et al.'s IOI metric);
- without: the target's log-probability ``log p(target)``;

averaged over the batch's rows. The map is **normalised** so that 1 is the clean run's metric and 0 the
corrupted run's: ``(m_patched − m_corrupt) / (m_clean − m_corrupt)``, as the TransformerLens tutorials
plot it.

Two directions (Heimersheim & Nanda 2024, "How to use and interpret activation patching"):
``"denoise"`` (the default) patches the clean activation into the corrupted run — a site near 1 is
*sufficient* to restore the answer on its own; ``"noise"`` patches the corrupted activation into the clean
run (Wang et al.'s path patching does this) — a site near 0 is *necessary*: breaking it alone breaks the
answer. :attr:`PatchingMap.effect` reads both the same way, larger = the site matters more: the fraction
restored (denoising, ``normalised``) or lost (noising, ``1 − normalised``). When the corruption touches
what a site would copy (a token the answer repeats), no single clean site can restore it and noising is
the informative direction.

- :func:`patch_heads` — each head's output (its slice of the output projection's input, the
  :class:`~attnkit.attribution.interventions.HeadPatch` site): an ``(L, H)`` map;
- :func:`patch_residual` — the residual stream at each layer ``0..L`` and position: an ``(L+1, N)`` map
  (:class:`~attnkit.attribution.stream_interventions.ResidualPatch`);
- :func:`patch_mlps` — each MLP's output at each position: ``(L, N)``.

One patched forward per cell, over only the activations that cell needs: the clean run's value at that
site. Path patching (one head into another's query, key or value) is :mod:`attnkit.attribution.path_patching`;
its first-order approximation from one backward pass, :mod:`attnkit.attribution.attribution_patching`.
Layers, heads and positions are 0-based here; :meth:`PatchingMap.to_dict` numbers them from 1.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from .interventions import HeadPatch, attention_sites, intervenable, intervene, record_heads
from .stream_interventions import MLPPatch, ResidualPatch, record_stream
from .stream_interventions import _stream as stream_sites

__all__ = [
    "DIRECTIONS",
    "MetricScores",
    "PatchMetric",
    "PatchingMap",
    "patch_heads",
    "patch_metric",
    "patch_mlps",
    "patch_residual",
    "repeated_tokens_pair",
]

#: ``"denoise"``: clean activations into the corrupted run; ``"noise"``: corrupted ones into the clean run
DIRECTIONS = ("denoise", "noise")


@dataclass
class PatchMetric:
    """What a patching run reads from the logits ``(B, N, V)`` at ``position``: ``logit(target) − logit(foil)``
    with a foil, else ``log p(target)``; ``target`` and ``foil`` are ``(B,)`` token ids, the metric the mean
    over the rows (differentiable: attribution patching takes its gradient)."""

    target: Tensor
    foil: Tensor | None
    position: int

    @property
    def name(self) -> str:
        return "log_prob" if self.foil is None else "logit_diff"

    def __call__(self, logits: Tensor) -> Tensor:
        at = logits[:, self.position].double()  # (B, V)
        tgt = at.gather(-1, self.target[:, None]).squeeze(-1)  # (B,)
        if self.foil is None:
            return (tgt - torch.logsumexp(at, -1)).mean()
        return (tgt - at.gather(-1, self.foil[:, None]).squeeze(-1)).mean()


def _token_ids(name: str, value, rows: int, vocab: int, device) -> Tensor:
    t = torch.as_tensor(value)
    if t.dtype in (torch.bool,) or t.is_floating_point() or t.dim() > 1:
        raise ValueError(f"{name} must be a token id or one per row, got {value!r}")
    t = t.reshape(-1).long()
    if t.numel() == 1:
        t = t.expand(rows)
    if t.numel() != rows or bool(((t < 0) | (t >= vocab)).any()):
        raise ValueError(f"{name} must be a token id in 0..{vocab - 1} or {rows} of them (one per row), got {value!r}")
    return t.to(device)


def _ids(name: str, ids, device) -> Tensor:
    if not isinstance(ids, Tensor) or ids.dim() not in (1, 2) or ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be int64 token ids (N,) or (B, N), got {tuple(getattr(ids, 'shape', ()))}")
    return ids.reshape(-1, ids.shape[-1]).long().to(device)


def check_direction(direction) -> str:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    return direction


def base_and_source(direction: str, clean: Tensor, corrupt: Tensor) -> tuple[Tensor, Tensor]:
    """``(the run patched into, the run the patch comes from)``: (corrupt, clean) to denoise, (clean, corrupt) to noise."""
    return (corrupt, clean) if check_direction(direction) == "denoise" else (clean, corrupt)


def normalised_effect(scores: Tensor, clean: float, corrupt: float, direction: str) -> Tensor:
    """The fraction of the answer a patch restores (denoising) or removes (noising); the raw change of the
    metric when the clean and corrupted runs agree (nothing to restore)."""
    gap = clean - corrupt
    if abs(gap) < 1e-12:
        return scores - (corrupt if direction == "denoise" else clean)
    norm = (scores - corrupt) / gap
    return norm if direction == "denoise" else 1 - norm


def patched_model(model):
    """The model a patching sweep runs: attnkit's :class:`~attnkit.models.language_model.LanguageModel`, or a
    Hugging Face decoder-only language model (GPT-2, GPT-NeoX, the Llama-like and sandwich families), under
    ``model`` (itself or a wrapper: a text model, a :class:`attnkit.service.Model`); ``TypeError`` else."""
    from ..hf.head_sites import is_hf_model
    from ..hf.lm_blocks import DECODERS
    from ..models.language_model import LanguageModel

    try:
        core = intervenable(model)
    except TypeError:
        core = None
    if isinstance(core, LanguageModel):
        return core
    if core is not None and is_hf_model(core):
        cfg = core.config
        decoder = not getattr(cfg, "is_encoder_decoder", False) and cfg.model_type in DECODERS
        if decoder and core.get_output_embeddings() is not None:
            return core
    raise TypeError(
        "model must be attnkit's language model or a Hugging Face decoder-only language model "
        f"(with its language-model head), got {type(core if core is not None else model).__name__}"
    )


def logits_of(core, ids: Tensor) -> Tensor:
    """``(B, N, V)``: the logits of ``core`` (:func:`patched_model`) on ``ids (B, N)``; a Hugging Face model
    is run without its key/value cache (one whole forward)."""
    from ..models.language_model import LanguageModel

    if isinstance(core, LanguageModel):
        return core(ids).logits
    return core(input_ids=ids, use_cache=False).logits


def head_grid(core) -> tuple[int, int]:
    """``(L, H)``: the layers and the heads per layer of ``core``'s (language-model) self-attention."""
    sites = attention_sites(core)
    layers = sorted(layer for site, layer in sites if site == "self")
    return len(layers), sites["self", 0].n_heads


def patch_metric(model, clean_ids, corrupt_ids, target, foil=None, position: int = -1):
    """``(core, clean (B, N), corrupt (B, N), metric)``: the model (:func:`patched_model`), the inputs checked
    (equal shapes, token ids in the vocabulary, ``position`` in range) and the :class:`PatchMetric` that every
    patching function reads."""
    core = patched_model(model)
    device = next(core.parameters()).device
    clean, corrupt = _ids("clean_ids", clean_ids, device), _ids("corrupt_ids", corrupt_ids, device)
    if clean.shape != corrupt.shape:
        raise ValueError(
            f"clean_ids and corrupt_ids must have the same shape (patching copies position by position), "
            f"got {tuple(clean.shape)} and {tuple(corrupt.shape)}"
        )
    n = clean.shape[1]
    if isinstance(position, bool) or not isinstance(position, int) or not -n <= position < n:
        raise ValueError(f"position must be in {-n}..{n - 1}, got {position!r}")
    vocab, rows = core.config.vocab_size, clean.shape[0]
    tgt = _token_ids("target", target, rows, vocab, device)
    fl = None if foil is None else _token_ids("foil", foil, rows, vocab, device)
    return core, clean, corrupt, PatchMetric(tgt, fl, position % n)


@contextmanager
def eval_mode(core) -> Iterator[None]:
    """``core`` in eval mode (no dropout: the runs must be deterministic) for the block, as it was after."""
    was = core.training
    core.eval()
    try:
        yield
    finally:
        core.train(was)


class MetricScores:
    """What a patching map reads of its metric (a mixin of :class:`PatchingMap` and
    :class:`~attnkit.attribution.path_patching.PathPatchingMap` and ``SourcePathPatching``, whose fields these
    are): ``scores`` each cell's metric, against the ``clean`` and ``corrupt`` runs' metric, patched in
    ``direction``; ``metric``, ``position``, ``runs`` and ``seconds`` say what was measured and at what cost."""

    scores: Tensor
    clean: float
    corrupt: float
    direction: str

    @property
    def normalised(self) -> Tensor | None:
        """``(scores − corrupt) / (clean − corrupt)``: 1 = the clean run, 0 = the corrupted one (None when
        the two runs give the same metric: nothing to restore)."""
        gap = self.clean - self.corrupt
        return None if abs(gap) < 1e-12 else (self.scores - self.corrupt) / gap

    @property
    def effect(self) -> Tensor:
        """Larger = the cell matters more: the fraction of the answer restored (denoising) or lost (noising)."""
        return normalised_effect(self.scores, self.clean, self.corrupt, self.direction)

    def run_fields(self) -> dict:
        """The JSON of what every map says of its runs: direction, metric, position (from 1), the clean and
        corrupted metric, forward passes and seconds (each map's ``to_dict`` adds its cells)."""
        return {
            "direction": self.direction,
            "metric": self.metric,
            "position": self.position + 1,
            "clean": self.clean,
            "corrupt": self.corrupt,
            "runs": self.runs,
            "seconds": self.seconds,
        }


@dataclass
class PatchingMap(MetricScores):
    """An activation-patching map: ``scores`` the raw metric with each cell's activation patched
    (``direction``: clean into the corrupted run, or corrupted into the clean one), ``(L, H)`` for heads,
    ``(L+1, N)`` for the residual stream, ``(L, N)`` for MLPs; ``clean`` and ``corrupt`` the metric on the
    two runs; ``runs`` forward passes in ``seconds``."""

    site: str
    metric: str
    scores: Tensor
    clean: float
    corrupt: float
    position: int
    runs: int
    seconds: float
    direction: str = "denoise"

    def top(self, k: int = 3) -> list[tuple[int, int, float]]:
        """The ``k`` cells with the largest :attr:`effect`, ``(row, column, effect)`` 0-based."""
        values = self.effect
        flat = values.flatten()
        idx = flat.argsort(descending=True)[:k]
        cols = values.shape[1]
        return [(int(i) // cols, int(i) % cols, float(flat[i])) for i in idx]

    def to_dict(self) -> dict:
        rows = self.scores.shape[0]
        col = "head" if self.site == "heads" else "position"
        norm, eff = self.normalised, self.effect
        cells = [
            {
                "layer": i + (1 if self.site != "residual" else 0),
                col: j + 1,
                "score": float(self.scores[i, j]),
                "normalised": None if norm is None else float(norm[i, j]),
                "effect": float(eff[i, j]),
            }
            for i in range(rows)
            for j in range(self.scores.shape[1])
        ]
        return {
            "site": self.site,
            **self.run_fields(),
            "layers_from": 1 if self.site != "residual" else 0,
            "cells": cells,
        }


def _positions(positions, n: int) -> tuple[int, ...] | None:
    if positions is None:
        return None
    out = tuple(positions)
    if not out or any(isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < n for p in out):
        raise ValueError(f"positions must be 0-based ints in 0..{n - 1}, got {positions!r}")
    return out


@torch.no_grad()
def patch_heads(
    model, clean_ids, corrupt_ids, target, foil=None, *, position: int = -1, positions=None, direction="denoise"
) -> PatchingMap:
    """Each head's clean output patched into the corrupted run (``direction="noise"``: its corrupted output
    into the clean run), at ``positions`` (0-based) or at every position, one head at a time: an ``(L, H)``
    :class:`PatchingMap`. ``2 + L·H`` forward passes (the source run recording the heads, the base run, one
    per head)."""
    core, clean, corrupt, metric = patch_metric(model, clean_ids, corrupt_ids, target, foil, position)
    base, source = base_and_source(direction, clean, corrupt)
    pos = _positions(positions, clean.shape[1])
    start = time.perf_counter()
    with eval_mode(core):
        with record_heads(core) as rec:
            m_source = float(metric(logits_of(core, source)))
        m_base = float(metric(logits_of(core, base)))
        n_layers, n_heads = head_grid(core)
        scores = torch.empty(n_layers, n_heads, dtype=torch.float64)
        for layer in range(n_layers):
            out = rec.get("self", layer)  # (B, N, H, D_h)
            for head in range(n_heads):
                with intervene(core, [HeadPatch(layer, head, out[..., head, :], positions=pos)]):
                    scores[layer, head] = metric(logits_of(core, base))
    seconds = time.perf_counter() - start
    m_clean, m_corrupt = (m_source, m_base) if direction == "denoise" else (m_base, m_source)
    return PatchingMap(
        "heads", metric.name, scores, m_clean, m_corrupt, metric.position, 2 + scores.numel(), seconds, direction
    )


def _patch_stream(site: str, model, clean_ids, corrupt_ids, target, foil, position, direction) -> PatchingMap:
    core, clean, corrupt, metric = patch_metric(model, clean_ids, corrupt_ids, target, foil, position)
    base, source = base_and_source(direction, clean, corrupt)
    n_layers, n = head_grid(core)[0], clean.shape[1]
    layers = list(range(n_layers + 1)) if site == "residual" else list(range(n_layers))
    if site == "mlp" and stream_sites(core)[2] is None:
        raise ValueError("the model is attention-only: it has no MLPs to patch")
    patch = ResidualPatch if site == "residual" else MLPPatch
    start = time.perf_counter()
    with torch.no_grad(), eval_mode(core):
        m_base = float(metric(logits_of(core, base)))
        scores = torch.empty(len(layers), n, dtype=torch.float64)
        for layer in layers:  # one layer's source activation kept at a time: (B, N, D), not (L, B, N, D)
            kw = {"residual": [layer]} if site == "residual" else {"mlp": [layer]}
            with record_stream(core, **kw) as rec:
                m_source = float(metric(logits_of(core, source)))
            src = rec.residual(layer) if site == "residual" else rec.mlp(layer)
            for p in range(n):
                with intervene(core, [patch(layer, src, positions=(p,))]):
                    scores[layer, p] = metric(logits_of(core, base))
    seconds = time.perf_counter() - start
    runs = 1 + len(layers) + scores.numel()
    m_clean, m_corrupt = (m_source, m_base) if direction == "denoise" else (m_base, m_source)
    return PatchingMap(site, metric.name, scores, m_clean, m_corrupt, metric.position, runs, seconds, direction)


def patch_residual(
    model, clean_ids, corrupt_ids, target, foil=None, *, position: int = -1, direction="denoise"
) -> PatchingMap:
    """The clean residual stream at each layer ``l = 0..L`` (block ``l``'s input; ``L``: after the last
    block) and each position patched into the corrupted run (or, noising, the corrupted one into the clean
    run), one cell at a time: an ``(L+1, N)`` :class:`PatchingMap` (row 0 the embeddings). Causal tracing's
    picture (Meng et al. 2022): where, layer by layer, the information the answer needs sits."""
    return _patch_stream("residual", model, clean_ids, corrupt_ids, target, foil, position, direction)


def patch_mlps(
    model, clean_ids, corrupt_ids, target, foil=None, *, position: int = -1, direction="denoise"
) -> PatchingMap:
    """Each MLP's clean output at each position patched into the corrupted run (or the reverse, noising):
    an ``(L, N)`` :class:`PatchingMap`."""
    return _patch_stream("mlp", model, clean_ids, corrupt_ids, target, foil, position, direction)


def repeated_tokens_pair(
    vocab_size: int, length: int = 20, *, seed: int = 0, special_ids=()
) -> tuple[Tensor, Tensor, int]:
    """An induction task to patch: ``(clean (2·length − 1,), corrupt, target)``. ``clean`` is ``length`` random
    tokens repeated twice (:func:`attnkit.models.induction.repeated_random_tokens`, seeded) without its last
    token, which is the ``target`` the model should predict by induction; ``corrupt`` the same with the first
    copy redrawn, so nothing earlier says what comes next. ``special_ids`` (a tokenizer's ``<s>``, padding…)
    are never drawn."""
    from ..models.induction import repeated_random_tokens

    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise ValueError(f"length must be an int >= 2, got {length!r}")
    g = torch.Generator().manual_seed(seed)
    kw = {"special_ids": tuple(special_ids)} if special_ids else {}
    clean = repeated_random_tokens(vocab_size, length, 1, generator=g, **kw)[0]  # (2·length,)
    corrupt = clean.clone()
    corrupt[:length] = repeated_random_tokens(vocab_size, length, 1, generator=g, **kw)[0, :length]
    return clean[:-1], corrupt[:-1], int(clean[-1])
