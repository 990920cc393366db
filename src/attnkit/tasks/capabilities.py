"""What a loaded model can do, as small protocols: it translates, captions, reads a text (its attention
over the text), or continues a text. attnkit's own models and the Hugging Face and CTranslate2 adapters
implement them; a model's kind (:class:`attnkit.service.ModelKind`) is derived from the protocols its
wrapper satisfies (:func:`attnkit.service.model.kind_of`), never told apart by probing attributes one at a
time. ``isinstance(x, Protocol)`` checks that ``x`` has the protocol's members (``runtime_checkable``); the
members' meanings are the ones documented on each.

The translator's protocol is :class:`attnkit.tasks.engine.TranslationEngine` (torch-free, for the
CTranslate2 path), named :data:`Translates` here beside the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from .engine import TranslationEngine

__all__ = ["Captions", "ContinuesText", "ReadsText", "Translates"]

#: a translation engine: ``tokenizer``, ``spelling``, ``encode_sources``, ``translate``
Translates = TranslationEngine


@runtime_checkable
class Captions(Protocol):
    """An image captioner (Show, Attend and Tell): ``caption(images (N, 1, C, C))`` gives one caption, its words
    and the attention of each word over the image's regions, per image; ``canvas`` is the side ``C``."""

    @property
    def canvas(self) -> int: ...

    def caption(
        self, images: Any, *, beam_size: int = 1, batch_size: int = 128, max_len: int | None = None
    ) -> list: ...


@runtime_checkable
class ReadsText(Protocol):
    """A text model's attention over a text: ``num_layers``, ``num_heads``, ``causal``, ``source`` (its name in
    answers), ``encode(text) -> (ids, pieces)``, ``self_attention(text)`` (every layer's and head's map at once)
    and ``stream(text, on_layer)`` (each layer's maps as the layer runs)."""

    num_layers: int
    num_heads: int
    causal: bool
    source: str

    def encode(self, text: str) -> tuple[list[int], list[str]]: ...

    def self_attention(self, text: Any, *, layers: Sequence[int] | None = None, heads: Sequence[int] | None = None): ...

    def stream(self, text: Any, on_layer: Callable, **options) -> list[str]: ...


@runtime_checkable
class ContinuesText(ReadsText, Protocol):
    """A text model that writes: ``can_generate`` (false for an encoder-only model or a decoder without its
    language-model head, which reads text only), ``generate(text)`` and ``sample(text)`` (greedy and sampled
    continuations through the one search, :mod:`attnkit.decoding.continuation`), ``decoder()`` (the model as
    that search decodes it) and ``next_token_logits``."""

    can_generate: bool

    def generate(self, text: str, *, max_new_tokens: int = 20) -> tuple[list[int], int]: ...

    def sample(self, text: str, **options) -> tuple[list[int], int]: ...

    def decoder(self): ...

    def next_token_logits(self, ids: Sequence[int], last: int): ...
