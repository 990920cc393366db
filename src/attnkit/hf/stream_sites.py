"""Where a Hugging Face decoder-only model's residual stream, MLP outputs and heads' inputs are, for the
residual-stream and MLP interventions and the path patching of :mod:`attnkit.attribution` (beside the heads'
output projections of :mod:`attnkit.hf.head_sites`).

The residual stream at layer ``l`` (``0..L``) is ``h_l``: block ``l``'s input for ``l < L`` (``h_0`` the
embeddings, with GPT-2's learned positions added, Gemma's scaling applied), and for ``l = L`` the final
norm's input (GPT-2's ``ln_f``, GPT-NeoX's ``final_layer_norm``, the others' ``norm``). An MLP's output is
what block ``l``'s MLP adds to the stream: ``mlp``'s output in the pre-norm families, the norm after it
(``post_feedforward_layernorm``) in the sandwich ones (Gemma 2 and 3, OLMo 2), as
:mod:`attnkit.hf.lm_blocks` lays the blocks out.

A head's inputs (for path patching): in a pre-norm block, attention module ``l`` reads ``x = N₁(h_l)`` and
its query, key and value projections read ``x``; :func:`hf_head_inputs` names ``N₁`` and, for each of
``"q"``, ``"k"``, ``"v"``, the module whose output holds them and which of its output columns (the fused
projections: GPT-2's ``c_attn`` ``[q | k | v]``, GPT-NeoX's ``query_key_value`` laid out per head as
``[q | k | v]``, Phi-3's ``qkv_proj`` ``[q (H·D_h) | k (H_kv·D_h) | v (H_kv·D_h)]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .lm_blocks import DECODERS, SANDWICH, block_layout, layer_stack
from .loading import HFModelError

__all__ = ["HFStream", "HeadInputs", "hf_head_inputs", "hf_stream"]


@dataclass(frozen=True)
class HFStream:
    """A decoder-only model's stream sites: ``blocks`` (block ``l``'s input is ``h_l``), ``final_norm`` (its
    input is ``h_L``), ``mlps`` (module ``l``'s output is what MLP ``l`` adds), the stream's width ``d_model``."""

    blocks: nn.ModuleList
    final_norm: nn.Module
    mlps: tuple[nn.Module, ...]
    d_model: int


def _decoder_type(model) -> str:
    model_type = model.config.model_type
    if getattr(model.config, "is_encoder_decoder", False) or model_type not in DECODERS:
        raise HFModelError(
            f"residual-stream, MLP and path patching read decoder-only language models "
            f"({', '.join(DECODERS)}), not {model_type} models"
        )
    return model_type


def hf_stream(model) -> HFStream:
    """The :class:`HFStream` of a ``transformers`` decoder-only model (:data:`~attnkit.hf.lm_blocks.DECODERS`)."""
    model_type = _decoder_type(model)
    base = model.base_model
    final = next((getattr(base, n) for n in ("ln_f", "final_layer_norm", "norm") if hasattr(base, n)), None)
    if final is None:
        raise HFModelError(f"{type(model).__name__} has no final norm attnkit knows")
    blocks = layer_stack(model)
    mlp_name = "post_feedforward_layernorm" if model_type in SANDWICH else "mlp"
    mlps = tuple(getattr(block, mlp_name) for block in blocks)
    return HFStream(blocks, final, mlps, int(model.config.hidden_size))


@dataclass(frozen=True)
class HeadInputs:
    """What attention module ``layer`` reads: ``norm`` (its input is ``N₁(h_layer)``) and, per ``"q"``,
    ``"k"``, ``"v"``, ``(module, columns)``: the projection whose output holds them and those columns of it
    (``None``: all of them)."""

    norm: nn.Module
    projections: dict[str, tuple[nn.Module, Tensor | None]]


def _columns(spans: list[tuple[int, int]]) -> Tensor:
    return torch.cat([torch.arange(a, b) for a, b in spans])


def hf_head_inputs(model, layer: int) -> HeadInputs:
    """The :class:`HeadInputs` of block ``layer`` (0-based) of a pre-norm decoder-only model: the blocks
    whose attention output is added to the stream as it is (``h_{l+1} = h_l + a(N₁(h_l)) + …``), which path
    patching's exact form needs; the sandwich families (a norm after the attention) are refused."""
    model_type = _decoder_type(model)
    if model_type in SANDWICH:
        raise HFModelError(
            f"path patching reads pre-norm blocks (the attention's output added to the stream as it is); "
            f"{model_type} normalises it first"
        )
    block = layer_stack(model)[layer]
    lay = block_layout(model_type, block)
    attn = lay.attn
    if model_type == "gpt2":
        d = int(attn.embed_dim)
        spans = {"q": [(0, d)], "k": [(d, 2 * d)], "v": [(2 * d, 3 * d)]}
        return HeadInputs(lay.pre_norm, {c: (attn.c_attn, _columns(spans[c])) for c in "qkv"})
    if model_type == "gpt_neox":  # per head h: [q | k | v], each head_size wide
        nh, dh = int(attn.config.num_attention_heads), int(attn.head_size)
        proj = attn.query_key_value
        return HeadInputs(
            lay.pre_norm,
            {
                c: (proj, _columns([(h * 3 * dh + i * dh, h * 3 * dh + (i + 1) * dh) for h in range(nh)]))
                for i, c in enumerate("qkv")
            },
        )
    if model_type == "phi3":
        nh, nkv, dh = int(attn.config.num_attention_heads), int(attn.config.num_key_value_heads), int(attn.head_dim)
        q, k = nh * dh, nkv * dh
        spans = {"q": [(0, q)], "k": [(q, q + k)], "v": [(q + k, q + 2 * k)]}
        return HeadInputs(lay.pre_norm, {c: (attn.qkv_proj, _columns(spans[c])) for c in "qkv"})
    return HeadInputs(lay.pre_norm, {"q": (attn.q_proj, None), "k": (attn.k_proj, None), "v": (attn.v_proj, None)})
