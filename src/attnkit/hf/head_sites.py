"""Where each head of a Hugging Face model writes: per attention module, the output projection whose input is
the heads' outputs side by side (``Concat(head_1..head_H)``, Vaswani et al. 2017), with the number of heads
and their width, for the head interventions of :mod:`attnkit.attribution.interventions` (a forward pre-hook
on that projection replaces or scales one head's slice of its input).

The projection per family: GPT-2's ``attn.c_proj`` (a ``Conv1D``; its input is laid out the same way),
GPT-NeoX's ``attention.dense``, BERT/RoBERTa's ``attention.output.dense``, DistilBERT's ``attention.out_lin``,
the Llama-like, Gemma and OLMo-2 families' ``self_attn.o_proj``; an encoder-decoder's ``out_proj`` (Marian,
Bart, M2M-100: ``encoder`` self-attention, decoder ``self`` and ``cross``) or ``o`` (T5). A grouped-query
model's projection reads every query head (``num_attention_heads × head_dim``)."""

from __future__ import annotations

from torch import nn

from .lm_blocks import DECODERS, ENCODER_ONLY, block_layout, layer_stack
from .loading import HFModelError

__all__ = ["hf_head_sites", "is_hf_model"]


def is_hf_model(model) -> bool:
    """Whether ``model`` is a ``transformers`` model (duck-typed: a config with a ``model_type``, a base model)."""
    return (
        isinstance(model, nn.Module)
        and hasattr(getattr(model, "config", None), "model_type")
        and hasattr(model, "base_model")
    )


def _decoder_only_site(model_type: str, layer: nn.Module) -> tuple[nn.Module, int, int]:
    attn = block_layout(model_type, layer).attn
    if model_type == "gpt2":
        return attn.c_proj, int(attn.num_heads), int(attn.head_dim)
    if model_type == "gpt_neox":
        return attn.dense, int(attn.config.num_attention_heads), int(attn.head_size)
    if model_type == "distilbert":
        return attn.out_lin, int(attn.n_heads), int(attn.attention_head_size)
    if model_type in ENCODER_ONLY:  # BERT-like: the self-attention's context goes through attention.output.dense
        return layer.attention.output.dense, int(attn.num_attention_heads), int(attn.attention_head_size)
    return attn.o_proj, int(attn.config.num_attention_heads), int(attn.head_dim)


def _seq2seq_sites(model) -> dict[tuple[str, int], tuple[nn.Module, int, int]]:
    encoder, decoder = model.get_encoder(), model.get_decoder()
    sites: dict[tuple[str, int], tuple[nn.Module, int, int]] = {}
    if model.config.model_type == "t5":
        for i, block in enumerate(encoder.block):
            a = block.layer[0].SelfAttention
            sites["encoder", i] = (a.o, int(a.n_heads), int(a.key_value_proj_dim))
        for i, block in enumerate(decoder.block):
            for site, a in (("self", block.layer[0].SelfAttention), ("cross", block.layer[1].EncDecAttention)):
                sites[site, i] = (a.o, int(a.n_heads), int(a.key_value_proj_dim))
        return sites
    for i, layer in enumerate(encoder.layers):
        sites["encoder", i] = (layer.self_attn.out_proj, int(layer.self_attn.num_heads), int(layer.self_attn.head_dim))
    for i, layer in enumerate(decoder.layers):
        for site, a in (("self", layer.self_attn), ("cross", layer.encoder_attn)):
            sites[site, i] = (a.out_proj, int(a.num_heads), int(a.head_dim))
    return sites


def hf_head_sites(model) -> dict[tuple[str, int], tuple[nn.Module, int, int]]:
    """``{(site, layer): (output projection, heads, head width)}`` of a ``transformers`` model (layers from 0):
    an encoder-only or decoder-only model's ``"self"`` layers; an encoder-decoder's ``"encoder"``, ``"self"``
    and ``"cross"`` layers. A family whose blocks attnkit does not know is an :class:`HFModelError`."""
    model_type = model.config.model_type
    if getattr(model.config, "is_encoder_decoder", False):
        try:
            return _seq2seq_sites(model)
        except AttributeError as e:
            raise HFModelError(f"head interventions do not know the layers of {model_type} models ({e})") from None
    if model_type not in (*DECODERS, *ENCODER_ONLY):
        raise HFModelError(
            f"head interventions do not know the blocks of {model_type} models "
            f"(they know {', '.join(sorted({*DECODERS, *ENCODER_ONLY}))} and the Bart-like and T5 encoder-decoders)"
        )
    return {("self", i): _decoder_only_site(model_type, layer) for i, layer in enumerate(layer_stack(model))}
