"""Translate a list of sentences on several ranks with the batches one process makes.

:meth:`Translator.translate` sorts its sentences by number of source pieces (a stable sort) and
decodes them in batches of ``batch_size``; a batch's translations depend on its members (the padded
length, and the length cap of twice the longest source plus 10 pieces). :func:`translations_on_ranks`
makes those same batches, deals them round robin to the ranks, and gathers every rank's translations,
so each rank ends with the one-process list, and a score computed from it (BLEU, chrF, by length) is
the one-process score to the last digit. Used by ``attnkit evaluate translation`` under torchrun.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["one_process_batches", "translations_on_ranks"]


def one_process_batches(tr, sentences: Sequence[str], *, truncate: bool, batch_size: int = 64) -> list[list[int]]:
    """The indices of ``sentences`` in each batch :meth:`Translator.translate` decodes, in its order."""
    ids = tr.encode_sources(list(sentences), truncate=truncate)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # as translate_ids sorts
    return [order[k : k + batch_size] for k in range(0, len(order), batch_size)]


def translations_on_ranks(
    tr,
    sentences: Sequence[str],
    *,
    rank: int,
    world: int,
    gather: Callable[[object], list],
    batch_size: int = 64,
    truncate: bool = False,
    **options,
) -> list[str]:
    """Every sentence's translation, in order, as ``tr.translate(sentences, truncate=truncate, **options)``
    gives it; this rank decodes batches ``rank, rank + world, ...`` of :func:`one_process_batches`.
    ``gather(obj)`` returns every rank's ``obj`` in rank order (``all_gather_object``)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in 0..{world - 1}, got {rank}")
    batches = one_process_batches(tr, sentences, truncate=truncate, batch_size=batch_size)
    mine = []
    for batch in batches[rank::world]:
        results = tr.translate([sentences[i] for i in batch], truncate=truncate, batch_size=batch_size, **options)
        mine.extend((i, r.translation) for i, r in zip(batch, results))
    out: list[str | None] = [None] * len(sentences)
    for part in gather(mine):
        for i, text in part:
            out[i] = text
    if any(t is None for t in out):
        raise RuntimeError("a rank's translations are missing from the gather")
    return out  # type: ignore[return-value]
