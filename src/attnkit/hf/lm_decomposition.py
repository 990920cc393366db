"""A Hugging Face decoder-only model's blocks, traced layer by layer for context mixing, the logit
lens and direct logit attribution.

Every pre-norm block of GPT-2, GPT-NeoX/Pythia and the Llama family is read as a sum over its keys
(Kobayashi et al. 2020, "Attention is not only a weight")::

    mid_i = r_i + Σ_h Σ_j α^h_ij f^h(u_j) + b_O,        f^h(u) = (W_V^h u + b_V^h) W_O^h
    out_i = mid_i + MLP(N₂(mid_i))        (parallel blocks, GPT-NeoX: out_i = mid_i + MLP(N₂(r_i)))

with ``r`` the layer's input (the residual stream), ``u = N₁(r)`` the normalised input the values
are read from, ``N₁``/``N₂`` the block's own norms (LayerNorm for GPT-2, RMSNorm for Llama, Qwen 2/3,
Mistral; Gemma's ``(1 + w)`` RMSNorm) and ``α`` the attention weights the model really used,
captured from its forward pass by :mod:`attnkit.hf.capture` rather than recomputed: rotary
positions, grouped-query heads (a key/value head's values shared by its query heads), sliding
windows, Qwen 3's query/key norms and soft-capping act inside the scores only, so the captured α
carries them.

:func:`trace_lm` runs the model once with forward hooks on its layers; as each layer returns, its
parts are replayed from its real input with the module's own weights, checked against the layer's
real output (tolerance scaled to the dtype), handed to a callback and dropped: a long prompt never
holds more than one layer's ``(H, N, N)`` weights. A family whose blocks attnkit does not trace
(post-norm encoders, Phi-3's fused projection, Gemma 2/3's and OLMo 2's extra norms) is refused
in one line (:class:`HFModelError`) before anything runs, and a replay that does not reproduce the
layer's output is refused in one line as well, never decomposed by guess.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .capture import attention_sites, capture_attention
from .loading import HFModelError

__all__ = [
    "LLAMA_LIKE",
    "LMLayerParts",
    "LMTrace",
    "NormLinear",
    "final_norm",
    "final_norm_linear",
    "lm_refusal",
    "trace_lm",
]

LLAMA_LIKE = ("llama", "qwen2", "qwen3", "mistral", "gemma")
TRACED = ("gpt2", "gpt_neox", *LLAMA_LIKE)
_NOT_YET = {
    "phi3": "its fused query/key/value projection is not yet traced",
    "gemma2": "its extra norms after the attention and the MLP are not yet traced",
    "gemma3_text": "its extra norms after the attention and the MLP are not yet traced",
    "olmo2": "its norms after each sub-block (OLMo 2's placement) are not yet traced",
}


def lm_refusal(model_type: str) -> str | None:
    """Why :func:`trace_lm` does not trace ``model_type`` (one clause), or None where it does."""
    if model_type in TRACED:
        return None
    return _NOT_YET.get(model_type, f"attnkit traces the decoder blocks of {', '.join(TRACED)} models only")


@dataclass
class LMLayerParts:
    """One traced block (``layer`` 0-based inside code): ``mid = residual + Σ_h Σ_j weights[h, :, j]
    values[h, j] + out_bias`` and ``out = mlp(mid)`` (the rest of the block, the MLP and its residual
    add); ``weights (H, N, N)``, ``values (H, N, D)`` = ``f^h(u_j)``, ``residual``, ``mid``, ``out (N, D)``."""

    layer: int
    weights: Tensor
    values: Tensor
    out_bias: Tensor | None
    residual: Tensor
    mid: Tensor
    mlp: Callable[[Tensor], Tensor]
    out: Tensor

    def terms(self) -> Tensor:
        """``(N, N, D)``: ``T_ij = Σ_h α^h_ij f^h(u_j)``, what key j adds to position i (heads summed)."""
        return torch.einsum("hij,hjd->ijd", self.weights, self.values)

    def head_terms(self, i: int) -> Tensor:
        """``(H, D)``: what each head adds to position ``i`` (its keys summed)."""
        return torch.einsum("hj,hjd->hd", self.weights[:, i], self.values)

    def attention_output(self) -> Tensor:
        """``(N, D)``: ``Σ_j T_ij + b_O`` = ``mid − residual``."""
        return self.mid - self.residual


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


def _layers(model: nn.Module) -> nn.ModuleList:
    base = model.base_model
    layers = getattr(base, "layers", None)
    return layers if layers is not None else base.h  # GPT-2's blocks are ``h``


def final_norm(model: nn.Module) -> nn.Module:
    """The model's final norm module (``norm``; GPT-NeoX's ``final_layer_norm``; GPT-2's ``ln_f``)."""
    base = model.base_model
    norm = getattr(base, "norm", None)
    if norm is None:
        norm = getattr(base, "final_layer_norm", None)  # GPT-NeoX's
    return norm if norm is not None else base.ln_f


def _rms_gain(norm: nn.Module) -> Tensor:
    w = norm.weight
    return 1.0 + w if "Gemma" in type(norm).__name__ else w  # Gemma's RMSNorm scales by (1 + w)


def final_norm_linear(model: nn.Module, x: Tensor) -> NormLinear:
    """The model's final norm linearised at ``x (D,)`` (see :class:`NormLinear`): LayerNorm
    ``γ ⊙ (t − mean t) / σ(x) + β``, RMSNorm ``g ⊙ t / rms(x)`` (computed in at least float32, as the
    modules do)."""
    norm = final_norm(model)
    if isinstance(norm, nn.LayerNorm):
        sigma = (x.var(unbiased=False) + norm.eps).sqrt()
        return NormLinear(norm.weight / sigma, True, norm.bias)
    wide = torch.promote_types(x.dtype, torch.float32)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    inv = torch.rsqrt(x.to(wide).pow(2).mean() + eps).to(x.dtype)
    return NormLinear(_rms_gain(norm) * inv, False, None)


def _values(model_type: str, attn: nn.Module, u: Tensor) -> tuple[Tensor, Tensor | None]:
    """``(f (H, N, D), b_O)`` of one attention module on its normalised input ``u (N, D)``."""
    n = u.shape[0]
    if model_type == "gpt2":
        nh, dh, d = int(attn.num_heads), int(attn.head_dim), int(attn.embed_dim)
        v = attn.c_attn(u)[:, 2 * d :].view(n, nh, dh).transpose(0, 1)  # (H, N, Dh)
        w_o = attn.c_proj.weight.view(nh, dh, -1)  # Conv1D: out = ctx W + b, W (H·Dh, D)
        return v @ w_o, attn.c_proj.bias  # (H, N, D)
    if model_type == "gpt_neox":  # one fused projection, laid out per head as [q | k | v]
        nh, dh = int(attn.config.num_attention_heads), int(attn.head_size)
        v = attn.query_key_value(u).view(n, nh, 3 * dh)[..., 2 * dh :].transpose(0, 1)  # (H, N, Dh)
        w_o = attn.dense.weight  # (D, H·Dh)
        return v @ w_o.view(w_o.shape[0], nh, dh).permute(1, 2, 0), attn.dense.bias  # (H, N, D)
    cfg = attn.config
    nh, dh = int(cfg.num_attention_heads), int(attn.head_dim)
    v = attn.v_proj(u).view(n, -1, dh).transpose(0, 1)  # (Hkv, N, Dh)
    v = v.repeat_interleave(nh // v.shape[0], dim=0)  # (H, N, Dh): a key/value head serves its group
    w_o = attn.o_proj.weight  # (D, H·Dh)
    return v @ w_o.view(w_o.shape[0], nh, dh).permute(1, 2, 0), attn.o_proj.bias  # (H, N, D)


def _block_parts(model_type: str, layer: nn.Module, i: int, x: Tensor, weights: Tensor) -> LMLayerParts:
    parallel = model_type == "gpt_neox" and bool(layer.use_parallel_residual)
    if model_type == "gpt2":
        attn, n1, n2, mlp = layer.attn, layer.ln_1, layer.ln_2, layer.mlp
    elif model_type == "gpt_neox":
        attn, n1, n2, mlp = layer.attention, layer.input_layernorm, layer.post_attention_layernorm, layer.mlp
    else:
        attn, n1, n2, mlp = layer.self_attn, layer.input_layernorm, layer.post_attention_layernorm, layer.mlp
    values, bias = _values(model_type, attn, n1(x))
    mid = x + torch.einsum("hij,hjd->id", weights.to(values.dtype), values)  # (N, D)
    if bias is not None:
        mid = mid + bias

    if parallel:  # GPT-NeoX/Pythia: the MLP reads the layer's input, not the attention's output
        mlp_out = mlp(n2(x))

        def rest(m: Tensor) -> Tensor:
            return m + mlp_out
    else:

        def rest(m: Tensor) -> Tensor:
            return m + mlp(n2(m))

    return LMLayerParts(i, weights.to(values.dtype), values, bias, x, mid, rest, rest(mid))


def _check(replayed: Tensor, real: Tensor, what: str, model_type: str) -> None:
    scale = max(1.0, float(real.abs().max()))
    tol = 1e3 * torch.finfo(real.dtype).eps * scale
    err = float((replayed - real).abs().max())
    if not err <= tol:
        raise HFModelError(
            f"replaying {what} of this {model_type} model as a residual attention block does not give its output "
            f"(max difference {err:.2g} > {tol:.2g}): the decompositions are not defined for its layers"
        )


@torch.no_grad()
def trace_lm(model: nn.Module, input_ids: Tensor, on_layer: Callable[[LMLayerParts], None]) -> LMTrace:
    """Run ``model`` (a ``transformers`` decoder-only model, eval mode, sdpa or eager attention) once on
    ``input_ids (N,)`` and call ``on_layer(parts)`` for each layer in order as it runs (see the module
    docstring); what the callback keeps is all that is kept. Returns the pass's :class:`LMTrace`."""
    model_type = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
    reason = lm_refusal(model_type)
    if reason is not None:
        raise HFModelError(f"the decompositions are not defined for {model_type} models: {reason}")
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 1 or input_ids.numel() == 0:
        raise ValueError(
            f"input_ids must be a non-empty (N,) tensor of token ids, got {getattr(input_ids, 'shape', input_ids)}"
        )
    if not callable(on_layer):
        raise TypeError(f"on_layer must be callable, got {type(on_layer).__name__}")
    layers = _layers(model)
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
            _check(parts.out, y, f"layer {i + 1}", model_type)
            on_layer(parts)
            seen["final"] = y

        return hook

    handles = [layer.register_forward_hook(watch(i), with_kwargs=True) for i, layer in enumerate(layers)]
    sites = [s for s in attention_sites(model) if s.kind == "self"]
    try:
        with capture_attention(model, keep, sites=sites):
            out = model(input_ids=input_ids[None], use_cache=False)
    finally:
        for h in handles:
            h.remove()
    logits = getattr(out, "logits", None)
    return LMTrace(seen["embedding"], seen["final"], None if logits is None else logits[0], model_type)
