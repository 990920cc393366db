"""``attnkit translate --format html|xml|markdown|xliff --file DOC --processes N``: one document's blocks
translated and aligned by N worker processes, byte for byte what one process writes.

One process (:class:`attnkit.tasks.translation.markup.LocalRunner`) gives the translator every sentence of
the document in one call, which sorts them by their number of source pieces and translates them 64 at a
time, and the aligner every pair in one call, which takes them 256 at a time in order, sorts each 256 by
length and aligns 32 at a time. A batch's numbers depend on its members (the padded length, and the
length cap of twice the longest source plus 10 pieces), so to write what one process writes,
:class:`SplitRunner` hands the workers the very same batches:

1. translation: the sentences in that sorted order, cut into runs of whole 64-sentence batches, one run
   per worker (a worker sorts its run again, stably, by the same key: the same batches);
2. alignment: the pairs in input order, cut into runs of whole 256-pair blocks, one run per worker;
3. this process reads the document, cuts it into blocks and puts the translated blocks back together.

The workers are a ``spawn`` process pool (each loads the model once, at ``cpu_count / N`` torch threads),
not a ``torchrun`` group as ``translate --file``'s lines are: one document is read whole and written whole,
so there is no corpus to resume.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os

from ..pretrained import DEFAULT_TRANSLATION_MODEL
from .common import _open_model

__all__ = ["SplitRunner", "markup_translator", "translate_markup_split"]

_TRANSLATE_BATCH = 64  # Translator.translate's (and CT2Translator.translate's) default batch
_ALIGN_BUCKET = 32 * 8  # ModelAligner.align's bucket: batch_size 32 times 8

_worker: dict = {}


def _init(args, threads: int) -> None:
    """A worker: torch at ``threads`` threads, the model and its aligner loaded once."""
    if args.engine != "ctranslate2":
        import torch

        torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    tr, aligner = markup_translator(args)
    _worker["runner"] = _local(tr, aligner, args)


def markup_translator(args):
    """The translator and the aligner that moves the tags, for ``--format``: the PyTorch model and its
    :func:`~attnkit.tasks.translation.markup.default_aligner`, or a CTranslate2 export (``--engine
    ctranslate2 --model EXPORT``) and its :class:`~attnkit.deploy.ct2_align.CT2Aligner` (the export's
    alignment heads)."""
    if args.engine == "ctranslate2":
        from ..deploy.ct2_align import CT2Aligner

        tr = _open_model(args, None).impl  # no default: an export is named with --model
        return tr, CT2Aligner(tr, args.align_method)
    from ..service import ModelKind
    from ..tasks.translation.markup import default_aligner

    tr = _open_model(args, DEFAULT_TRANSLATION_MODEL, kind=ModelKind.TRANSLATOR).impl
    return tr, default_aligner(tr, args.align_method)


def _local(tr, aligner, args):
    from ..tasks.translation.markup import LocalRunner

    return LocalRunner(tr, aligner, args.beam, args.length_penalty)


def _translate(sources: list[str]) -> list[list[str]]:
    return _worker["runner"].translate(sources)


def _align(pairs: list) -> list:
    return _worker["runner"].align(pairs)


def _runs(n_items: int, unit: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` runs of ``n_items`` made of whole ``unit``-sized blocks, at most ``parts`` of them,
    as even as whole blocks allow."""
    blocks = -(-n_items // unit)
    per = -(-blocks // parts) if blocks else 0
    return [(a * unit, min(n_items, (a + per) * unit)) for a in range(0, blocks, per)] if per else []


class SplitRunner:
    """The :class:`~attnkit.tasks.translation.markup.LocalRunner` calls spread over a process ``pool`` in
    whole batches (see the module docstring); ``translator`` (this process's) tokenises for the sort."""

    def __init__(self, translator, pool: futures.Executor, parts: int):
        self.translator, self.pool, self.parts = translator, pool, parts

    def translate(self, sources: list[str]) -> list[list[str]]:
        ids = self.translator.encode_sources(sources, truncate=True)
        order = sorted(range(len(sources)), key=lambda i: len(ids[i]))  # as Translator.translate_ids sorts
        runs = _runs(len(order), _TRANSLATE_BATCH, self.parts)
        jobs = [self.pool.submit(_translate, [sources[i] for i in order[a:b]]) for a, b in runs]
        out: list = [None] * len(sources)
        for (a, b), job in zip(runs, jobs):
            for i, words in zip(order[a:b], job.result()):
                out[i] = words
        return out

    def align(self, pairs: list) -> list:
        runs = _runs(len(pairs), _ALIGN_BUCKET, self.parts)
        jobs = [self.pool.submit(_align, pairs[a:b]) for a, b in runs]
        return [links for job in jobs for links in job.result()]


def translate_markup_split(args, text: str):
    """The document ``text`` translated by ``args.processes`` workers: ``(MarkupTranslation, how the tags
    were moved)``."""
    from ..tasks.translation.markup import translate_document

    n = args.processes
    tr, aligner = markup_translator(args)
    threads = max(1, (os.cpu_count() or 1) // n)
    context = multiprocessing.get_context("spawn")
    with futures.ProcessPoolExecutor(n, mp_context=context, initializer=_init, initargs=(args, threads)) as pool:
        result = translate_document(
            tr,
            text,
            args.format,
            aligner=aligner,
            beam_size=args.beam,
            length_penalty=args.length_penalty,
            runner=SplitRunner(tr, pool, n),
        )
    return result, aligner.describe()
