"""Word links from a CTranslate2 export's alignment (``attnkit translate --engine ctranslate2 --format html``).

A CTranslate2 model returns one attention per decoding step, the mean of its *alignment heads*
(``return_attention``). attnkit's export (:mod:`attnkit.deploy.ct2_export`) makes those the guided head
alone for a model trained with guided alignment (the head moved first in its layer, ``alignment_heads=1``)
and records in ``attnkit.json`` which rows to read: the step whose *input* is each target piece
(``"rows": "input"``, how the head was trained) or, for a model without one, the last layer's head mean at
the step that outputs it (``"rows": "output"``, the model's own alignment).

:class:`CT2Aligner` forces the export to write each target (:meth:`CT2Translator.forced_alignments`),
turns the piece rows into word attention and the word attention into links by the very functions the
PyTorch aligner uses (:class:`attnkit.tasks.translation.alignment.ModelAligner`, from which it inherits
the word splitting, the batching and the reading): the guided head read both ways (a link where each word
is the other's argmax), the plain alignment by its row argmaxes. Those functions take torch tensors, so
this path imports torch (plain ``translate --engine ctranslate2`` does not); the numbers are the export's.

With the same attention the links are the same; a float32 export's attention equals the PyTorch model's
to about 1e-5, so only a near tie between two words' attention can link differently.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..alignment.words import span_attention
from ..errors import InputError
from ..tasks.translation.alignment import GUIDED_BOTH_WAYS, AttentionReading, ModelAligner
from .ct2_engine import CT2Translator

__all__ = ["CT2Aligner", "export_reading"]


def export_reading(translator: CT2Translator, method: str | None = None) -> AttentionReading:
    """The reading a CTranslate2 export can give for ``method`` (``None``: its own): ``guided`` for an
    export of a guided model (its head, input rows, both ways), ``attention`` for one without (the last
    layer's head mean, output rows). Any other method needs attention the export does not return: an
    :class:`~attnkit.errors.InputError` that says which engine has it."""
    alignment = translator.manifest.get("alignment", {})
    guided = translator.alignment_rows == "input"
    own = "guided" if guided else "attention"
    if method not in (None, own):
        raise InputError(
            f"--align-method {method}: this CTranslate2 export returns {alignment.get('what', 'one alignment')} "
            f"only, so it aligns by {own}; use the PyTorch engine for another reading"
        )
    if guided:
        layer = int(alignment.get("layer", 1))
        return AttentionReading("guided", layer, None, None, GUIDED_BOTH_WAYS, True)
    return AttentionReading("attention", None, None, None, None, False)


class CT2Aligner(ModelAligner):
    """:class:`~attnkit.tasks.translation.alignment.ModelAligner` over a :class:`CT2Translator`: the links
    of each ``(source words, target words)`` pair from the export's alignment (see the module docstring)."""

    def __init__(self, translator: CT2Translator, method: str | None = None):
        self.translator = translator
        self.reading = export_reading(translator, method)

    def describe(self) -> str:
        what = self.translator.manifest.get("alignment", {}).get("what", "the export's alignment")
        both = f", row and column argmaxes by {self.reading.both_ways}" if self.reading.both_ways else ""
        return f"{self.reading.method}: {what} (CTranslate2){both}"

    @torch.no_grad()
    def word_attentions(
        self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], readings: Sequence[AttentionReading]
    ) -> list[list[torch.Tensor | None]]:
        """Word attention ``(target words, source words)`` of each pair from one batched forced pass of the
        export, for the one reading it has (a source longer than the model accepts: None)."""
        if any(r != self.reading for r in readings):
            raise InputError("a CTranslate2 export has one alignment: it reads no other attention")
        out, rows = self._forced_rows(pairs)
        attention = self.translator.forced_alignments([(r[1], r[3]) for r in rows])  # each (T, S)
        for (k, _, src_spans, _, tgt_spans), att in zip(rows, attention):
            out[k] = span_attention(torch.from_numpy(att), src_spans, tgt_spans)
        return [list(out) for _ in readings]
