"""Word alignments from a translation model's attention: forced decoding of given target sentences,
in batches, read as Pharaoh ``i-j`` links (the glue between :mod:`attnkit.alignment` and the models).

Each pair is split into whitespace words; each word is tokenised on its own (sentencepiece never
merges pieces across whitespace, so the concatenation is the sentence's tokenisation) so the word
of every piece is known whatever the text holds. The model reads the source and is forced to write
the target; the attention row of each target piece (:mod:`attnkit.alignment.extract`: plain, or
Shift-Att's) becomes word attention by the rule of :mod:`attnkit.alignment.words` and each target
word is linked to its argmax source word (plus pairs above ``threshold``).

Which attention is read (:class:`AttentionReading`): ``method`` ``attention`` (the model's own
alignment, or one cross-attention layer's head mean or one head), ``shift`` (Shift-Att, Chen et al.
2020: the row where the target word is the decoder's input; by default the penultimate decoder layer
of a Transformer) or ``guided`` (the head trained with guided alignment, Garg et al. 2019, named in
the model's config; for RNNsearch its one attention).

A guided head is read both ways by default: a word pair is linked when each word is the other's
argmax (:data:`GUIDED_BOTH_WAYS`, the intersection of the row and the column argmaxes). Trained on a
word aligner's links, the head puts its mass on some source word for every target word, also for
target words that have no counterpart; asking the source word to pick the target word back drops most
of those links. On the dev verses of the built-in gold set it aligned better than the row argmaxes alone
and than grow-diag-final-and of rows and columns, and two models of opposite directions, each read so,
combined by grow-diag-final-and, better still (measured in benchmarks/RESULTS.md, section "Figures
formerly in docstrings").
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch

from ...alignment.extract import attention_links, column_links, shift_rows
from ...alignment.symmetrize import SYMMETRIZATIONS, invert, symmetrize
from ...alignment.words import span_attention
from ...data.parallel import count_lines, read_lines
from ...data.text import UnreadableTextError
from ...errors import InputError
from .guided import guided_head, guided_input_step
from .inference import Translator

__all__ = [
    "ALIGN_METHODS",
    "GUIDED_BOTH_WAYS",
    "ROWS_ONLY",
    "AttentionReading",
    "ModelAligner",
    "count_lines",
    "default_method",
    "describe_reading",
    "has_guided_head",
    "progress_bar",
    "read_parallel",
    "symmetrized",
]

ALIGN_METHODS = ("attention", "shift", "guided")
#: How a guided head is read unless told (see the module docstring): a link where each word is the other's argmax.
GUIDED_BOTH_WAYS = "intersection"
#: ``both_ways`` that asks for the row argmaxes only (what ``None`` gives for the other methods).
ROWS_ONLY = "none"

Link = tuple[int, int]


def has_guided_head(translator) -> bool:
    """Whether the model was trained with guided alignment: its config names the head that learnt to align
    (``alignment_layer``, ``alignment_head``), which is then the reading to align with."""
    return guided_head(getattr(translator.model, "config", None)) is not None


def default_method(translator) -> str:
    """The reading a model aligns with unless told: its guided head when it has one, else its attention."""
    return "guided" if has_guided_head(translator) else "attention"


@dataclass(frozen=True)
class AttentionReading:
    """Which attention becomes the links: ``method`` (see the module docstring), ``layer`` and
    ``head`` (1-based; ``None``: the method's default), ``threshold`` (also link pairs at or above it),
    ``both_ways`` (a symmetrisation, e.g. ``"grow-diag-final-and"``, of the matrix's row argmaxes with
    its column argmaxes, :func:`attnkit.alignment.column_links`; ``None``: the method's default, which is
    :data:`GUIDED_BOTH_WAYS` for a guided head and the rows alone otherwise; ``"none"``: the rows alone). ``input_step``: read the row of
    the step whose input is the target word (Shift-Att's) rather than the one that outputs it;
    ``None``: by the method (``shift`` yes, ``attention`` no, ``guided`` as the model was trained,
    filled in by :meth:`ModelAligner.resolve`)."""

    method: str = "attention"
    layer: int | None = None
    head: int | None = None
    threshold: float | None = None
    both_ways: str | None = None
    input_step: bool | None = None

    @property
    def shifted(self) -> bool:
        return self.method == "shift" if self.input_step is None else self.input_step

    def __post_init__(self):
        if self.method not in ALIGN_METHODS:
            raise InputError(f"method must be one of {', '.join(ALIGN_METHODS)}, got {self.method!r}")
        for name in ("layer", "head"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InputError(f"{name} must be a positive integer (1-based), got {v!r}")
        if self.head is not None and self.layer is None and self.method != "guided":
            raise InputError("head needs a layer (heads are numbered within a layer)")
        if self.threshold is not None and not 0.0 < self.threshold <= 1.0:
            raise InputError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.both_ways is not None and self.both_ways not in (*SYMMETRIZATIONS, ROWS_ONLY):
            allowed = ", ".join((*SYMMETRIZATIONS, ROWS_ONLY))
            raise InputError(f"both_ways must be one of {allowed}, got {self.both_ways!r}")

    def links(self, word_attention: torch.Tensor) -> set[Link]:
        """The links this reading takes from one pair's word attention ``(target words, source words)``."""
        rows = attention_links(word_attention, threshold=self.threshold)
        if self.both_ways in (None, ROWS_ONLY):
            return rows
        return symmetrize(rows, column_links(word_attention), self.both_ways)


def describe_reading(r: AttentionReading) -> str:
    """``"shift: layer 2 head mean, Shift-Att rows (target word as input)"`` and the like."""
    where = (
        "the model's attention"
        if r.layer is None
        else f"layer {r.layer} " + (f"head {r.head}" if r.head is not None else "head mean")
    )
    rows = "Shift-Att rows (target word as input)" if r.shifted else "rows of the output step"
    return (
        f"{r.method}: {where}, {rows}"
        + (f", plus pairs >= {r.threshold}" if r.threshold else "")
        + (f", row and column argmaxes by {r.both_ways}" if r.both_ways not in (None, ROWS_ONLY) else "")
    )


def _model_layers(model) -> int | None:
    """The number of decoder layers with cross-attention (None for a model with one attention)."""
    return getattr(getattr(model, "config", None), "num_decoder_layers", None)


class ModelAligner:
    """Links from a :class:`Translator`'s attention under forced decoding (see the module docstring)."""

    def __init__(self, translator: Translator, reading: AttentionReading = AttentionReading()):
        self.translator = translator
        self.reading = self.resolve(translator, reading)

    @staticmethod
    def resolve(translator: Translator, reading: AttentionReading) -> AttentionReading:
        """``reading`` with its defaults filled in for this model; an impossible one is an InputError."""
        model = translator.model
        name = type(model).__name__
        layers = _model_layers(model)
        cfg = getattr(model, "config", None)
        if getattr(model, "model_type", None) == "rnnencdec" or not hasattr(model, "attention_maps"):
            raise InputError(f"{name} has no attention (it encodes the source into one vector), so it aligns nothing")
        layer, head = reading.layer, reading.head
        if reading.method == "guided":
            if layers is not None:
                layer = layer or getattr(cfg, "alignment_layer", None)
                head = head or getattr(cfg, "alignment_head", None)
                if layer is None or head is None:
                    raise InputError(
                        f"this {name} was not trained with guided alignment (its config names no alignment "
                        "layer and head); use --method shift, or train it with --guided-alignment"
                    )
        elif reading.method == "shift" and layers is not None and layer is None:
            layer = max(1, layers - 1)  # the penultimate decoder layer (Chen et al. 2020; Garg et al. 2019)
        if layers is None and (layer is not None or head is not None) and (layer, head) != (1, None):
            raise InputError(f"{name} has one attention, not layers and heads: give no --layer/--head")
        if layers is not None and layer is not None:
            heads = getattr(cfg, "nhead", None)
            if layer > layers:
                raise InputError(f"layer must be in 1..{layers} (this {name} has {layers} decoder layers), got {layer}")
            if head is not None and heads is not None and head > heads:
                raise InputError(f"head must be in 1..{heads} (this {name} has {heads} heads per layer), got {head}")
        input_step, both_ways = reading.input_step, reading.both_ways
        if reading.method == "guided":
            if input_step is None:  # the rows the head was trained on
                input_step = guided_input_step(cfg)
            if both_ways is None:
                both_ways = GUIDED_BOTH_WAYS
        return AttentionReading(
            reading.method,
            layer if layers is not None else None,
            head,
            reading.threshold,
            both_ways,
            input_step,
        )

    def describe(self) -> str:
        return describe_reading(self.reading)

    # ------------------------------------------------------------------ tensors
    @staticmethod
    def _select(maps, reading: AttentionReading) -> torch.Tensor:
        """The ``(B, T, S)`` attention ``reading`` names from a batch's AttentionMaps."""
        if reading.layer is None:
            return maps.alignment
        cross = maps.cross[:, reading.layer - 1]  # (B, H, T, S)
        return cross.mean(dim=1) if reading.head is None else cross[:, reading.head - 1]

    def _spans(self, words: Sequence[str], *, source: bool = False) -> tuple[list[int], list[list[int]]]:
        """The ids of a sentence tokenised word by word, and each word's piece indices; a ``source``
        sentence as the translator reads sources (in its training spelling, :meth:`Translator.encode_sources`)."""
        ids, spans = [], []
        if not words:
            return ids, spans
        tr = self.translator
        encoded = [self._source_word(w) for w in words] if source else tr.tokenizer.encode_batch(list(words))
        for piece_ids in encoded:
            spans.append(list(range(len(ids), len(ids) + len(piece_ids))))
            ids.extend(piece_ids)
        return ids, spans

    def _source_word(self, word: str) -> list[int]:
        """A source word's ids as the translator reads sources; a word the tokenizer reads as nothing (a
        zero-width space alone between two spaces) has no piece, and so no link, instead of stopping the run."""
        try:
            return self.translator.encode_sources([word], truncate=True)[0]
        except UnreadableTextError:
            return []

    def word_attention_batch(self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[torch.Tensor | None]:
        """Word attention ``(target words, source words)`` of each ``(source words, target words)``
        pair (zeros where a side is empty), or None for a source longer than the model accepts."""
        return self.word_attentions(pairs, [self.reading])[0]

    def _forced_rows(self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> tuple[list, list]:
        """The pairs as pieces: ``(empty, rows)``, ``empty[k]`` a zero matrix for a pair with nothing to align
        (else None), ``rows`` ``(k, src_ids, src_spans, tgt_ids, tgt_spans)`` of each pair to force (a source
        longer than the model accepts is neither: it stays None)."""
        empty: list[torch.Tensor | None] = [None] * len(pairs)
        rows = []
        for k, (src_words, tgt_words) in enumerate(pairs):
            src_ids, src_spans = self._spans(src_words, source=True)
            tgt_ids, tgt_spans = self._spans(tgt_words)
            if not src_ids or not tgt_ids:  # nothing to align: no links
                empty[k] = torch.zeros(len(tgt_words), len(src_words))
            elif len(src_ids) <= self.translator.max_src_len:
                rows.append((k, src_ids, src_spans, tgt_ids, tgt_spans))
        return empty, rows

    @torch.no_grad()
    def word_attentions(
        self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], readings: Sequence[AttentionReading]
    ) -> list[list[torch.Tensor | None]]:
        """:meth:`word_attention_batch` for several readings (already resolved) of one forced pass
        (two when plain and Shift-Att rows are both asked for): one list per reading."""
        tr = self.translator
        empty, rows = self._forced_rows(pairs)
        out = [list(empty) for _ in readings]
        if not rows:
            return out
        tr.model.eval()
        lengths = torch.tensor([len(r[1]) for r in rows])
        src = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
        for b, r in enumerate(rows):
            src[b, : len(r[1])] = torch.tensor(r[1])
        for shift in sorted({r.shifted for r in readings}):
            tgt_in = torch.zeros(len(rows), max(len(r[3]) + shift for r in rows), dtype=torch.long)
            for b, r in enumerate(rows):
                forced = [tr.tokenizer.bos_id] + (r[3] if shift else r[3][:-1])  # Shift-Att: y_{T-1} is an input too
                tgt_in[b, : len(forced)] = torch.tensor(forced)
            maps = tr.model.attention_maps(src.to(tr.device), lengths.to(tr.device), tgt_in.to(tr.device))
            for reading, result in zip(readings, out):
                if reading.shifted != shift:
                    continue
                att = self._select(maps, reading).float().cpu()  # (B, T_in, S)
                if shift:
                    att = shift_rows(att)  # (B, T_in - 1, S): row t is the step whose input is y_t
                for b, (k, src_ids, src_spans, tgt_ids, tgt_spans) in enumerate(rows):
                    result[k] = span_attention(att[b, : len(tgt_ids), : len(src_ids)], src_spans, tgt_spans)
        return out

    def links_batch(self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[set[Link] | None]:
        """The links of each pair (None where :meth:`word_attention_batch` gives None)."""
        return [None if wa is None else self.reading.links(wa) for wa in self.word_attention_batch(pairs)]

    def align(
        self,
        pairs: Iterable[tuple[Sequence[str], Sequence[str]]],
        *,
        batch_size: int = 32,
        reverse: bool = False,
    ) -> Iterator[set[Link] | None]:
        """Links for every pair, in order, batching similar lengths together; with ``reverse`` the
        model reads the target side and writes the source side (a model of the other direction)
        and the links come back as ``(source word, target word)``."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        bucket: list = []
        for pair in pairs:
            bucket.append((pair[1], pair[0]) if reverse else pair)
            if len(bucket) == batch_size * 8:
                yield from self._align_bucket(bucket, batch_size, reverse)
                bucket = []
        if bucket:
            yield from self._align_bucket(bucket, batch_size, reverse)

    def _align_bucket(self, bucket, batch_size: int, reverse: bool) -> Iterator[set[Link] | None]:
        order = sorted(range(len(bucket)), key=lambda k: (len(bucket[k][0]), len(bucket[k][1])))
        result: list[set[Link] | None] = [None] * len(bucket)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            for k, links in zip(chunk, self.links_batch([bucket[k] for k in chunk])):
                result[k] = invert(links) if (reverse and links is not None) else links
        yield from result


def read_parallel(src_path, tgt_path) -> tuple[int, Iterator[tuple[list[str], list[str]]]]:
    """``(number of pairs, iterator of (source words, target words))`` over two line-parallel files;
    files of different lengths are an InputError naming both files and both counts (checked before
    any pair is read, so no work is lost)."""
    counts = [count_lines(p) for p in (src_path, tgt_path)]
    if counts[0] != counts[1]:
        raise InputError(
            f"{src_path} has {counts[0]} lines but {tgt_path} has {counts[1]}: "
            "the source and target files must have one sentence per line, in the same order"
        )

    def pairs():  # a line that is not UTF-8 or holds a NUL byte: a ParallelDataError naming file, line and offset
        for (_, line_s), (_, line_t) in zip(read_lines(src_path), read_lines(tgt_path)):
            yield line_s.split(), line_t.split()

    return counts[0], pairs()


def progress_bar(total: int, enabled: bool):
    """A tqdm bar over ``total`` pairs on stderr (a no-op object when not ``enabled``)."""
    from tqdm import tqdm

    return tqdm(total=total, unit="pair", dynamic_ncols=True, file=sys.stderr, disable=not enabled)


def symmetrized(
    forward: Iterable[set[Link] | None], reverse: Iterable[set[Link] | None], method: str
) -> Iterator[set[Link] | None]:
    """Pairwise symmetrisation of two link streams (None where either side has none)."""
    for f, r in zip(forward, reverse):
        yield None if f is None or r is None else symmetrize(f, r, method)
