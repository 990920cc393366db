"""attnkit: attention mechanisms for PyTorch, from Bahdanau to the Transformer.

The core is one function, :func:`attend` (score, normalise, sum), and the layers built on it.

The public names below are imported on first use (PEP 562), so ``import attnkit`` alone does not
import torch: the torch-free paths (``attnkit translate --engine ctranslate2``) stay torch-free.

The root sits at the top of the layer order (see the architecture page of the docs): it re-exports
from below and wires the notebook display (:mod:`attnkit.display`) to the explorer's views, which
are loaded on the first display. Modules inside the package read the version from
:mod:`attnkit.version`, not from here.
"""

import importlib

from . import display as _display
from .version import __version__

_display.add_provider(lambda: importlib.import_module(".explorer.notebook", __name__))

_PUBLIC = (
    "Attention",
    "AttentionPooling",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "SelfAttention",
    "SelfAttentiveEncoder",
    "SinusoidalPositionalEncoding",
    "SpatialSelfAttention",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "attend",
    "attend_hard",
    "causal_mask",
    "padding_mask",
    "scores",
)
__all__ = [*_PUBLIC, "__version__", "show"]


def __getattr__(name: str):
    """The public API from :mod:`attnkit.attention`, and ``attnkit.show(...)`` (the explorer's views
    inline in a notebook), each imported on first use."""
    if name in _PUBLIC or name == "attention":
        attention = importlib.import_module(".attention", __name__)
        return attention if name == "attention" else getattr(attention, name)
    if name == "show":
        return importlib.import_module(".explorer.notebook", __name__).show
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC, "show"])
