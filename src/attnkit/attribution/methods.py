"""The registry of attribution methods and the two entry points, :func:`explain` (translators) and
:func:`explain_caption` (captioners), over the forced pairs of :mod:`attnkit.attribution.forced`.

Each method is a function of the model and one forced pair that returns non-negative relevances
``(T, S)`` (and, where it has them, signed raw values); the registry times it, normalises the rows
(:func:`~attnkit.attribution.result.normalise_rows`) and returns an
:class:`~attnkit.attribution.result.Attribution`. Which methods a model has depends on what it is
(:func:`methods_for`): attention needs attention; rollout needs a Transformer's self- and
cross-attention (attnkit's, or a Hugging Face encoder-decoder's, special tokens included); value
zeroing, ALTI+ and attention-norm are defined over residual attention blocks with LayerNorm, which
attnkit's Transformer and the Bart-like Hugging Face families trace
(:func:`~attnkit.attribution.trace.trace_model`; a model they are not defined for says why); the
gradient methods work on any translation model, RNNencdec included, and on the captioners.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import InputError
from ..method_registry import ATTENTION, ATTENTION_GRADIENTS, ATTENTION_LAYERS, GRADIENTS, REGISTRY, RESIDUAL_TRACE
from . import decomposition, gradients
from .composed_attention import composable_maps
from .forced import ForcedCaption, ForcedTranslation, forced_caption, forced_maps, forced_trace, forced_translation
from .result import Attribution, MethodRows, normalise_rows
from .trace import decomposable, decomposition_refusal, is_transformer

__all__ = [
    "METHODS",
    "Method",
    "UnknownMethodError",
    "canonical_method",
    "explain",
    "explain_caption",
    "methods_for",
]


class UnknownMethodError(InputError):
    """A method name that is not in the registry, or a method the model does not have."""


# ---------------------------------------------------------------------------------------- translation methods
def _at_least_fp32(x: Tensor) -> Tensor:
    """``x`` in float32, or kept in float64 (a float64 model's gradients are checked in float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _check_no_options(name: str, options: dict) -> None:
    if options:
        raise InputError(f"{name} takes no options, got {', '.join(sorted(options))}")


def _cross(model, pair: ForcedTranslation, layer, head) -> Tensor:
    """One cross-attention map ``(T, S)``: layer ``layer`` (1-based, default last), head ``head``
    (1-based) or the head mean."""
    maps = forced_maps(model, pair)  # the pair's forced pass, when the request made it
    if maps.cross is None:
        if layer is not None or head is not None:
            raise InputError(f"{type(model).__name__} has one attention: --layer and --head do not apply")
        if maps.alignment is None:
            raise UnknownMethodError(f"{type(model).__name__} has no attention")
        return maps.alignment.float()
    cross = maps.cross.float()  # (L, H, T, S)
    li = decomposition._layer_index(cross.shape[0], layer)
    if head is None:
        return cross[li].mean(0)
    if isinstance(head, bool) or not isinstance(head, int) or not 1 <= head <= cross.shape[1]:
        raise InputError(f"head must be a head number in 1..{cross.shape[1]} (or none for the mean), got {head!r}")
    return cross[li, head - 1]


def _attention(model, pair, *, layer=None, head=None):
    return MethodRows(_cross(model, pair, layer, head))


def _rollout(model, pair, *, layer=None):
    from ..alignment import attention_rollout

    m = composable_maps(model, pair, layer)
    return MethodRows((m.cross @ attention_rollout(m.enc_self))[m.rows, m.cols])  # (T, S)


def _has_rollout(model) -> bool:
    return is_transformer(model) or callable(getattr(model, "full_attention", None))


@torch.no_grad()
def _attention_norm(model, pair, *, layer=None):
    if decomposable(model):
        trace, rows, cols = forced_trace(model, pair)
        return MethodRows(decomposition.attention_norm(trace, layer=layer)[rows, cols])
    if layer is not None:
        raise InputError(f"{type(model).__name__} has one attention: --layer does not apply")
    maps = forced_maps(model, pair)
    # additive attention sums the annotations themselves: ‖α_tj h_j‖ = α_tj ‖h_j‖
    return MethodRows(maps.alignment.float() * maps.annotations.float().norm(dim=-1))


@torch.no_grad()
def _value_zeroing(model, pair, *, layer=None):
    trace, rows, cols = forced_trace(model, pair)
    return MethodRows(decomposition.value_zeroing(trace, layer=layer)[rows, cols])


@torch.no_grad()
def _alti_plus(model, pair):
    trace, rows, cols = forced_trace(model, pair)
    contrib, _ = decomposition.alti_plus(trace)
    contrib = contrib[rows, cols]  # the text's pieces (a Hugging Face model's special tokens left out)
    share = contrib.sum(-1)
    return MethodRows(contrib, extra={"source_share": [round(v, 4) for v in share.detach().tolist()]})


#: forward passes per call of :func:`log_probs_at` (at most): its rows grouped by the last position they
#: need, each group decoding only the target prefix that position reads
PREFIX_GROUPS = 4


def log_probs_at(
    model,
    features: Callable[[Tensor, int], Tensor],
    tgt: Tensor,
    positions: Tensor,
    rows: Tensor | None = None,
    *,
    groups: int = PREFIX_GROUPS,
) -> Tensor:
    """``(M,)``: log p of forced piece ``tgt[positions[e]]`` read from input row ``rows[e]`` (default: row
    ``e``), where ``features(row ids (G,), length) -> (G, length, D)`` runs the model on those input rows
    with the first ``length`` target inputs (the output layer's input, ``features_only``).

    One attribution row or one deletion variant asks for one or a few pieces, not the whole ``(N, T)``
    table, and that is cheaper twice over: the output layer (``W f + b`` and the softmax over the
    vocabulary) runs at the asked positions only, and, the decoder being causal (its output at t reads
    ``tgt_in[: t + 1]`` only), the input rows sorted by the last position asked of them are split into
    ``groups`` groups that each decode only up to their own last position."""
    m = positions.shape[0]
    if rows is None:
        rows = torch.arange(m, device=positions.device)
    ids, inverse = torch.unique(rows, return_inverse=True)  # the distinct input rows; entry e reads ids[inverse[e]]
    last = torch.zeros(len(ids), dtype=positions.dtype, device=positions.device)
    last = last.scatter_reduce(0, inverse, positions, "amax")  # (R,): the last position each row must decode
    weight, bias = model.output_layer()
    done, values = [], []
    slot = torch.full((len(ids),), -1, dtype=torch.long, device=positions.device)
    for group in torch.argsort(last, stable=True).tensor_split(min(groups, len(ids))):
        if len(group) == 0:
            continue
        feats = features(ids[group], int(last[group].max()) + 1)  # (G, length, D)
        slot.fill_(-1)
        slot[group] = torch.arange(len(group), device=slot.device)
        entries = (slot[inverse] >= 0).nonzero()[:, 0]  # the entries this group answers
        h = feats[slot[inverse[entries]], positions[entries]]  # (E, D)
        logits = _at_least_fp32(F.linear(h, weight, bias))  # (E, V)
        done.append(entries)
        values.append(F.log_softmax(logits, dim=-1).gather(-1, tgt[positions[entries]][:, None])[:, 0])
    values = torch.cat(values)
    return values.new_empty(m).index_put((torch.cat(done),), values)


def translation_log_probs(model, pair: ForcedTranslation) -> Callable[..., Tensor]:
    """``f(source embeddings (N, S, E), positions=None)``: log p of every forced target piece ``(N, T)``,
    or with ``positions (N,)`` of piece ``positions[i]`` in row ``i`` only ``(N,)`` (:func:`log_probs_at`);
    eval mode."""
    tgt_in = pair.tgt_in[None]
    lengths = torch.tensor([len(pair.src)], device=pair.src.device)
    dtype = model.embedding.weight.dtype

    def run(src_emb: Tensor, length: int, *, features_only: bool) -> Tensor:
        n = src_emb.shape[0]
        src = pair.src[None].expand(n, -1).clone()  # a tensor of its own: the hook recognises it
        with gradients.source_embedding_override(model.embedding, src, src_emb.to(dtype)):
            out, _ = model(src, lengths.expand(n), tgt_in[:, :length].expand(n, -1), features_only=features_only)
        return out

    def f(src_emb: Tensor, positions: Tensor | None = None) -> Tensor:
        if positions is None:
            logits = _at_least_fp32(run(src_emb, len(pair.tgt), features_only=False))  # (N, T, V)
            n = src_emb.shape[0]
            return F.log_softmax(logits, dim=-1).gather(-1, pair.tgt[None, :, None].expand(n, -1, -1))[..., 0]
        return log_probs_at(
            model, lambda rows, length: run(src_emb[rows], length, features_only=True), pair.tgt, positions
        )

    return f


def translation_split(model, pair: ForcedTranslation) -> gradients.SplitForward | None:
    """The translator cut at its output layer for the shared-forward gradient engine
    (:class:`attnkit.attribution.gradients.SplitForward`), or ``None`` for a recurrent model: vmap over
    the backward of torch's GRU unrolls it a time step at a time, slower than the per-row engine for
    RNNsearch (measured in benchmarks/RESULTS.md, section "Gradient attributions with a shared forward
    pass"), so RNNs keep the per-row engine."""
    if any(isinstance(m, torch.nn.RNNBase) for m in model.modules()):
        return None
    lengths = torch.tensor([len(pair.src)], device=pair.src.device)
    dtype = model.embedding.weight.dtype

    def features(src_emb: Tensor, length: int) -> Tensor:  # (N, S, E) -> (N, length, D)
        n = src_emb.shape[0]
        src = pair.src[None].expand(n, -1).clone()  # a tensor of its own: the hook recognises it
        tgt_in = pair.tgt_in[None, :length].expand(n, -1)
        with gradients.source_embedding_override(model.embedding, src, src_emb.to(dtype)):
            return model(src, lengths.expand(n), tgt_in, features_only=True)[0]

    def log_probs(h: Tensor) -> Tensor:  # (N, L, D) -> (N, L)
        weight, bias = model.output_layer()
        logits = _at_least_fp32(F.linear(h, weight, bias))  # (N, L, V)
        wanted = pair.tgt[None, : h.shape[1], None].expand(h.shape[0], -1, -1)
        return F.log_softmax(logits, dim=-1).gather(-1, wanted)[..., 0]

    return gradients.SplitForward(features, log_probs)


def _gradient(name):
    def run(model, pair, *, steps=None, batch=None, progress=None):
        was_training = model.training
        model.eval()
        try:
            emb = _at_least_fp32(model.embedding(pair.src).detach())  # (S, E)
            f = translation_log_probs(model, pair)
            attr, delta, used = gradients.attribute(
                name,
                f,
                emb,
                len(pair.tgt),
                steps=steps,
                batch=batch,
                progress=progress,
                forward_at=f,
                split=translation_split(model, pair),
            )  # (T, S, E)
        finally:
            model.train(was_training)
        out = MethodRows(attr.norm(dim=-1), attr.sum(-1))
        if delta is not None:
            out.extra = {"convergence_delta": [round(float(d), 6) for d in delta], "steps": used}
        return out

    return run


# ---------------------------------------------------------------------------------------- caption methods
def _caption_attention(model, pair: ForcedCaption):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(
                pair.image[None], pair.tokens_in[None], hard="argmax" if model.config.attention == "hard" else None
            )
    finally:
        model.train(was_training)
    return MethodRows(out.alphas[0].float())  # (T, L)


def caption_log_probs(model, pair: ForcedCaption) -> Callable[[Tensor], Tensor]:
    """``f(images (N, 1, C, C)) -> (N, T)``: log p of every forced caption word (eval mode)."""
    hard = "argmax" if model.config.attention == "hard" else None
    tokens_in, tokens = pair.tokens_in[None], pair.tokens[None, :, None]

    def f(images: Tensor) -> Tensor:
        n = images.shape[0]
        logits = model(images, tokens_in.expand(n, -1), hard=hard).logits
        return F.log_softmax(_at_least_fp32(logits), dim=-1).gather(-1, tokens.expand(n, -1, -1))[..., 0]

    return f


def _cell_index(canvas: int, grid: tuple[int, int], device) -> Tensor:
    """``(C·C,)``: the row-major grid cell of every pixel (pixel row y lies in cell row ⌊y·h/C⌋)."""
    h, w = grid
    rows = torch.arange(canvas, device=device) * h // canvas
    cols = torch.arange(canvas, device=device) * w // canvas
    return (rows[:, None] * w + cols[None, :]).reshape(-1)


def cells(pixel_attr: Tensor, grid: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """``(T, 1, C, C)`` per-pixel attributions → ``(L2 norm per cell (T, h·w), signed sum per cell (T, h·w))``."""
    t, canvas = pixel_attr.shape[0], pixel_attr.shape[-1]
    idx = _cell_index(canvas, grid, pixel_attr.device)
    flat = pixel_attr.reshape(t, -1)
    n_cells = grid[0] * grid[1]
    sq = flat.new_zeros(t, n_cells).index_add_(1, idx, flat * flat)
    signed = flat.new_zeros(t, n_cells).index_add_(1, idx, flat)
    return sq.sqrt(), signed


def _caption_gradient(name):
    def run(model, pair, *, steps=None, batch=None, progress=None):
        was_training = model.training
        model.eval()
        try:
            attr, delta, used = gradients.attribute(
                name,
                caption_log_probs(model, pair),
                _at_least_fp32(pair.image),
                len(pair.tokens),
                steps=steps,
                batch=batch,
                progress=progress,
            )  # (T, 1, C, C)
        finally:
            model.train(was_training)
        norm, signed = cells(attr, model.grid_shape)
        out = MethodRows(norm, signed, pixels=attr[:, 0])
        if delta is not None:
            out.extra = {"convergence_delta": [round(float(d), 6) for d in delta], "steps": used}
        return out

    return run


# ---------------------------------------------------------------------------------------- the registry
def _has_attention(model) -> bool:
    """attnkit's Transformer, an RNN with attention, or any translation model whose ``attention_maps``
    has cross-attention layers (its config counts ``num_decoder_layers``: a Hugging Face encoder-decoder)."""
    layered = getattr(getattr(model, "config", None), "num_decoder_layers", None) is not None
    return (
        is_transformer(model)
        or getattr(model, "attention", None) is not None
        or (layered and callable(getattr(model, "attention_maps", None)))
    )


@dataclass(frozen=True)
class Method:
    """One attribution method: its name, what it is (``title``, ``reference``), which models have it,
    whether it needs gradients, and its implementations for translators and captioners."""

    name: str
    title: str
    reference: str
    needs_gradients: bool
    translation: Callable[..., dict] | None
    caption: Callable[..., dict] | None
    applies: Callable[[Any], bool]
    requirement: str  # said when the model lacks what the method needs


def _method(name: str, translation, caption, applies, requirement: str) -> Method:
    """The :class:`Method` ``name``: its registry entry (needing gradients: the inputs', by Captum) and code."""
    spec = REGISTRY[name]
    return Method(name, spec.title, spec.reference, GRADIENTS in spec.needs, translation, caption, applies, requirement)


#: each capability of the registry, as a translator has it: (the check of the model, what a model lacking it
#: is asked to be)
TRANSLATOR_CAPABILITIES: dict[str, tuple[Callable[[Any], bool], str]] = {
    ATTENTION: (_has_attention, "a model with attention"),
    ATTENTION_LAYERS: (_has_rollout, "a Transformer (its encoder's self-attention layers are composed)"),
    RESIDUAL_TRACE: (decomposable, "a Transformer"),
    GRADIENTS: (lambda m: True, ""),
    ATTENTION_GRADIENTS: (decomposable, "a Transformer (attention in the autograd graph)"),
}


def _declared(name: str) -> Method:
    """The :class:`Method` of a registry entry whose module computes a translator's rows (``pairs``): its
    function imported on first call, the translators that have it those with every capability it needs."""
    spec = REGISTRY[name]
    module, _, function = spec.pairs.partition(":")

    def run(model, pair, *, layer=None):
        import importlib

        return getattr(importlib.import_module(module), function)(model, pair, layer=layer)

    checks = [TRANSLATOR_CAPABILITIES[c] for c in sorted(spec.needs)]
    texts = [
        text for c, (_, text) in zip(sorted(spec.needs), checks) if text and not (c == ATTENTION and len(checks) > 1)
    ]
    requirement = " and ".join(texts)  # attention is said only alone: every other capability implies it
    return _method(name, run, None, lambda m: all(check(m) for check, _ in checks), requirement)


_OWN: dict[str, Method] = {
    m.name: m
    for m in (
        _method(
            "attention",
            _attention,
            _caption_attention,
            _has_attention,
            "a model with attention",
        ),
        _method(
            "rollout",
            _rollout,
            None,
            _has_rollout,
            "a Transformer (it composes the encoder's self-attention layers)",
        ),
        _method(
            "attention_norm",
            _attention_norm,
            None,
            lambda m: decomposable(m) or getattr(m, "attention", None) is not None,
            "a model with attention",
        ),
        _method(
            "value_zeroing",
            _value_zeroing,
            None,
            decomposable,
            "a Transformer",
        ),
        _method(
            "alti_plus",
            _alti_plus,
            None,
            decomposable,
            "a Transformer",
        ),
        _method(
            "saliency",
            _gradient("saliency"),
            _caption_gradient("saliency"),
            lambda m: True,
            "",
        ),
        _method(
            "input_x_gradient",
            _gradient("input_x_gradient"),
            _caption_gradient("input_x_gradient"),
            lambda m: True,
            "",
        ),
        _method(
            "integrated_gradients",
            _gradient("integrated_gradients"),
            _caption_gradient("integrated_gradients"),
            lambda m: True,
            "",
        ),
    )
}

#: every translator and captioner method, in the registry's order: those written here, and those whose own
#: module computes a translator's rows (the registry's ``pairs``)
METHODS: dict[str, Method] = {
    name: _OWN[name] if name in _OWN else _declared(name)
    for name, spec in REGISTRY.items()
    if name in _OWN or spec.pairs is not None
}


def canonical_method(name: str) -> str:
    """A method name as the registry spells it (``input-x-gradient`` → ``input_x_gradient``; ``alti+``,
    ``ig`` and ``ixg`` are accepted); an unknown name is an :class:`UnknownMethodError` listing them, and a
    language model's method (``alti``, a language model's ALTI; ``alti_logit``; the views of one prediction)
    one saying so."""
    if not isinstance(name, str):
        raise UnknownMethodError(f"method must be a name, got {type(name).__name__}")
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    key = {"alti+": "alti_plus", "ig": "integrated_gradients", "ixg": "input_x_gradient"}.get(key, key)
    if key in REGISTRY and key not in METHODS:
        extra = " (a translator's ALTI is alti_plus, ALTI+)" if key == "alti" else ""
        raise UnknownMethodError(
            f"{key} is a language model's method, not a translator's or a captioner's{extra}; theirs: {', '.join(METHODS)}"
        )
    if key not in METHODS:
        raise UnknownMethodError(f"unknown attribution method {name!r}; known: {', '.join(METHODS)}")
    return key


def methods_for(model) -> list[str]:
    """The methods ``model`` (a translation model, a captioner, or their inference wrappers) has, in registry
    order; the gradient methods only where Captum is installed (``pip install 'attnkit[explain]'``). A model
    loaded with ``precision="int8"`` has none: its quantized layers have no float weights to read or
    differentiate."""
    from ..models.captioner import ShowAttendTell

    m = getattr(model, "model", model)
    if getattr(m, "precision", None) == "int8":
        return []
    usable = [name for name, meth in METHODS.items() if not meth.needs_gradients or _have_captum()]
    if isinstance(m, ShowAttendTell):
        return [name for name in usable if METHODS[name].caption is not None]
    return [name for name in usable if METHODS[name].translation is not None and METHODS[name].applies(m)]


def _have_captum() -> bool:
    """Whether Captum (the ``explain`` extra) is installed: the gradient methods need it."""
    import importlib.util

    return importlib.util.find_spec("captum") is not None


def _run(method: str, kind: str, model, pair, source, target, options, grid=None) -> Attribution:
    name = canonical_method(method)
    meth = METHODS[name]
    fn = meth.translation if kind == "translation" else meth.caption
    if fn is None or (kind == "translation" and not meth.applies(model)):
        reason = decomposition_refusal(model) if fn is not None else None
        if reason:
            raise UnknownMethodError(f"{name} is {reason}; this model has: {', '.join(methods_for(model))}")
        raise UnknownMethodError(
            f"{name} needs {meth.requirement or 'another kind of model'}; "
            f"{type(model).__name__} has: {', '.join(methods_for(model))}"
        )
    options = {k: v for k, v in options.items() if v is not None}
    progress = options.pop("progress", None)
    if meth.needs_gradients:
        options["progress"] = progress
    import inspect

    taken = [o for o in inspect.signature(fn).parameters if o not in ("model", "pair", "progress")]
    bad = sorted(k for k in options if k not in taken and k != "progress")
    if bad:
        raise InputError(f"{name} does not take {', '.join(bad)}; its options: {', '.join(taken) or 'none'}")
    t0 = time.perf_counter()
    out = fn(model, pair, **options)
    seconds = time.perf_counter() - t0
    scores = out.scores.detach().float().cpu()
    params = {k: v for k, v in options.items() if k not in ("progress", "batch")}  # batch changes no value
    if name == "integrated_gradients":
        params.setdefault("steps", f"{gradients.DEFAULT_STEPS}, refined to 1 % (up to {gradients.MAX_STEPS})")
    extra = dict(out.extra)
    if out.pixels is not None:
        extra["pixels"] = out.pixels.detach().float().cpu()
    return Attribution(
        method=name,
        source=source,
        target=target,
        scores=normalise_rows(scores.clamp_min(0.0)),
        raw=None if out.raw is None else out.raw.detach().float().cpu(),
        params=params,
        seconds=seconds,
        needs_gradients=meth.needs_gradients,
        grid=grid,
        extra=extra,
    )


def explain(
    translator,
    source: str,
    *,
    target: str | None = None,
    method: str = "attention",
    beam: int = 5,
    layer: int | None = None,
    head: int | None = None,
    steps: int | None = None,
    batch: int | None = None,
    progress: Callable[[float], None] | None = None,
    pair: ForcedTranslation | None = None,
) -> Attribution:
    """Source-piece attributions of every target piece of ``translator``'s translation of ``source``
    (or of ``target``, forced), by ``method`` (see :data:`METHODS`). ``layer``/``head`` (1-based) pick a
    cross-attention layer/head where the method has one; ``steps``: integrated gradients' quadrature
    points; ``batch``: a gradient method's rows per forward+backward pass (default
    :data:`~attnkit.attribution.gradients.DEFAULT_BATCH`; memory, not values); ``progress(fraction)``: called
    as a gradient method goes. ``pair`` reuses a forced pair."""
    pair = pair or forced_translation(translator, source, target, beam=beam)
    options = {"layer": layer, "head": head, "steps": steps, "batch": batch, "progress": progress}
    att = _run(method, "translation", translator.model, pair, pair.source_pieces, pair.target_pieces, options)
    att.extra.setdefault("translation", translator.tokenizer.decode(pair.tgt.tolist()))
    att.extra.setdefault("forced", target is not None)
    return att


def explain_caption(
    captioner,
    image: Tensor,
    *,
    caption: str | None = None,
    method: str = "attention",
    beam: int = 1,
    steps: int | None = None,
    batch: int | None = None,
    progress: Callable[[float], None] | None = None,
    pair: ForcedCaption | None = None,
) -> Attribution:
    """Grid-cell attributions of every word of ``captioner``'s caption of ``image (1, C, C)`` (or of
    ``caption``, forced), by ``method``: ``attention`` (α_t), or a gradient method over the image's
    pixels summed into the attention grid's cells (L2 norm for ``scores``, signed sum for ``raw``); ``steps``,
    ``batch`` and ``progress`` as in :func:`explain`."""
    pair = pair or forced_caption(captioner, image, caption, beam=beam)
    att = _run(
        method,
        "caption",
        captioner.model,
        pair,
        [f"cell {i}" for i in range(captioner.model.num_cells)],
        pair.words,
        {"steps": steps, "batch": batch, "progress": progress},
        grid=tuple(captioner.model.grid_shape),
    )
    att.image = pair.image.detach().float().cpu()
    return att
