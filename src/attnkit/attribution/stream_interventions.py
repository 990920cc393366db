"""Interventions on a language model's residual stream and MLPs as typed requests, beside the heads'.

attnkit's language model (:class:`~attnkit.models.language_model.LanguageModel`) is pre-norm::

    h_0 = embed(x) (+ positions),   h_{l+1} = h_l + Attn_l(norm(h_l)) + MLP_l(norm(h_l + Attn_l(·)))

so its **residual stream** at layer ``l`` (0-based, ``0..L``) is ``h_l``: the input of block ``l`` for
``l < L`` (``h_0`` the embeddings), and for ``l = L`` the final norm's input, after the last block. An
**MLP's output** is what block ``l``'s MLP adds to the stream. These are the sites TransformerLens calls
``blocks.l.hook_resid_pre`` / ``ln_final``'s input and ``blocks.l.hook_mlp_out`` (Nanda 2022):

- :class:`ResidualPatch` — activation patching (Meng et al. 2022's "causal tracing" restores a clean
  state this way): ``h_l`` at ``positions`` (or all) replaced by its value on a second input;
- :class:`ResidualAblation` — ``h_l`` at ``positions`` set to zero, or to a mean ``(D,)``;
- :class:`MLPPatch`, :class:`MLPAblation` — the same for MLP ``l``'s output.

A residual site is a forward pre-hook on block ``l`` (or on the final norm), an MLP site a forward hook on
the block's MLP, registered through :func:`attnkit.hooks.thread_hooks` for one ``with`` block of
:func:`~attnkit.attribution.interventions.intervene`, which takes these requests beside the heads'.
:func:`record_stream` records only the sites asked for (what patching one site needs, not every
activation of every layer). Layers and positions are 0-based.

The same sites of a Hugging Face decoder-only model (GPT-2, GPT-NeoX, the Llama-like families, the sandwich
ones) are named by :func:`attnkit.hf.stream_sites.hf_stream`: block ``l``'s input, the final norm's input,
what MLP ``l`` adds to the stream.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..hooks import thread_hooks

__all__ = [
    "STREAM_ABLATION_MODES",
    "MLPAblation",
    "MLPPatch",
    "ResidualAblation",
    "ResidualPatch",
    "StreamRecording",
    "record_stream",
    "stream_hooks",
]

#: what a :class:`ResidualAblation` or :class:`MLPAblation` puts in the site's place
STREAM_ABLATION_MODES = ("zero", "mean")


def _check_index(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0 (0-based), got {value!r}")


def _check_positions(obj) -> None:
    if obj.positions is not None:
        object.__setattr__(obj, "positions", tuple(obj.positions))
        for p in obj.positions:
            _check_index("positions", p)


def _check_source(source) -> None:
    if not isinstance(source, Tensor) or source.dim() not in (2, 3):
        got = tuple(source.shape) if isinstance(source, Tensor) else type(source).__name__
        raise ValueError(f"source must be the site's activation (B, N, D) or (N, D), got {got}")


def _check_ablation(obj) -> None:
    _check_index("layer", obj.layer)
    if obj.mode not in STREAM_ABLATION_MODES:
        raise ValueError(f"mode must be one of {STREAM_ABLATION_MODES}, got {obj.mode!r}")
    if obj.mode == "zero" and obj.reference is not None:
        raise ValueError("reference is for mode='mean'; zero ablation takes none")
    if obj.mode == "mean" and not isinstance(obj.reference, Tensor):
        raise ValueError("mode='mean' needs reference: a tensor of the site's activations (record_stream)")
    _check_positions(obj)


@dataclass(frozen=True, eq=False)
class ResidualPatch:
    """The residual stream ``h_layer`` (``layer`` in ``0..L``) takes ``source`` (``(B, N, D)``, or ``(N, D)``
    for every row), its value on a second input of the same length, at ``positions`` or at all of them."""

    layer: int
    source: Tensor
    positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        _check_index("layer", self.layer)
        _check_source(self.source)
        _check_positions(self)


@dataclass(frozen=True, eq=False)
class ResidualAblation:
    """The residual stream ``h_layer`` at ``positions`` (or all) set to zero, or (``mode="mean"``) to
    ``reference`` averaged to one ``(D,)`` vector."""

    layer: int
    positions: tuple[int, ...] | None = None
    mode: str = "zero"
    reference: Tensor | None = None

    def __post_init__(self) -> None:
        _check_ablation(self)


@dataclass(frozen=True, eq=False)
class MLPPatch:
    """MLP ``layer``'s output takes ``source`` (``(B, N, D)`` or ``(N, D)``) at ``positions`` or at all."""

    layer: int
    source: Tensor
    positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        _check_index("layer", self.layer)
        _check_source(self.source)
        _check_positions(self)


@dataclass(frozen=True, eq=False)
class MLPAblation:
    """MLP ``layer``'s output at ``positions`` (or all) set to zero, or to ``reference``'s mean ``(D,)``."""

    layer: int
    positions: tuple[int, ...] | None = None
    mode: str = "zero"
    reference: Tensor | None = None

    def __post_init__(self) -> None:
        _check_ablation(self)


StreamIntervention = ResidualPatch | ResidualAblation | MLPPatch | MLPAblation
STREAM_TYPES = (ResidualPatch, ResidualAblation, MLPPatch, MLPAblation)


def _stream(model):
    """The stream sites under ``model``: ``(blocks, final norm, MLPs (None: attention-only), d_model)`` of
    attnkit's :class:`~attnkit.models.language_model.LanguageModel` (itself, or inside a generator or a
    :class:`attnkit.service.Model`) or of a Hugging Face decoder-only model
    (:func:`attnkit.hf.stream_sites.hf_stream`); ``TypeError`` for anything else."""
    from ..hf.head_sites import is_hf_model
    from ..hf.loading import HFModelError
    from ..hf.stream_sites import hf_stream
    from ..models.language_model import LanguageModel

    core, seen = None, model
    for _ in range(4):  # itself, or inside a generator, a text model, a service Model
        if isinstance(seen, LanguageModel) or is_hf_model(seen):
            core = seen
            break
        seen = next((getattr(seen, a) for a in ("impl", "hf", "model") if getattr(seen, a, None) is not None), None)
        if seen is None:
            break
    if isinstance(core, LanguageModel):
        mlps = None if core.layers[0].mlp is None else tuple(layer.mlp for layer in core.layers)
        return core.layers, core.norm, mlps, core.config.d_model
    if core is not None and is_hf_model(core):
        try:
            s = hf_stream(core)
        except HFModelError as exc:
            raise TypeError(str(exc)) from None
        return s.blocks, s.final_norm, s.mlps, s.d_model
    raise TypeError(
        "residual-stream and MLP interventions are for attnkit's language model or a Hugging Face decoder-only "
        f"one, got {type(model).__name__}"
    )


def _module_of(stream, iv) -> tuple[nn.Module, bool]:
    """``(module, pre)``: where ``iv``'s hook goes (a forward pre-hook when ``pre``)."""
    blocks, final, mlps, _ = stream
    n = len(blocks)
    if isinstance(iv, (ResidualPatch, ResidualAblation)):
        if iv.layer > n:
            raise ValueError(
                f"layer must be in 0..{n} for the residual stream (0: embeddings, {n}: after the last block)"
            )
        return (blocks[iv.layer] if iv.layer < n else final), True
    if iv.layer >= n:
        raise ValueError(f"layer must be in 0..{n - 1} for an MLP, got {iv.layer}")
    if mlps is None:
        raise ValueError(f"layer {iv.layer} has no MLP (an attention-only model)")
    return mlps[iv.layer], False


def _replace(iv, current: Tensor) -> Tensor:
    """``current (B, N, D)`` with ``iv``'s values at its positions."""
    b, n, d = current.shape
    if isinstance(iv, (ResidualPatch, MLPPatch)):
        new = iv.source.to(dtype=current.dtype, device=current.device)
        if new.dim() == 2:
            new = new.unsqueeze(0).expand(b, -1, -1)  # (B, N, D)
        if new.shape != current.shape:
            raise ValueError(
                f"source {tuple(iv.source.shape)} does not match the call's (B, N, D) = {tuple(current.shape)}: "
                "patching needs inputs of equal shape (and a whole forward, not a decoding step)"
            )
    elif iv.mode == "zero":
        new = torch.zeros_like(current)
    else:
        new = iv.reference.to(dtype=current.dtype, device=current.device).reshape(-1, d).mean(0).expand_as(current)
    if iv.positions is None:
        return new
    if any(p >= n for p in iv.positions):
        raise ValueError(f"positions must be < N = {n}, got {iv.positions}")
    keep = torch.ones(n, dtype=torch.bool, device=current.device)
    keep[list(iv.positions)] = False
    return torch.where(keep[None, :, None], current, new)


def stream_hooks(model, interventions: Sequence[StreamIntervention]) -> tuple[list, list]:
    """``(pre_hooks, hooks)``: the ``(module, hook)`` pairs that put ``interventions`` in place, checked
    (``ValueError`` for a layer out of range, an MLP an attention-only model lacks, a source of the wrong width)."""
    stream = _stream(model)
    d = stream[3]
    pre, post = [], []
    for iv in interventions:
        module, is_pre = _module_of(stream, iv)
        src = getattr(iv, "source", None)
        if src is None:
            src = getattr(iv, "reference", None)
        if src is not None and src.shape[-1] != d:
            raise ValueError(f"source/reference must end in d_model = {d}, got {tuple(src.shape)}")
        if is_pre:

            def pre_hook(module, args, iv=iv):
                return (_replace(iv, args[0]), *args[1:])

            pre.append((module, pre_hook))
        else:

            def hook(module, args, output, iv=iv):
                return _replace(iv, output)

            post.append((module, hook))
    return pre, post


class StreamRecording:
    """What :func:`record_stream` recorded: :meth:`residual` and :meth:`mlp`, ``(B, N, D)`` each."""

    def __init__(self):
        self._resid: dict[int, Tensor] = {}
        self._mlp: dict[int, Tensor] = {}

    def residual(self, layer: int) -> Tensor:
        if layer not in self._resid:
            raise ValueError(f"the residual stream at layer {layer} was not recorded (recorded: {sorted(self._resid)})")
        return self._resid[layer]

    def mlp(self, layer: int) -> Tensor:
        if layer not in self._mlp:
            raise ValueError(f"MLP {layer}'s output was not recorded (recorded: {sorted(self._mlp)})")
        return self._mlp[layer]


@contextmanager
def record_stream(
    model, *, residual: Sequence[int] = (), mlp: Sequence[int] = (), detach: bool = True
) -> Iterator[StreamRecording]:
    """Record the residual stream at layers ``residual`` (``0..L``) and the outputs of MLPs ``mlp`` for the
    ``with`` block (the last call's; detached unless ``detach=False``, which keeps them in the graph for a
    gradient). Only these sites are kept."""
    stream = _stream(model)
    rec = StreamRecording()
    pre, post = [], []
    for layer in residual:
        module, _ = _module_of(stream, ResidualAblation(layer))

        def pre_hook(module, args, layer=layer):
            rec._resid[layer] = args[0].detach() if detach else args[0]

        pre.append((module, pre_hook))
    for layer in mlp:
        module, _ = _module_of(stream, MLPAblation(layer))

        def hook(module, args, output, layer=layer):
            rec._mlp[layer] = output.detach() if detach else output

        post.append((module, hook))
    with thread_hooks(pre, pre=True), thread_hooks(post):
        yield rec
