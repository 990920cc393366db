"""The attention core: score functions, ``attend``, masks, layers, positions, Transformer blocks."""

from . import scores
from .causal_self_attention import CausalSelfAttention, repeat_kv
from .feedforward import GeluMLP, SwiGLU, swiglu_width
from .functional import AttentionOutput, HardAttention, attend, attend_hard, masked_softmax
from .kv_cache import KVCache
from .layers import Attention, PreparedMemory, SelfAttention
from .masks import (
    causal_mask,
    check_mask,
    combine_masks,
    from_torch_mha_mask,
    key_mask,
    padding_mask,
    to_torch_mha_mask,
)
from .multihead import MultiHeadAttention
from .pooling import AttentionPooling
from .positional import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    rotate_half,
    sinusoidal_encoding,
)
from .self_attentive import SelfAttentiveEncoder, SpatialSelfAttention
from .transformer import (
    DecoderLayerCache,
    DecoderOutput,
    EncoderOutput,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "Attention",
    "AttentionOutput",
    "AttentionPooling",
    "CausalSelfAttention",
    "DecoderLayerCache",
    "DecoderOutput",
    "EncoderOutput",
    "GeluMLP",
    "HardAttention",
    "KVCache",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "PreparedMemory",
    "RotaryEmbedding",
    "SelfAttention",
    "SelfAttentiveEncoder",
    "SinusoidalPositionalEncoding",
    "SpatialSelfAttention",
    "SwiGLU",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "attend",
    "attend_hard",
    "causal_mask",
    "check_mask",
    "combine_masks",
    "from_torch_mha_mask",
    "key_mask",
    "masked_softmax",
    "padding_mask",
    "repeat_kv",
    "rotate_half",
    "scores",
    "sinusoidal_encoding",
    "swiglu_width",
    "to_torch_mha_mask",
]
