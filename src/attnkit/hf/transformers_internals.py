"""The one place attnkit touches ``transformers``' private or undocumented internals.

attnkit reads three things ``transformers`` does not promise to keep:

- ``AttentionInterface._global_mapping``: the registry of attention functions (``"sdpa"``, ``"eager"``,
  ...), whose entries :mod:`attnkit.hf.capture` wraps to watch each attention module's call;
- ``config._attn_implementation``: which of them a loaded model runs;
- the layout of ``EncoderDecoderCache``: its ``self_attention_cache`` and ``cross_attention_cache``,
  their per-layer ``layers`` (each with ``reorder_cache``) and the cache's ``is_updated`` dict, which
  :mod:`attnkit.hf.seq2seq` copies shallowly to fork a decoder state for beam search.
- a decoder-only model's cache's ``reorder_cache``, which :class:`attnkit.hf.self_attention.HFDecoder` calls
  to follow beams.

Each is reached through one accessor below, which fails with a :class:`TransformersInternalsError`
naming the internal and the installed version when it is missing, instead of an ``AttributeError``
deep inside a translation or a request.

**Version check.** At import the installed version is compared with :data:`SUPPORTED` (the range this
module was written and tested against; the project pins 5.23.0). Outside it a :class:`UserWarning` is
issued, not an error: the Hugging Face path is an optional extra, a newer ``transformers`` often keeps
these internals (and when it does not, the accessor that needs one fails with a clear message at its
first use), so refusing outright would block models that still work. The warning says where to look
when something then goes wrong.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

from ..errors import AttnkitError
from ..version import installed_version, outside_range

__all__ = [
    "SUPPORTED",
    "TransformersInternalsError",
    "attention_function",
    "attention_implementation",
    "check_version",
    "fork_encoder_decoder_cache",
    "register_attention_function",
    "reorder_decoder_cache",
]

#: ``(minimum, below)``: the ``transformers`` releases this module was written for (``>=5.0,<6``).
SUPPORTED = ("5.0", "6")


class TransformersInternalsError(AttnkitError, RuntimeError):
    """An internal of ``transformers`` that attnkit relies on is missing (another ``transformers``
    version than the one :data:`SUPPORTED` names)."""


def _version() -> str:
    return installed_version("transformers") or "(not installed)"


def _missing(what: str, needed_by: str) -> TransformersInternalsError:
    low, high = SUPPORTED
    return TransformersInternalsError(
        f"transformers {_version()} has no {what}, which {needed_by} relies on "
        f"(written for transformers >={low},<{high}); install a version in that range"
    )


def check_version() -> str | None:
    """Warn (one line: the library, the installed version, the supported range) when the installed
    ``transformers`` lies outside :data:`SUPPORTED`; returns the message, or None when inside it."""
    message = outside_range("transformers", installed_version("transformers"), *SUPPORTED)
    if message is not None:
        warnings.warn(f"{message}; attnkit's Hugging Face support may fail", UserWarning, stacklevel=2)
    return message


# -- the registry of attention functions -----------------------------------------------------------------


def _attention_interface():
    try:
        from transformers.modeling_utils import AttentionInterface
    except ImportError:
        raise _missing("transformers.modeling_utils.AttentionInterface", "capturing attention") from None
    if not isinstance(getattr(AttentionInterface, "_global_mapping", None), dict):
        raise _missing("AttentionInterface._global_mapping", "capturing attention")
    if not callable(getattr(AttentionInterface, "register", None)):
        raise _missing("AttentionInterface.register", "capturing attention")
    return AttentionInterface


def attention_function(name: str) -> Callable | None:
    """The attention function registered under ``name`` (``"sdpa"``, ``"eager"``...) for every model, or
    None when none is."""
    return _attention_interface()._global_mapping.get(name)


def register_attention_function(name: str, function: Callable) -> None:
    """Register ``function`` under ``name`` for every model (replacing what was there)."""
    _attention_interface().register(name, function)


def attention_implementation(model: Any) -> str:
    """Which attention implementation ``model`` runs (``"sdpa"``, ``"eager"``, ``"flash_attention_2"``...),
    read from its config; ``"eager"`` when the config names none (or the model is not a ``transformers`` one)."""
    config = getattr(model, "config", None)
    if config is None or not type(config).__module__.startswith("transformers"):
        return str(getattr(config, "_attn_implementation", None) or "eager")
    if not hasattr(config, "_attn_implementation"):
        raise _missing(f"{type(config).__name__}._attn_implementation", "capturing attention")
    return str(config._attn_implementation or "eager")


# -- the key/value cache of an encoder-decoder --------------------------------------------------------------

_CACHE_PARTS = ("self_attention_cache", "cross_attention_cache")


def fork_encoder_decoder_cache(cache: Any, index=None, *, cross: bool = True) -> Any:
    """A new ``EncoderDecoderCache`` over the same tensors (its layers copied shallowly), its rows
    ``index (R',)`` selected (the self-attention cache; the cross-attention cache too when ``cross``):
    the old cache is left as it was, and the model's in-place updates go to the copy."""
    for name in (*_CACHE_PARTS, "is_updated"):
        if not hasattr(cache, name):
            raise _missing(f"{type(cache).__name__}.{name}", "forking the decoder's cache (beam search)")
    new = copy.copy(cache)
    for name in _CACHE_PARTS:
        part = copy.copy(getattr(cache, name))
        layers = getattr(part, "layers", None)
        if not isinstance(layers, list):
            raise _missing(f"{type(part).__name__}.layers", "forking the decoder's cache (beam search)")
        part.layers = [copy.copy(layer) for layer in layers]
        if index is not None and (cross or name == "self_attention_cache"):
            for layer in part.layers:
                if not callable(getattr(layer, "reorder_cache", None)):
                    raise _missing(f"{type(layer).__name__}.reorder_cache", "reordering the decoder's cache")
                layer.reorder_cache(index)
        setattr(new, name, part)
    new.is_updated = dict(cache.is_updated)
    return new


def reorder_decoder_cache(cache: Any, index) -> None:
    """Rows ``index (R',)`` of a decoder-only model's key/value cache, in place (the cache's own
    ``reorder_cache``, as ``transformers``' beam search follows its beams)."""
    if not callable(getattr(cache, "reorder_cache", None)):
        raise _missing(f"{type(cache).__name__}.reorder_cache", "reordering a language model's cache (beam search)")
    cache.reorder_cache(index)


check_version()
