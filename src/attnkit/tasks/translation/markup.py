"""Translate documents that carry markup (HTML, XML, Markdown, XLIFF), moving the inline tags across by
the model's word alignment.

A well-kept parser reads the document (the standard library's :mod:`html.parser` for HTML, expat for
XML, ``markdown-it-py`` for Markdown); no regular expression ever reads markup. Every token keeps its
own source text, so everything that is not translated comes back byte for byte. The document is cut
into blocks (a paragraph, a heading, a list item: the runs of text and inline tags between block-level
tags). Each block's text, with its inline tags removed, is translated as one sentence (a block longer
than the model's input is cut at sentence ends first), aligned word by word with the translator's own
attention (:class:`~attnkit.tasks.translation.alignment.ModelAligner`: the guided head by default), and
its tags are put back around the target words that the words they wrapped went to
(:func:`attnkit.alignment.markup.project_spans`, Hanneman & Dinu 2020; Zenkel et al. 2021): each tag
once, with its attributes as written, nesting valid.

Never translated: ``<code>``, ``<kbd>``, ``<samp>``, ``<pre>``, ``<script>``, ``<style>``,
``<textarea>``, any element with ``translate="no"``, comments, attributes, Markdown code spans, fenced
code, link targets and raw HTML. An inline one of these is carried as one unit, placed by its
neighbours' alignment. Within a block, whitespace between words becomes one space; the whitespace
around blocks is kept. A block with no word to translate is left exactly as it was, so a document
with nothing to translate comes back byte-identical.

XLIFF (1.2 and 2.x): each unit's ``<source>`` is one block, translated into the unit's ``<target>``
(its content replaced, or a new target added after the source); ``<g>``, ``<pc>`` and ``<mrk>`` are the
tags moved, and the placeholders (``<x/>``, ``<ph>``, ``<bpt>``, ``<ept>``, ``<it>``, ``<sc/>``, ``<ec/>``)
are carried whole, their codes untouched. The sources stay as written.

Repairs (each reported in :attr:`MarkupTranslation.notes`): an inline HTML tag left open is closed at
the end of its block, a tag closed out of order closes the tags opened inside it, a stray closing tag
is kept where it was, a tag inside a word wraps the whole word. XML that is not well-formed is an
error naming its line, as expat reports it.

The reading of each format is in :mod:`._markup_read`, one block's tags and its writing back in
:mod:`._markup_block`; this module translates and aligns the blocks and puts the document together.
The translator may be any engine with ``encode_sources``, ``max_src_len`` and ``translate`` (a CTranslate2
export, with :class:`attnkit.deploy.ct2_align.CT2Aligner` as its aligner), and what translates and aligns
the sentences is a runner (:class:`LocalRunner`; ``attnkit translate --processes`` passes one that hands
worker processes whole batches, :mod:`attnkit.cli.translate_markup_job`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...alignment.markup import project_spans
from ...data.text import UnreadableTextError
from ...errors import InputError
from ._markup_block import TaggedBlock, escape_markdown, escape_markup, read_block, write_block
from ._markup_read import (
    XLIFF_UNITS,
    Block,
    html_tokens,
    local_name,
    markdown_pieces,
    runs,
    xliff_block,
    xml_events,
    xml_tokens,
)

__all__ = [
    "FORMATS",
    "LocalRunner",
    "MarkupTranslation",
    "decode_document",
    "default_aligner",
    "split_document",
    "translate_document",
]

FORMATS = ("html", "xml", "markdown", "xliff")
_SENTENCE_END = (".", "!", "?")
_CLOSING_QUOTES = "\"'”»)"


@dataclass
class MarkupTranslation:
    """A translated document: ``text``; ``blocks`` translated; ``notes``, the repairs made (one phrase each)."""

    text: str
    blocks: int = 0
    notes: list[str] = field(default_factory=list)


def decode_document(data: bytes, name: str) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark kept); anything else is a one-line InputError naming ``name``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            f"{name}: not UTF-8 (byte 0x{data[exc.start]:02x} at line {line}); convert it first, e.g. with iconv"
        ) from None


def _translate_xliff(
    translator, text: str, aligner, beam_size: int, length_penalty, runner=None
) -> tuple[str, int, list[str]]:
    """XLIFF 1.2 or 2.x: each unit's ``<source>`` translated, its inline tags moved, into its ``<target>`` (its
    content replaced, its own attributes kept) or a new ``<target>`` after the source, indented as the source
    is. The sources, and everything else, stay as written; a unit marked ``translate="no"`` is skipped."""
    events = xml_events(text)
    units: list[tuple[int, int, tuple[str, int, int] | None]] = []  # (source open, close, target)
    stack: list[tuple[str, bool]] = []  # (local name, translate="no" here or above)
    unit: dict | None = None
    for k, (kind, _raw, name, attrs, _at) in enumerate(events):
        local = local_name(name)
        in_unit = unit is not None and bool(stack) and stack[-1][0] in XLIFF_UNITS
        if kind == "void" and local == "target" and in_unit:
            unit["target"] = ("void", k, k)
        elif kind == "open":
            if in_unit and local == "source":
                unit["source"] = [k, None]
            elif in_unit and local == "target":
                unit["target"] = ["open", k, None]
            no = (stack[-1][1] if stack else False) or attrs.get("translate") == "no"
            stack.append((local, no))
            if local in XLIFF_UNITS:
                unit = {"no": no, "source": None, "target": None}
        elif kind == "close" and stack:
            stack.pop()
            if unit is None:
                continue
            if local == "source" and unit["source"] and unit["source"][1] is None:
                unit["source"][1] = k
            elif local == "target" and isinstance(unit["target"], list) and unit["target"][2] is None:
                unit["target"][2] = k
            elif local in XLIFF_UNITS:
                if unit["source"] and unit["source"][1] is not None and not unit["no"]:
                    units.append((*unit["source"], tuple(unit["target"]) if unit["target"] else None))
                unit = None
    blocks = [xliff_block(events[a + 1 : b], text) for a, b, _ in units]
    done, notes = _translate_blocks(translator, blocks, aligner, escape_markup, True, beam_size, length_penalty, runner)
    edits: dict[int, tuple[int, str]] = {}  # at event k: this text instead of events k .. j - 1
    for (a, b, target), d in zip(units, done):
        if d is None:
            continue
        if target is not None and target[0] == "open":  # its content replaced
            edits[target[1] + 1] = (target[2], d)
        elif target is not None:  # <target/>: opened, filled, closed
            raw, name = events[target[1]][1], events[target[1]][2]
            edits[target[1]] = (target[1] + 1, f"{raw[:-2].rstrip()}>{d}</{name}>")
        else:  # a new target after the source, on a line of its own when the source is on one
            k, before = a, ""
            while k > 0 and events[k - 1][0] == "text" and not events[k - 1][1].strip():
                k -= 1
                before = events[k][1] + before
            indent = before[before.rfind("\n") :] if "\n" in before else ""
            name = events[a][2][: -len("source")] + "target"  # with the source's namespace prefix
            edits[b + 1] = (b + 1, f"{indent}<{name}>{d}</{name}>")
    out: list[str] = []
    skip = -1
    for k, ev in enumerate(events):
        if k in edits:
            skip, d = edits[k]
            out.append(d)
        if k >= skip:
            out.append(ev[1])
    if len(events) in edits:
        out.append(edits[len(events)][1])
    return "".join(out), sum(d is not None for d in done), notes


# ---------------------------------------------------------------- the document
def split_document(text: str, fmt: str) -> tuple[list[Block | str], list[str]]:
    """The document as kept text and blocks, and the notes of what the parser could not take as it is (for
    ``html``, ``xml`` and ``markdown``; XLIFF's sources are read by :func:`translate_document` itself)."""
    if fmt not in FORMATS or fmt == "xliff":
        raise InputError(f"format must be one of {', '.join(f for f in FORMATS if f != 'xliff')}, got {fmt!r}")
    if fmt == "markdown":
        return markdown_pieces(text)
    tokens = html_tokens(text) if fmt == "html" else xml_tokens(text)
    return runs(tokens), []


def _chunks(translator, words: list[str]) -> list[tuple[int, int]]:
    """``[start, end)`` word ranges of a block, each within the model's input: the whole block when it fits,
    else sentences (cut after a word ending a sentence) packed greedily, a too-long sentence cut at words."""

    def fits(a: int, b: int) -> bool:
        ids = translator.encode_sources([" ".join(words[a:b])], truncate=True)[0]
        return len(ids) < translator.max_src_len

    if fits(0, len(words)):
        return [(0, len(words))]
    ends = [k + 1 for k, w in enumerate(words) if w.rstrip(_CLOSING_QUOTES).endswith(_SENTENCE_END)]
    ends = sorted(set(ends) | {len(words)})
    out, a, prev = [], 0, 0
    for e in ends:
        if fits(a, e):
            prev = e
            continue
        if prev > a:
            out.append((a, prev))
            a = prev
        while a < e and not fits(a, e):  # a sentence longer than the model's input: cut at words
            b = a + 1
            while b < e and fits(a, b + 1):
                b += 1
            out.append((a, b))
            a = b
        prev = e
    if a < len(words):
        out.append((a, len(words)))
    return out


def default_aligner(translator, method: str | None = None):
    """The :class:`~attnkit.tasks.translation.alignment.ModelAligner` that moves tags unless told: ``method``
    (``attention``, ``shift``, ``guided``) read as ``attnkit align`` reads it; default the model's guided
    head when it has one (read both ways), else its attention."""
    from .alignment import AttentionReading, ModelAligner, default_method

    return ModelAligner(translator, AttentionReading(method or default_method(translator)))


class LocalRunner:
    """Translates and aligns a document's sentences in this process: all of them in one call each, so the
    translator batches them (sorted by length, 64 a batch) and the aligner too (256 at a time, in order,
    sorted, 32 a batch). A split run (``attnkit translate --processes``) gives each process whole batches of
    the same calls, so that its output is byte for byte this one's."""

    def __init__(self, translator, aligner, beam_size: int = 5, length_penalty: float | None = None):
        self.translator, self.aligner = translator, aligner
        self.beam_size, self.length_penalty = beam_size, length_penalty

    def translate(self, sources: list[str]) -> list[list[str]]:
        """The target words of each source sentence."""
        results = self.translator.translate(
            sources, beam_size=self.beam_size, length_penalty=self.length_penalty, truncate=True
        )
        return [r.translation.split() for r in results]

    def align(self, pairs: list[tuple[list[str], list[str]]]) -> list:
        """The word links of each ``(source words, target words)`` pair (None: a source too long)."""
        return list(self.aligner.align(pairs))


def _translate_blocks(
    translator, blocks: list[Block], aligner, escape, unescape: bool, beam_size: int, length_penalty, runner=None
) -> tuple[list[str | None], list[str]]:
    """Each block translated with its tags projected (None: kept as it was, no word to translate), and the
    notes of the repairs made. All blocks' sentences go to ``runner`` (default :class:`LocalRunner`), to the
    translator and the aligner in one call each."""
    notes: list[str] = []
    tagged: list[tuple[int, TaggedBlock, list[tuple[int, int]]]] = []
    for k, p in enumerate(blocks):
        t = read_block(p, unescape=unescape)
        if not t.words:
            continue
        try:
            chunks = _chunks(translator, t.words)
        except UnreadableTextError:  # only zero-width or control characters: nothing to translate
            notes.append(f"kept the block at line {p.tokens[0].line} as it was: no word the model can read")
            continue
        notes.extend(t.notes)
        tagged.append((k, t, chunks))
    sources = [" ".join(t.words[a:b]) for _, t, chunks in tagged for a, b in chunks]
    if any(len(chunks) > 1 for _, _, chunks in tagged):
        n = sum(len(c) > 1 for _, _, c in tagged)
        notes.append(f"split {n} block(s) longer than the model's input at sentence ends")
    runner = runner or LocalRunner(translator, aligner, beam_size, length_penalty)
    targets = runner.translate(sources) if sources else []
    pairs = [(s.split(), t) for s, t in zip(sources, targets)]
    links = runner.align(pairs) if pairs else []
    out: list[str | None] = [None] * len(blocks)
    n = 0
    for k, t, chunks in tagged:
        target: list[str] = []
        block_links: list[tuple[int, int]] = []
        for a, _ in chunks:
            for i, j in links[n] or ():
                block_links.append((a + i, len(target) + j))
            target.extend(targets[n])
            n += 1
        spans = project_spans(t.spans, block_links, len(t.words), len(target))
        out[k] = write_block(target, t, spans, escape)
    return out, notes


def translate_document(
    translator,
    text: str,
    fmt: str,
    *,
    aligner=None,
    beam_size: int = 5,
    length_penalty: float | None = None,
    runner=None,
) -> MarkupTranslation:
    """Translate the document ``text`` in format ``fmt`` (``html``, ``xml`` or ``markdown``; see the module
    docstring) with ``translator`` (a :class:`~attnkit.tasks.translation.Translator`), its tags projected
    by ``aligner`` (a :class:`~attnkit.tasks.translation.alignment.ModelAligner`; default: the translator's
    own default reading, its guided head when it has one). ``runner``: what translates and aligns the
    sentences (default :class:`LocalRunner` of the translator and the aligner; a split run passes its own)."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""  # a byte-order mark is kept, not read as text
    if aligner is None:
        aligner = default_aligner(translator)
    if fmt == "xliff":
        out, blocks, notes = _translate_xliff(translator, text[len(bom) :], aligner, beam_size, length_penalty, runner)
        return MarkupTranslation(bom + out, blocks, list(dict.fromkeys(notes)))
    pieces, notes = split_document(text[len(bom) :], fmt)
    escape = escape_markdown if fmt == "markdown" else escape_markup
    blocks = [p for p in pieces if isinstance(p, Block)]
    done, more = _translate_blocks(
        translator, blocks, aligner, escape, fmt != "markdown", beam_size, length_penalty, runner
    )
    notes += more
    translated = iter(done)
    out = []
    for p in pieces:
        d = next(translated) if isinstance(p, Block) else p
        out.append(p.raw if d is None else d)
    return MarkupTranslation(bom + "".join(out), sum(d is not None for d in done), list(dict.fromkeys(notes)))
