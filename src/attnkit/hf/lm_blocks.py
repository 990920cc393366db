"""Where each encoder-only and decoder-only family of ``transformers`` keeps the parts of its blocks, so
that :mod:`attnkit.hf.lm_decomposition` can replay a block from its real input with the module's own
weights. Three layouts, by where the norms sit (``r`` the block's input, ``a`` the attention module's
output, ``m`` the attention sub-block's result)::

    pre-norm   (GPT-2, GPT-NeoX/Pythia, Llama, Qwen 2/3, Mistral, Gemma, Phi-3):
               m = r + a(N₁(r)),          out = m + MLP(N₂(m))   (GPT-NeoX parallel: out = m + MLP(N₂(r)))
    sandwich   (Gemma 2, Gemma 3: N₁ before and P after each sub-block; OLMo 2: P after only):
               m = r + P(a(N₁(r))),       out = m + P'(MLP(N₂(m)))
    post-norm  (BERT, DistilBERT, RoBERTa, XLM-R; Vaswani et al. 2017's original placement):
               m = LN(r + a(r)),          out = LN'(m + FFN(m))

Every attention module reads as ``a_i = Σ_h Σ_j α^h_ij v^h_j W_O^h + b_O`` with ``v^h_j`` head h's value
of token j (a key/value head's values shared by its query heads under grouped-query attention) and
``W_O^h`` head h's rows of the output projection; Phi-3 and GPT-NeoX fuse the query, key and value
projections into one, GPT-2's ``Conv1D`` stores its weights transposed. A norm after the attention (P
or LN) is linear once its input's statistics (RMS, or mean and σ) are held at their real values,
which is how the decompositions pass through it (Ferrando et al. 2022, as attnkit's encoder-decoder
ALTI+ does, :mod:`attnkit.hf.decomposition`).
"""

from __future__ import annotations

from torch import Tensor, nn

from ..attention.block_trace import BlockLayout, expand_kv, per_head_output

__all__ = ["DECODERS", "ENCODER_ONLY", "LLAMA_LIKE", "SANDWICH", "BlockLayout", "block_layout", "layer_stack"]

LLAMA_LIKE = ("llama", "qwen2", "qwen3", "mistral", "gemma", "phi3")
SANDWICH = ("gemma2", "gemma3_text", "olmo2")
DECODERS = ("gpt2", "gpt_neox", *LLAMA_LIKE, *SANDWICH)
ENCODER_ONLY = ("bert", "distilbert", "roberta", "xlm-roberta")
_BERT_LIKE = ("bert", "roberta", "xlm-roberta")


def layer_stack(model: nn.Module) -> nn.ModuleList:
    """The model's blocks in order (``layers``; GPT-2's ``h``; BERT's ``encoder.layer``; DistilBERT's
    ``transformer.layer``)."""
    base = model.base_model
    for path in ("layers", "h", "encoder.layer", "transformer.layer"):
        mod = base
        for name in path.split("."):
            mod = getattr(mod, name, None)
            if mod is None:
                break
        if isinstance(mod, nn.ModuleList):
            return mod
    raise AttributeError(f"{type(model).__name__} has no stack of layers attnkit knows")


def _values_fn(model_type: str, layer: nn.Module, attn: nn.Module):
    if model_type == "gpt2":
        nh, dh, d = int(attn.num_heads), int(attn.head_dim), int(attn.embed_dim)

        def values(u: Tensor):
            v = attn.c_attn(u)[:, 2 * d :].view(u.shape[0], nh, dh).transpose(0, 1)  # (H, N, Dh)
            return v, attn.c_proj.weight.view(nh, dh, -1), attn.c_proj.bias  # Conv1D: W (H·Dh, D)

        return values
    if model_type == "gpt_neox":  # one fused projection, laid out per head as [q | k | v]
        nh, dh = int(attn.config.num_attention_heads), int(attn.head_size)

        def values(u: Tensor):
            v = attn.query_key_value(u).view(u.shape[0], nh, 3 * dh)[..., 2 * dh :].transpose(0, 1)  # (H, N, Dh)
            return v, per_head_output(attn.dense.weight, nh, dh), attn.dense.bias

        return values
    if model_type in _BERT_LIKE:
        nh, dh = int(attn.num_attention_heads), int(attn.attention_head_size)
        dense = layer.attention.output.dense

        def values(u: Tensor):
            v = attn.value(u).view(u.shape[0], nh, dh).transpose(0, 1)  # (H, N, Dh)
            return v, per_head_output(dense.weight, nh, dh), dense.bias

        return values
    if model_type == "distilbert":
        nh, dh = int(attn.n_heads), int(attn.attention_head_size)

        def values(u: Tensor):
            v = attn.v_lin(u).view(u.shape[0], nh, dh).transpose(0, 1)  # (H, N, Dh)
            return v, per_head_output(attn.out_lin.weight, nh, dh), attn.out_lin.bias

        return values
    cfg = attn.config
    nh, dh = int(cfg.num_attention_heads), int(attn.head_dim)

    def values(u: Tensor):
        if model_type == "phi3":  # one fused projection: [q (H·Dh) | k (Hkv·Dh) | v (Hkv·Dh)]
            nkv = int(cfg.num_key_value_heads)
            v = attn.qkv_proj(u)[:, (nh + nkv) * dh :]
        else:
            v = attn.v_proj(u)
        v = expand_kv(v.view(u.shape[0], -1, dh).transpose(0, 1), nh)  # (H, N, Dh)
        return v, per_head_output(attn.o_proj.weight, nh, dh), attn.o_proj.bias

    return values


def block_layout(model_type: str, layer: nn.Module) -> BlockLayout:
    """The :class:`BlockLayout` of one block of a ``model_type`` model (one of :data:`DECODERS` or
    :data:`ENCODER_ONLY`)."""
    if model_type == "gpt2":
        attn, n1, post, kind = layer.attn, layer.ln_1, None, "pre"

        def rest(m, r):
            return m + layer.mlp(layer.ln_2(m))
    elif model_type == "gpt_neox":
        attn, n1, post, kind = layer.attention, layer.input_layernorm, None, "pre"
        parallel = bool(layer.use_parallel_residual)

        def rest(m, r):  # GPT-NeoX/Pythia's parallel block: the MLP reads the block's input
            return m + layer.mlp(layer.post_attention_layernorm(r if parallel else m))
    elif model_type in _BERT_LIKE:
        attn, n1, post, kind = layer.attention.self, None, layer.attention.output.LayerNorm, "post"

        def rest(m, r):
            return layer.output(layer.intermediate(m), m)  # LN'(m + W₂ act(W₁ m))
    elif model_type == "distilbert":
        attn, n1, post, kind = layer.attention, None, layer.sa_layer_norm, "post"

        def rest(m, r):
            return layer.output_layer_norm(layer.ffn(m) + m)
    elif model_type == "olmo2":
        attn, n1, post, kind = layer.self_attn, None, layer.post_attention_layernorm, "sandwich"

        def rest(m, r):
            return m + layer.post_feedforward_layernorm(layer.mlp(m))
    elif model_type in ("gemma2", "gemma3_text"):
        attn, n1, post, kind = layer.self_attn, layer.input_layernorm, layer.post_attention_layernorm, "sandwich"

        def rest(m, r):
            return m + layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(m)))
    else:  # Llama-like pre-norm blocks (Phi-3's dropouts are identities in eval mode)
        attn, n1, post, kind = layer.self_attn, layer.input_layernorm, None, "pre"

        def rest(m, r):
            return m + layer.mlp(layer.post_attention_layernorm(m))

    return BlockLayout(kind, attn, n1, post, _values_fn(model_type, layer, attn), rest)
