"""attnkit: attention mechanisms for PyTorch, from Bahdanau to the Transformer.

The core is one function, :func:`attend` (score, normalise, sum), and the layers built on it.
"""

__version__ = "0.1.0"

from .attention import (  # noqa: F401  (the public API)
    Attention,
    AttentionPooling,
    LearnedPositionalEncoding,
    MultiHeadAttention,
    SelfAttention,
    SelfAttentiveEncoder,
    SinusoidalPositionalEncoding,
    SpatialSelfAttention,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    attend,
    attend_hard,
    causal_mask,
    padding_mask,
    scores,
)


def __getattr__(name: str):
    """``attnkit.show(...)``: the explorer's views inline in a notebook (imported on first use)."""
    if name == "show":
        from .attribution.notebook import show

        return show
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")
