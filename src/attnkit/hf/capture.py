"""Attention weights from a running Hugging Face model, whatever its attention implementation.

Under the default ``sdpa`` implementation a model never forms its attention weights (the fused
kernel does not return them), and ``output_attentions=True`` needs the model reloaded in eager mode.
Instead, attnkit watches the call every attention module of ``transformers`` makes to its attention
function (``attention_interface(module, query, key, value, attention_mask, scaling=..., ...)``) and,
for the modules asked for only, recomputes the weights from the very queries and keys the module
passes, the mask it built and the bias it adds:

``A = softmax(Q Kᵀ · scaling + B + M)``

with ``Q`` and ``K`` after the module's own projections (after RoPE for Llama, with the key/value
cache during decoding, the key/value heads repeated for grouped-query attention), ``scaling`` the
module's (``1/√d_h``; BART, Marian and M2M100 scale ``Q`` by it; T5 uses 1), ``B`` T5's relative
position bias (``position_bias``) and ``M`` the mask the model built (padding, causal: ``0`` where a
key may be attended, the dtype's minimum where not, as eager attention adds it; a causal ``sdpa``
call without a mask gets the causal mask). The model's own output is computed as before, by its
own kernel. Under ``eager`` the module returns its weights, which are taken as they are.

The weights are handed to a callback as each layer runs, for the asked heads only, so a long input
never holds more than one layer's maps at once (:func:`capture_attention`). :func:`attention_sites`
names every attention module of a model: ``enc_self``, ``dec_self`` and ``cross`` for an
encoder-decoder, ``self`` for an encoder-only or decoder-only model, with its layer (0-based).

**What a model must do to be read.** Its attention modules must call ``transformers``' attention
interface (every family of ``transformers`` 5 does: Llama, Qwen, Mistral, Gemma, Phi-3, OLMo, GPT-NeoX,
BERT...), or, under ``eager``, return their weights. A module that runs its attention itself (a
remote-code model, a module swapped in by a library) is caught as it runs, before any map of it is
handed on: :class:`UntraceableModelError`, one line naming the model type and what it lacks
(:func:`untraceable`), never a map that is silently missing or wrong.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .loading import HFModelError
from .transformers_internals import attention_function, attention_implementation, register_attention_function

__all__ = [
    "AttentionSite",
    "UntraceableModelError",
    "attention_sites",
    "attention_weights",
    "capture_attention",
    "untraceable",
    "watch_attention_call",
]

KINDS = ("enc_self", "dec_self", "cross", "self")
_CROSS_NAMES = ("encoder_attn", "encdecattention", "crossattention", "cross_attn")


@dataclass(frozen=True)
class AttentionSite:
    """One attention module of a model: ``kind`` (one of ``enc_self``, ``dec_self``, ``cross``,
    ``self``), ``layer`` (0-based, within its stack), ``name`` (its path in the model) and ``module``."""

    kind: str
    layer: int
    name: str
    module: nn.Module


class UntraceableModelError(HFModelError):
    """A model whose attention attnkit cannot read (see the module docstring): one line naming what it lacks."""


def untraceable(model: nn.Module, lacks: str) -> UntraceableModelError:
    """The one refusal for a model attnkit cannot trace: ``attnkit cannot read attention from <model_type>:
    <lacks>``, ``model_type`` from its config (the class name where it has none)."""
    kind = getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__
    return UntraceableModelError(f"attnkit cannot read attention from {kind}: {lacks}")


def attention_sites(model: nn.Module) -> list[AttentionSite]:
    """Every attention module of a ``transformers`` model, in order: the innermost modules whose class
    name ends with ``Attention`` (``MarianAttention``, ``T5Attention``, ``BertSelfAttention``,
    ``GPT2Attention``, ``LlamaAttention``...), classified by where they sit."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    candidates = [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith("Attention")]
    inner = [
        (n, m) for n, m in candidates if not any(o is not m and o_name.startswith(n + ".") for o_name, o in candidates)
    ]
    encdec = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    sites = []
    for name, module in inner:
        number = re.search(r"\.(\d+)(\.|$)", name)
        if number is None:
            continue  # an attention outside the layer stacks (a pooler's): not one of the model's layers
        lowered = name.lower()
        if not encdec:
            kind = "self"
        elif any(c in lowered for c in _CROSS_NAMES):
            kind = "cross"
        elif re.search(r"(^|\.)decoder\.", lowered):
            kind = "dec_self"
        else:
            kind = "enc_self"
        sites.append(AttentionSite(kind, int(number.group(1)), name, module))
    return sites


def attention_weights(
    query: Tensor,
    key: Tensor,
    attention_mask: Tensor | None = None,
    *,
    scaling: float | None = None,
    is_causal: bool = False,
    position_bias: Tensor | None = None,
    heads: Sequence[int] | None = None,
) -> Tensor:
    """``softmax(Q Kᵀ · scaling + B + M)`` in float32 (float64 for a float64 model, so that its
    decompositions can be checked to float64 rounding; see the module docstring).

    ``query (B, H, Tq, D)``, ``key (B, Hkv, Tk, D)`` (``H`` a multiple of ``Hkv``: grouped-query
    attention), ``attention_mask`` boolean (``True`` = may attend) or additive, broadcastable to
    ``(B, H, Tq, Tk)``; ``is_causal`` (used only without a mask and with more than one query, as
    ``sdpa`` does): query ``i`` sees keys ``0..i``; ``position_bias`` additive ``(B or 1, H, Tq, Tk)``;
    ``heads``: the heads to compute (default all). Returns ``(B, len(heads), Tq, Tk)``."""
    if query.dim() != 4 or key.dim() != 4:
        raise ValueError(f"query and key must be (B, H, T, D), got {tuple(query.shape)} and {tuple(key.shape)}")
    n_heads, n_kv = query.shape[1], key.shape[1]
    if n_heads % n_kv:
        raise ValueError(f"query has {n_heads} heads, not a multiple of key's {n_kv}")
    idx = list(range(n_heads)) if heads is None else [int(h) for h in heads]
    group = n_heads // n_kv
    every = heads is None  # all heads in order: no gather (a copy of the whole key cache at every decoding step)
    wide = torch.promote_types(query.dtype, torch.float32)  # float32, or float64 for a float64 model
    q = (query if every else query[:, idx]).to(wide)  # (B, h, Tq, D)
    k = (key if every and group == 1 else key[:, [h // group for h in idx]]).to(wide)  # (B, h, Tk, D)
    scale = query.shape[-1] ** -0.5 if scaling is None else float(scaling)
    scores = torch.matmul(q, k.transpose(-1, -2))  # (B, h, Tq, Tk)
    # in place where no gradient flows: one (B, h, Tq, Tk) block besides the softmax's output, not three
    # (2 GiB each for 32 heads at 4,096 tokens); the same operations in the same order, the same numbers
    inplace = not scores.requires_grad
    scores = scores.mul_(scale) if inplace else scores * scale
    t_q, t_k = scores.shape[-2:]
    low = torch.finfo(torch.float32).min
    mask = attention_mask
    if mask is None and is_causal and t_q > 1:
        mask = torch.ones(t_q, t_k, dtype=torch.bool, device=scores.device).tril()  # top-left aligned, as sdpa
    if mask is not None:
        mask = mask[..., :t_q, :t_k]
        if mask.dim() == 4 and mask.shape[1] > 1 and not every:
            mask = mask[:, idx]
        mask = mask if mask.dtype == torch.bool else mask.to(wide)
    if position_bias is not None:
        bias = position_bias[..., :t_q, :t_k]
        bias = (bias[:, idx] if bias.shape[1] > 1 and not every else bias).to(wide)
        if mask is None:
            mask = bias
        elif mask.dtype == torch.bool:
            mask = torch.where(mask, bias, low)
        else:
            mask = bias + mask
    if mask is not None:
        add = torch.where(mask, 0.0, low) if mask.dtype == torch.bool else mask
        scores = scores.add_(add) if inplace and _broadcasts(add, scores) else scores + add
    scores = scores.clamp_min_(low) if inplace else scores.clamp_min(low)
    return torch.softmax(scores, dim=-1)


def _broadcasts(small: Tensor, big: Tensor) -> bool:
    """Whether ``big += small`` can run in place: ``small`` broadcasts to ``big``'s shape and dtype, not beyond."""
    return (
        torch.broadcast_shapes(small.shape, big.shape) == big.shape
        and torch.promote_types(small.dtype, big.dtype) == big.dtype
    )


# -- the watch on transformers' attention functions ------------------------------------------------

#: (thread, id(attention module)) -> what to do with its (query, key, mask, kwargs). Keyed by thread too: a
#: server's threads may run the same model at once (two batches of one model), each capturing its own pass.
_ACTIVE: dict[tuple[int, int], Callable] = {}
_WRAPPED = "_attnkit_capture"
_WITH_VALUE = "_attnkit_with_value"  # a record that takes the values too (watch_attention_call(values=True))


def _install() -> None:
    """Wrap ``transformers``' registered attention functions once (idempotent): a module that is not
    being captured goes straight through, at the cost of one dict lookup."""
    for impl in ("sdpa",):
        original = attention_function(impl)
        if original is None or getattr(original, _WRAPPED, False):
            continue

        def watched(module, query, key, value, attention_mask, *args, __original=original, **kwargs):
            record = _ACTIVE.get((threading.get_ident(), id(module)))
            if record is not None:
                if getattr(record, _WITH_VALUE, False):
                    record(module, query, key, value, attention_mask, kwargs)
                else:
                    record(module, query, key, attention_mask, kwargs)
            return __original(module, query, key, value, attention_mask, *args, **kwargs)

        setattr(watched, _WRAPPED, True)
        register_attention_function(impl, watched)


@contextmanager
def watch_attention_call(module: nn.Module, record: Callable, *, values: bool = False) -> Iterator[None]:
    """Within the block, each call this thread's runs of ``module`` make to ``transformers``' ``sdpa``
    attention interface is first handed to ``record(module, query, key, attention_mask, kwargs)`` (the
    very tensors the kernel receives; ``kwargs`` with ``scaling``, ``is_causal``...); with ``values``,
    ``record(module, query, key, value, attention_mask, kwargs)``. ``record`` may
    raise to stop the module there, before the kernel runs: how a caller that needs the queries and keys
    but not the output (a replay of chosen query rows) skips the work."""
    if not callable(record):
        raise TypeError(f"record must be callable, got {type(record).__name__}")
    _install()
    key = (threading.get_ident(), id(module))
    if values:

        def record(*args, __record=record):
            return __record(*args)

        setattr(record, _WITH_VALUE, True)
    _ACTIVE[key] = record
    try:
        yield
    finally:
        _ACTIVE.pop(key, None)


def _expect_call(me: int, waiting: set[int]) -> Callable:
    """A forward pre-hook: the module, run by the capturing thread, now owes a call to the interface."""

    def enter(module, args):
        if threading.get_ident() == me:
            waiting.add(id(module))

    return enter


def _check_called(me: int, waiting: set[int], model: nn.Module) -> Callable:
    """A forward hook: the module ran without calling the attention interface (its weights were never
    seen) → :func:`untraceable`, before the next layer runs and before any caller uses a partial map."""

    def leave(module, args, output):
        if threading.get_ident() == me and id(module) in waiting:
            waiting.discard(id(module))
            raise untraceable(
                model,
                f"its attention modules ({type(module).__name__}) do not call transformers' attention interface",
            )

    return leave


@contextmanager
def capture_attention(
    model: nn.Module,
    on_weights: Callable[[AttentionSite, Tensor], None],
    *,
    sites: Sequence[AttentionSite] | None = None,
    heads: Sequence[int] | None = None,
) -> Iterator[list[AttentionSite]]:
    """Within the block, every forward pass of ``model`` calls ``on_weights(site, weights)`` for each
    of ``sites`` (default: all of :func:`attention_sites`) as its layer runs, with ``weights
    (B, len(heads), Tq, Tk)`` in float32 (float64 for a float64 model; ``heads`` default: all). Nothing is stored: what the
    callback keeps is all that is kept. Yields the sites watched.

    The model's attention implementation must be ``sdpa`` (the default) or ``eager``. A capture sees the
    passes its own thread runs: threads running the same model at once each get their own weights.
    A watched module that runs without calling ``transformers``' attention interface (under ``eager``:
    returns no weights) raises :class:`UntraceableModelError` as it returns."""
    if not callable(on_weights):
        raise TypeError(f"on_weights must be callable, got {type(on_weights).__name__}")
    chosen = list(attention_sites(model) if sites is None else sites)
    impl = attention_implementation(model)
    if impl not in ("sdpa", "eager"):
        raise ValueError(
            f"capturing attention needs the model's attention implementation to be sdpa or eager, got {impl!r}; "
            "load it with attn_implementation='sdpa'"
        )
    hooks = []
    me = threading.get_ident()
    try:
        if impl == "sdpa":
            _install()
            waiting: set[int] = set()  # the watched modules running now that have not called the interface yet
            for site in chosen:

                def record(module, query, key, attention_mask, kwargs, site=site):
                    waiting.discard(id(module))
                    causal = kwargs.get("is_causal")
                    causal = getattr(module, "is_causal", True) if causal is None else causal
                    weights = attention_weights(
                        query.detach(),
                        key.detach(),
                        attention_mask,
                        scaling=kwargs.get("scaling"),
                        is_causal=bool(causal) and attention_mask is None,
                        position_bias=kwargs.get("position_bias"),
                        heads=heads,
                    )
                    on_weights(site, weights)

                _ACTIVE[(me, id(site.module))] = record
                hooks.append(site.module.register_forward_pre_hook(_expect_call(me, waiting)))
                hooks.append(site.module.register_forward_hook(_check_called(me, waiting, model)))
        else:
            for site in chosen:

                def hook(module, args, output, site=site):
                    if threading.get_ident() != me:  # another thread's pass of the same model
                        return
                    weights = output[-1] if isinstance(output, tuple) else None
                    if not isinstance(weights, Tensor):
                        raise untraceable(
                            model,
                            f"its attention modules ({type(module).__name__}) return no attention weights "
                            "under eager attention",
                        )
                    w = weights.detach().to(torch.promote_types(weights.dtype, torch.float32))
                    on_weights(site, w if heads is None else w[:, list(heads)])

                hooks.append(site.module.register_forward_hook(hook))
        yield chosen
    finally:
        for site in chosen:
            _ACTIVE.pop((me, id(site.module)), None)
        for h in hooks:
            h.remove()
