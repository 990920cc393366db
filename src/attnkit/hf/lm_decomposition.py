"""A Hugging Face decoder-only or encoder-only model's blocks, traced layer by layer for context mixing,
the logit lens and direct logit attribution.

Every block's attention sub-block is read as a sum over its keys (Kobayashi et al. 2020, "Attention is
not only a weight")::

    a_i = Σ_h Σ_j α^h_ij f^h(u_j) + b_O,        f^h(u) = (W_V^h u + b_V^h) W_O^h

with ``u`` the normalised input the values are read from (the block's input itself where no norm
comes first) and ``α`` the attention weights the model really used, captured from its forward pass by
:mod:`attnkit.hf.capture` rather than recomputed: rotary positions, grouped-query heads, sliding
windows, query/key norms (Qwen 3, Gemma 3, OLMo 2) and soft-capping act inside the scores only, so
the captured α carries them. The attention sub-block's result ``m`` is ``r + a`` (pre-norm), ``r +
P(a)`` (Gemma 2/3, OLMo 2) or ``LN(r + a)`` (post-norm encoders: BERT, DistilBERT, RoBERTa, XLM-R);
the rest of the block (its MLP, residual add and any norm) acts on each position alone
(:mod:`attnkit.hf.lm_blocks` has each family's layout). A norm after the attention is linear given its
input's statistics, ``P(t) = g ⊙ t / rms(a_i)`` or ``LN(t) = γ ⊙ (t − mean t) / σ(r_i + a_i) + β``,
so each term is carried through it with those statistics held at their real values (Ferrando et al.
2022, "Measuring the mixing of contextual information in the Transformer": ALTI was made for BERT's
post-norm blocks); the terms then add up to the norm's real output (less β).

:func:`trace_lm` runs the model once with forward hooks on its layers; as each layer returns, its
parts are replayed from its real input with the module's own weights, checked against the layer's
real output (tolerance scaled to the dtype), handed to a callback and dropped: a long prompt never
holds more than one layer's ``(H, N, N)`` weights. :func:`record_lm` and :func:`replay_layer` split
the same work in two (one plain pass that keeps each layer's input, then any layer replayed on demand,
in any order): what a top-down walk over the layers needs (:mod:`attnkit.attribution.information_flow`).
A family whose blocks attnkit does not trace is refused in one line (:class:`HFModelError`) before
anything runs, and a replay that does not reproduce the layer's output is refused in one line as
well, never decomposed by guess.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..attention.block_trace import (
    LMLayerParts,
    LMRecording,
    LMTrace,
    NormLinear,
    block_parts,
    linearise_norm,
)
from ..attention.block_trace import check_replay as _check_replay
from ..hooks import thread_hooks
from .capture import attention_sites, capture_attention
from .lm_blocks import DECODERS, ENCODER_ONLY, LLAMA_LIKE, block_layout, layer_stack
from .loading import HFModelError

__all__ = [
    "ENCODER_ONLY",
    "LLAMA_LIKE",
    "LMLayerParts",
    "LMRecording",
    "LMTrace",
    "NormLinear",
    "check_replay",
    "final_norm",
    "final_norm_linear",
    "linearise_norm",
    "lm_logits",
    "lm_refusal",
    "record_lm",
    "replay_layer",
    "require_decoder",
    "trace_lm",
]

TRACED = (*DECODERS, *ENCODER_ONLY)


def lm_refusal(model_type: str) -> str | None:
    """Why :func:`trace_lm` does not trace ``model_type`` (one clause), or None where it does."""
    if model_type in TRACED:
        return None
    return f"attnkit traces the blocks of {', '.join(TRACED)} models only"


def _model_type(model: nn.Module) -> str:
    return getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__


def require_decoder(model: nn.Module, what: str) -> None:
    """Refuse ``what`` (a method's name) in one line for an encoder-only model: it reads a next-token
    prediction, which an encoder-only model does not make."""
    model_type = _model_type(model)
    if model_type in ENCODER_ONLY:
        raise HFModelError(
            f"{model_type} is an encoder-only model, which predicts no next token: {what} is for decoder-only "
            "models (attention-norm, value zeroing and ALTI read its token representations)"
        )


def final_norm(model: nn.Module) -> nn.Module:
    """The model's final norm module (``norm``; GPT-NeoX's ``final_layer_norm``; GPT-2's ``ln_f``)."""
    base = model.base_model
    norm = getattr(base, "norm", None)
    if norm is None:
        norm = getattr(base, "final_layer_norm", None)  # GPT-NeoX's
    return norm if norm is not None else base.ln_f


def final_norm_linear(model: nn.Module, x: Tensor) -> NormLinear:
    """The model's final norm linearised at ``x (D,)`` (see :class:`NormLinear`, :func:`linearise_norm`)."""
    scale, center, bias = linearise_norm(final_norm(model), x)
    return NormLinear(scale, center, bias)


def lm_logits(model: nn.Module, x: Tensor) -> Tensor:
    """``(..., V)``: residuals ``x (..., D)`` read as the model reads its last one: final norm,
    unembedding, and the soft cap of the final logits where the model has one (Gemma 2:
    ``c · tanh(z / c)``)."""
    z = model.get_output_embeddings()(final_norm(model)(x))
    cap = getattr(model.config, "final_logit_softcapping", None)
    return z if not cap else torch.tanh(z / cap) * cap


def check_replay(replayed: Tensor, real: Tensor, what: str, model_type: str) -> None:
    """:func:`attnkit.attention.block_trace.check_replay` with this family's one-line error (:class:`HFModelError`)."""
    _check_replay(replayed, real, what, model_type, HFModelError)


def _block_parts(model_type: str, layer: nn.Module, i: int, x: Tensor, weights: Tensor) -> LMLayerParts:
    return block_parts(block_layout(model_type, layer), i, x, weights)


def _check_call(model: nn.Module, input_ids: Tensor, fn: object, name: str) -> str:
    model_type = _model_type(model)
    reason = lm_refusal(model_type)
    if reason is not None:
        raise HFModelError(f"the decompositions are not defined for {model_type} models: {reason}")
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 1 or input_ids.numel() == 0:
        raise ValueError(
            f"input_ids must be a non-empty (N,) tensor of token ids, got {getattr(input_ids, 'shape', input_ids)}"
        )
    if fn is not None and not callable(fn):
        raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
    return model_type


def _run(model: nn.Module, model_type: str, input_ids: Tensor, **extra):
    kwargs = {} if model_type in ENCODER_ONLY else {"use_cache": False}
    return model(input_ids=input_ids[None], **kwargs, **extra)


@torch.no_grad()
def trace_lm(model: nn.Module, input_ids: Tensor, on_layer: Callable[[LMLayerParts], None]) -> LMTrace:
    """Run ``model`` (a ``transformers`` decoder-only or encoder-only model, eval mode, sdpa or eager
    attention) once on ``input_ids (N,)`` and call ``on_layer(parts)`` for each layer in order as it
    runs (see the module docstring); what the callback keeps is all that is kept. Returns the pass's
    :class:`LMTrace`."""
    model_type = _check_call(model, input_ids, on_layer, "on_layer")
    layers = layer_stack(model)
    alpha: dict[int, Tensor] = {}
    seen: dict[str, Tensor] = {}

    def keep(site, w):
        alpha[site.layer] = w[0]  # (H, N, N): one sequence

    def watch(i):
        def hook(module, args, kwargs, output):
            x = (args[0] if args else kwargs["hidden_states"])[0]  # (N, D)
            y = (output[0] if isinstance(output, tuple) else output)[0]  # (N, D)
            if i == 0:
                seen["embedding"] = x
            parts = _block_parts(model_type, module, i, x, alpha.pop(i))
            check_replay(parts.out, y, f"layer {i + 1}", model_type)
            on_layer(parts)
            seen["final"] = y

        return hook

    sites = [s for s in attention_sites(model) if s.kind == "self"]
    watched = ((layer, watch(i)) for i, layer in enumerate(layers))
    with thread_hooks(watched, with_kwargs=True), capture_attention(model, keep, sites=sites):
        out = _run(model, model_type, input_ids)
    logits = getattr(out, "logits", None)
    return LMTrace(seen["embedding"], seen["final"], None if logits is None else logits[0], model_type)


@torch.no_grad()
def record_lm(model: nn.Module, input_ids: Tensor, *, logits_at: int | None = None) -> LMRecording:
    """Run ``model`` once on ``input_ids (N,)`` as it runs without attnkit (no attention captured),
    keeping each layer's input and output and its attention module's arguments: ``L`` residual streams
    of ``(N, D)``, what a top-down walk needs to replay any layer later (:func:`replay_layer`).
    ``logits_at`` (a position, 0-based): the model computes the logits of that position only (its own
    ``logits_to_keep``; every position's would be ``N × V`` floats, the largest tensor of a long prompt
    with a large vocabulary), kept as ``position_logits``."""
    model_type = _check_call(model, input_ids, None, "")
    n_tokens = int(input_ids.shape[0])
    if logits_at is not None and (
        isinstance(logits_at, bool) or not isinstance(logits_at, int) or not 0 <= logits_at < n_tokens
    ):
        raise ValueError(f"logits_at must be a position in 0..{n_tokens - 1}, got {logits_at!r}")
    layers = layer_stack(model)
    inputs: dict[int, Tensor] = {}
    outputs: dict[int, Tensor] = {}
    calls: dict[int, tuple[tuple, dict]] = {}

    def watch(i):
        def hook(module, args, kwargs, output):
            inputs[i] = (args[0] if args else kwargs["hidden_states"])[0]
            outputs[i] = (output[0] if isinstance(output, tuple) else output)[0]

        return hook

    def watch_attention(i):
        def pre(module, args, kwargs):
            rest = dict(kwargs)
            rest.pop("hidden_states", None)
            calls[i] = (tuple(args[1:]), rest)

        return pre

    blocks = [(layer, watch(i)) for i, layer in enumerate(layers)]
    attns = [(block_layout(model_type, layer).attn, watch_attention(i)) for i, layer in enumerate(layers)]
    extra = {} if logits_at is None else {"logits_to_keep": torch.tensor([logits_at], device=input_ids.device)}
    with thread_hooks(blocks, with_kwargs=True), thread_hooks(attns, pre=True, with_kwargs=True):
        out = _run(model, model_type, input_ids, **extra)
    n = len(layers)
    logits = getattr(out, "logits", None)
    logits = None if logits is None else logits[0]  # (N, V), or (1, V) at logits_at
    trace = LMTrace(inputs[0], outputs[n - 1], logits if logits_at is None else None, model_type)
    return LMRecording(
        model,
        model_type,
        [inputs[i] for i in range(n)],
        [outputs[i] for i in range(n)],
        [calls[i] for i in range(n)],
        trace,
        None if logits is None or logits_at is None else logits[0],
    )


@torch.no_grad()
def replay_layer(rec: LMRecording, i: int) -> LMLayerParts:
    """Layer ``i`` (0-based) of a recorded pass, replayed as :func:`trace_lm` replays it: its attention
    module rerun on the recorded input with the recorded arguments (its weights captured, one layer's
    ``(H, N, N)``), the block rebuilt from its parts and checked against the recorded output."""
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < rec.n_layers:
        raise ValueError(f"i must be a layer index in 0..{rec.n_layers - 1}, got {i!r}")
    layer = layer_stack(rec.model)[i]
    lay = block_layout(rec.model_type, layer)
    x = rec.inputs[i]
    u = x if lay.pre_norm is None else lay.pre_norm(x)
    got: dict[str, Tensor] = {}
    site = next(s for s in attention_sites(rec.model) if s.module is lay.attn)
    args, kwargs = rec.calls[i]
    with capture_attention(rec.model, lambda s, w: got.__setitem__("w", w[0]), sites=[site]):
        lay.attn(u[None], *args, **kwargs)
    parts = _block_parts(rec.model_type, layer, i, x, got["w"])
    check_replay(parts.out, rec.outputs[i], f"layer {i + 1}", rec.model_type)
    return parts
