"""The models built from attnkit's attention: RNN translators, the Transformer, the captioner.

One module per model family, each building from its own config dataclass; :mod:`.registry` maps a
checkpoint's ``model_type`` to its class, and :mod:`.base` holds what every translation model
provides (``attention_maps`` → :class:`AttentionMaps`).
"""

from .base import AttentionMaps, TranslationModel
from .registry import build_model, model_class, register_model, registered_models

__all__ = ["AttentionMaps", "TranslationModel", "build_model", "model_class", "register_model", "registered_models"]
