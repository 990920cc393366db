"""The attention core: score functions, ``attend``, masks, layers, positions, Transformer blocks."""
from . import scores
from .functional import AttentionOutput, HardAttention, attend, attend_hard, masked_softmax
from .layers import (
    Attention,
    AttentionPooling,
    KVCache,
    MultiHeadAttention,
    PreparedMemory,
    SelfAttention,
    SelfAttentiveEncoder,
    SpatialSelfAttention,
)
from .masks import causal_mask, check_mask, combine_masks, from_torch_mha_mask, key_mask, padding_mask, to_torch_mha_mask
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding, sinusoidal_encoding
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
    "scores", "attend", "attend_hard", "masked_softmax", "AttentionOutput", "HardAttention",
    "Attention", "PreparedMemory", "KVCache", "SelfAttention", "MultiHeadAttention", "AttentionPooling",
    "SpatialSelfAttention", "SelfAttentiveEncoder",
    "padding_mask", "causal_mask", "key_mask", "combine_masks", "check_mask", "to_torch_mha_mask", "from_torch_mha_mask",
    "SinusoidalPositionalEncoding", "LearnedPositionalEncoding", "sinusoidal_encoding",
    "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder",
    "EncoderOutput", "DecoderOutput", "DecoderLayerCache",
]
