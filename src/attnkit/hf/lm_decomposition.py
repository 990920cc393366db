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
from dataclasses import dataclass, field
from functools import cached_property

import torch
from torch import Tensor, nn

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


def linearise_norm(norm: nn.Module, x: Tensor) -> tuple[Tensor, bool, Tensor | None]:
    """A norm at its real input ``x (..., D)`` as a linear map with ``x``'s statistics held fixed:
    ``(scale (..., D), center, bias)`` with ``N(t) ≈ scale ⊙ (t − mean t if center else t) + bias``,
    exact for ``t = x``. LayerNorm: ``γ / σ(x)``, centred, ``β``; RMSNorm: ``g / rms(x)`` (Gemma's
    ``1 + w``), computed in at least float32 as the modules do."""
    if isinstance(norm, nn.LayerNorm):
        sigma = (x.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
        gain = norm.weight if norm.weight is not None else torch.ones_like(x[..., :1])
        return gain / sigma, True, norm.bias
    wide = torch.promote_types(x.dtype, torch.float32)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    inv = torch.rsqrt(x.to(wide).pow(2).mean(-1, keepdim=True) + eps).to(x.dtype)
    w = norm.weight
    gain = 1.0 + w if "Gemma" in type(norm).__name__ else w  # Gemma's RMSNorm scales by (1 + w)
    return gain * inv, False, None


@dataclass
class LMLayerParts:
    """One traced block (``layer`` 0-based inside code): the attention module's output ``attention =
    Σ_h Σ_j weights[h, :, j] values[h, j] + out_bias``, the attention sub-block's result ``mid =
    mix(residual, attention)`` and the block's output ``out = mlp(mid)``. ``weights (H, N, N)``;
    ``head_values (H, N, Dh)`` (each query head's value vectors) and ``w_o (H, Dh, D)`` (its rows of
    the output projection), whose product is ``values (H, N, D)`` = ``f^h(u_j)``; ``residual``,
    ``attention``, ``mid``, ``out (N, D)``. Where a norm follows the attention, ``scale (N, D)`` and
    ``center`` are its linear part at each position's real input (:func:`linearise_norm`) and
    ``through_residual`` says whether the residual passes it too (post-norm) or not (Gemma 2/3, OLMo 2)."""

    layer: int
    weights: Tensor
    head_values: Tensor
    w_o: Tensor
    out_bias: Tensor | None
    residual: Tensor
    attention: Tensor
    mid: Tensor
    mlp: Callable[[Tensor], Tensor]
    out: Tensor
    mix: Callable[[Tensor, Tensor], Tensor] = field(repr=False, default=lambda r, a: r + a)
    scale: Tensor | None = None
    center: bool = False
    through_residual: bool = False

    @cached_property
    def values(self) -> Tensor:
        """``(H, N, D)``: ``f^h(u_j) = v^h_j W_O^h``."""
        return self.head_values @ self.w_o

    def _through_norm(self, t: Tensor, i) -> Tensor:
        """``t (..., D)`` reaching position(s) ``i`` through the linear part of the norm after the attention."""
        if self.scale is None:
            return t
        if self.center:
            t = t - t.mean(-1, keepdim=True)
        return t * self.scale[i]

    def terms(self) -> Tensor:
        """``(N, N, D)``: ``T_ij = Σ_h α^h_ij f^h(u_j)``, what key j adds to the attention's output at i
        (heads summed, before any norm: Kobayashi et al. 2020's vectors)."""
        return torch.einsum("hij,hjd->ijd", self.weights, self.values)

    def mixing_terms(self) -> Tensor:
        """``(N, N, D)``: the terms of ``mid`` (less the bias and β, which belong to no token): each
        ``T_ij`` through the norm's linear part at i, and the residual ``r_i`` added to the diagonal term
        (through the norm too in a post-norm block). ALTI's terms."""
        t = self.terms()
        idx = torch.arange(t.shape[0], device=t.device)
        if self.through_residual:
            t[idx, idx] += self.residual
        if self.scale is not None:
            t = self._rows(t)
        if not self.through_residual:
            t[idx, idx] += self.residual
        return t

    def _rows(self, t: Tensor) -> Tensor:
        """``t (N, N, D)`` with row i through the norm's linear part at position i."""
        if self.center:
            t = t - t.mean(-1, keepdim=True)
        return t * self.scale[:, None, :]  # (N, N, D): row i scaled by position i's statistics

    def head_terms(self, i: int) -> Tensor:
        """``(H, D)``: what each head adds at position ``i`` (its keys summed), through the norm's linear part."""
        ctx = torch.einsum("hj,hjk->hk", self.weights[:, i], self.head_values)  # (H, Dh)
        return self._through_norm(torch.einsum("hk,hkd->hd", ctx, self.w_o), i)

    def source_terms(self, i: int) -> Tensor:
        """``(N, D)``: what each source token j adds at position ``i`` (heads summed), through the norm's linear part."""
        h, n, dh = self.head_values.shape
        weighted = self.weights[:, i, :, None] * self.head_values  # (H, N, Dh)
        summed = weighted.transpose(0, 1).reshape(n, h * dh) @ self.w_o.reshape(h * dh, -1)  # (N, D)
        return self._through_norm(summed, i)

    def bias_at(self, i: int) -> Tensor:
        """``(D,)``: the attention's output bias as it reaches position ``i`` (zeros where there is none)."""
        if self.out_bias is None:
            return self.residual.new_zeros(self.residual.shape[-1])
        return self._through_norm(self.out_bias, i)

    def attention_output(self) -> Tensor:
        """``(N, D)``: ``Σ_j T_ij + b_O``, the attention module's output."""
        return self.attention

    def mid_without(self, j: int) -> Tensor:
        """``(N, D)``: ``mid`` with token ``j``'s values zeroed in every head (any norm recomputed)."""
        g = torch.einsum("hk,hkd->hd", self.head_values[:, j], self.w_o)  # (H, D): f^h(u_j)
        return self.mix(self.residual, self.attention - self.weights[:, :, j].T @ g)


@dataclass
class LMTrace:
    """What the pass gives besides the layers: the first layer's input ``embedding (N, D)`` (token and
    position embeddings), the last layer's output ``final (N, D)`` (the final norm's input) and the
    model's ``logits (N, V)`` (None for a model without a language-model head)."""

    embedding: Tensor
    final: Tensor
    logits: Tensor | None
    model_type: str


@dataclass
class NormLinear:
    """The final norm linearised at one real residual ``x`` (as direct logit attribution does in the
    field): ``N(t) ≈ scale ⊙ (t − mean t if center else t) + bias`` with the normaliser (σ or RMS) of
    ``x`` held fixed; exact for ``t = x``, and linear, so the terms of ``x`` add up to ``N(x)``."""

    scale: Tensor
    center: bool
    bias: Tensor | None

    def __call__(self, t: Tensor) -> Tensor:
        """``(..., D) -> (..., D)``: the linear part (no bias)."""
        return self.scale * (t - t.mean(-1, keepdim=True) if self.center else t)


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
    """Refuse in one line (:class:`HFModelError`) where a replayed block's output is not the model's
    own (beyond a tolerance of 1,000 ulps of its largest value)."""
    scale = max(1.0, float(real.abs().max()))
    tol = 1e3 * torch.finfo(real.dtype).eps * scale
    err = float((replayed - real).abs().max())
    if not err <= tol:
        raise HFModelError(
            f"replaying {what} of this {model_type} model as a residual attention block does not give its output "
            f"(max difference {err:.2g} > {tol:.2g}): the decompositions are not defined for its layers"
        )


def _block_parts(model_type: str, layer: nn.Module, i: int, x: Tensor, weights: Tensor) -> LMLayerParts:
    lay = block_layout(model_type, layer)
    u = x if lay.pre_norm is None else lay.pre_norm(x)
    v, w_o, bias = lay.values(u)  # (H, N, Dh), (H, Dh, D)
    weights = weights.to(v.dtype)
    ctx = weights @ v  # (H, N, Dh)
    attention = torch.einsum("hnk,hkd->nd", ctx, w_o)  # (N, D)
    if bias is not None:
        attention = attention + bias
    mid = lay.mix(x, attention)
    scale, center = None, False
    if lay.post_norm is not None:  # linear given the statistics of its real input
        scale, center, _ = linearise_norm(lay.post_norm, attention if lay.kind == "sandwich" else x + attention)

    def mlp(m: Tensor, rest=lay.rest, x=x) -> Tensor:
        return rest(m, x)

    return LMLayerParts(
        i, weights, v, w_o, bias, x, attention, mid, mlp, mlp(mid), lay.mix, scale, center, lay.kind == "post"
    )


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

    handles = [layer.register_forward_hook(watch(i), with_kwargs=True) for i, layer in enumerate(layers)]
    sites = [s for s in attention_sites(model) if s.kind == "self"]
    try:
        with capture_attention(model, keep, sites=sites):
            out = _run(model, model_type, input_ids)
    finally:
        for h in handles:
            h.remove()
    logits = getattr(out, "logits", None)
    return LMTrace(seen["embedding"], seen["final"], None if logits is None else logits[0], model_type)


@dataclass
class LMRecording:
    """One plain pass of a model, kept for :func:`replay_layer`: each layer's input ``inputs[l] (N, D)``
    (``inputs[0]`` the embeddings) and output ``outputs[l]``, the arguments its attention module was
    called with (by reference: the rotary tables and the mask are shared by the layers), and the
    pass's :class:`LMTrace`; ``position_logits (V,)``: the logits at the position asked for
    (``record_lm(..., logits_at=)``; the trace then has no logits), else None."""

    model: nn.Module
    model_type: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    calls: list[tuple[tuple, dict]]
    trace: LMTrace
    position_logits: Tensor | None = None

    @property
    def n_layers(self) -> int:
        """How many layers the model has."""
        return len(self.inputs)


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

    handles = []
    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_hook(watch(i), with_kwargs=True))
        attn = block_layout(model_type, layer).attn
        handles.append(attn.register_forward_pre_hook(watch_attention(i), with_kwargs=True))
    extra = {} if logits_at is None else {"logits_to_keep": torch.tensor([logits_at], device=input_ids.device)}
    try:
        out = _run(model, model_type, input_ids, **extra)
    finally:
        for h in handles:
            h.remove()
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
