"""A CTranslate2 export in the attention explorer (``attnkit serve --engine ctranslate2``).

The explorer builds its payloads from the PyTorch :class:`attnkit.tasks.translation.Translator`'s
interface (``tokenizer``, ``encode_sources``, ``translate``, ``attention`` and ``model.model_type``).
:class:`CT2ExplorerTranslator` gives a :class:`attnkit.deploy.ct2_engine.CT2Translator` that
interface. CTranslate2 returns one attention map, the mean over the alignment heads of the alignment
layer (the export picks every head of the last decoder layer, attnkit's own alignment, or a guided
model's alignment head), so the
payloads have the alignment, its word view and its diagnostics; the per-layer, per-head maps
(``heads``) need the PyTorch engine, and the payload's ``note`` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import torch

from ..models.base import AttentionMaps
from ..tasks.engine import TranslationEngine
from ..tasks.translation.inference import TranslationAttention
from .ct2_engine import ENGINE, CT2Translator

__all__ = ["HEADS_NOTE", "CT2ExplorerTranslator"]

HEADS_NOTE = (
    "CTranslate2 engine: the alignment is {what}; "
    "per-layer and per-head views need the PyTorch engine (attnkit serve --engine pytorch)"
)


class CT2ExplorerTranslator(TranslationEngine):
    """``ct2`` with the interface the explorer reads (see the module docstring); a
    :class:`attnkit.tasks.engine.TranslationEngine`."""

    engine = ENGINE

    def __init__(self, ct2: CT2Translator):
        self.ct2 = ct2
        what = ct2.manifest.get("alignment", {}).get("what", "last decoder layer's cross-attention, head mean")
        self.note = HEADS_NOTE.format(what=what)
        self.tokenizer = ct2.tokenizer
        config = {k: v for k, v in ct2.manifest.items() if k not in ("format", "version", "tokenizer_sha256")}
        self.model = SimpleNamespace(model_type=ct2.model_type, config=SimpleNamespace(to_dict=lambda: config))

    @property
    def spelling(self) -> str:
        """The spelling input is rewritten to before tokenizing (the engine's)."""
        return self.ct2.spelling

    def encode_sources(self, sentences: Sequence[str], *, truncate: bool = False) -> list[list[int]]:
        return self.ct2.encode_sources(sentences, truncate=truncate)

    def translate(self, sentences: Sequence[str], *, beam_size: int = 1, **options) -> list:
        return self.ct2.translate(sentences, beam_size=beam_size, **options)

    def attention(self, source: str, target: str | Sequence[int]) -> TranslationAttention:
        """The alignment while forced to write ``target`` (English text or token ids), as
        :meth:`attnkit.tasks.translation.Translator.attention` returns it (the other maps ``None``)."""
        src_ids = self.encode_sources([source])[0]
        tgt_ids = self.tokenizer.encode(target.strip()) if isinstance(target, str) else [int(t) for t in target]
        alignment = torch.from_numpy(self.ct2.forced_alignment(src_ids, tgt_ids))  # (T, S)
        piece = self.tokenizer.id_to_piece
        return TranslationAttention(
            source_pieces=[piece(t) for t in src_ids],
            target_pieces=[piece(t) for t in tgt_ids],
            maps=AttentionMaps(alignment=alignment, score="e_j = qᵀ k_j / √d_h"),
        )
