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
"""

from __future__ import annotations

import bisect
import html
import xml.parsers.expat
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser

from ...alignment.markup import TagSpan, project_spans
from ...data.text import UnreadableTextError
from ...errors import InputError

__all__ = [
    "FORMATS",
    "MarkupTranslation",
    "decode_document",
    "default_aligner",
    "split_document",
    "translate_document",
]

FORMATS = ("html", "xml", "markdown", "xliff")

#: HTML elements inside a block (text-level semantics); every other element starts or ends a block.
_HTML_INLINE = frozenset(
    [
        "a",
        "abbr",
        "b",
        "bdi",
        "bdo",
        "big",
        "br",
        "cite",
        "code",
        "data",
        "del",
        "dfn",
        "em",
        "font",
        "i",
        "img",
        "ins",
        "kbd",
        "mark",
        "q",
        "s",
        "samp",
        "small",
        "span",
        "strike",
        "strong",
        "sub",
        "sup",
        "time",
        "tt",
        "u",
        "var",
        "wbr",
    ]
)
_HTML_VOID = frozenset(
    ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"]
)
#: Elements whose content is never translated (carried as one unit).
_OPAQUE = frozenset(["code", "kbd", "samp", "pre", "script", "style", "textarea"])
_SENTENCE_END = (".", "!", "?")
_CLOSING_QUOTES = "\"'”»)"
_PUNCT = ".,;:!?¡¿\"'“”«»()[]-"


# ---------------------------------------------------------------- tokens
@dataclass
class _Token:
    """One piece of the document: ``kind`` text, open, close, atom (an empty element or an untranslated
    unit, placed as a point) or other (a block boundary); ``raw`` its source text."""

    kind: str
    raw: str
    name: str = ""
    inline: bool = True
    line: int = 1


@dataclass
class _Block:
    """A run of text and inline tokens: translated when it holds a word, else kept as ``raw``."""

    tokens: list[_Token]
    raw: str


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


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for k, ch in enumerate(text):
        if ch == "\n":
            starts.append(k + 1)
    return starts


def _sliced(text: str, events: list[tuple[int, str, str, dict]]) -> list[tuple[str, str, str, dict, int]]:
    """Each ``(offset, kind, name, attrs)`` event with its source text: up to the next event's offset."""
    out = []
    for k, (at, kind, name, attrs) in enumerate(events):
        end = events[k + 1][0] if k + 1 < len(events) else len(text)
        out.append((kind, text[at:end], name, attrs, at))
    return out


# ---------------------------------------------------------------- HTML
class _HTMLEvents(HTMLParser):
    """html.parser's events with their character offsets (the parser's own repairs: none; see :func:`_runs`)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.starts = _line_starts(text)
        self.events: list[tuple[int, str, str, dict]] = []

    def _at(self) -> int:
        line, col = self.getpos()
        return self.starts[line - 1] + col

    def handle_starttag(self, tag, attrs):
        kind = "void" if tag in _HTML_VOID else "open"
        self.events.append((self._at(), kind, tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.events.append((self._at(), "void", tag, dict(attrs)))

    def handle_endtag(self, tag):
        self.events.append((self._at(), "close", tag, {}))

    def handle_data(self, data):
        self.events.append((self._at(), "text", "", {}))

    def handle_comment(self, data):
        self.events.append((self._at(), "comment", "", {}))

    def handle_decl(self, decl):
        self.events.append((self._at(), "other", "", {}))

    handle_pi = unknown_decl = handle_decl


def _html_tokens(text: str) -> list[_Token]:
    p = _HTMLEvents(text)
    p.feed(text)
    p.close()
    if not p.events or p.events[0][0] != 0:  # nothing before the first event is lost
        p.events.insert(0, (0, "text", "", {}))
    events = _sliced(text, p.events)
    return _collapse(events, text, [e[2] in _HTML_INLINE for e in events])


# ---------------------------------------------------------------- XML
def _xml_events(text: str) -> list[tuple[str, str, str, dict, int]]:
    """expat's events of a well-formed XML document as ``(kind, source text, name, attributes, offset)``, an
    empty element ``<x/>`` one ``void`` event; not well-formed is a one-line InputError with line and column."""
    data = text.encode("utf-8")
    p = xml.parsers.expat.ParserCreate(encoding="UTF-8")
    events: list[tuple[int, str, str, dict]] = []
    p.StartElementHandler = lambda n, a: events.append((p.CurrentByteIndex, "open", n, a))
    p.EndElementHandler = lambda n: events.append((p.CurrentByteIndex, "close", n, {}))
    p.CharacterDataHandler = lambda t: events.append((p.CurrentByteIndex, "text", "", {}))
    p.CommentHandler = lambda t: events.append((p.CurrentByteIndex, "comment", "", {}))
    p.DefaultHandler = lambda t: events.append((p.CurrentByteIndex, "other", "", {}))
    try:
        p.Parse(data, True)
    except xml.parsers.expat.ExpatError as exc:
        raise InputError(
            f"not well-formed XML: {xml.parsers.expat.ErrorString(exc.code)} at line {exc.lineno}, column {exc.offset + 1}"
        ) from None
    chars, last_byte, last_char = [], 0, 0  # byte offsets -> character offsets (events come in order)
    for at, *rest in events:
        last_char += len(data[last_byte:at].decode("utf-8"))
        last_byte = at
        chars.append((last_char, *rest))
    events = chars
    if not events or events[0][0] != 0:
        events.insert(0, (0, "text", "", {}))
    sliced = _sliced(text, events)
    merged = []  # an empty element <x/>: its start holds the text, its end none
    for ev in sliced:
        if ev[0] == "close" and ev[1] == "" and merged and merged[-1][0] == "open" and merged[-1][2] == ev[2]:
            merged[-1] = ("void", *merged[-1][1:])
        elif ev[1] or ev[0] != "text":
            merged.append(ev)
    return merged


def _xml_tokens(text: str) -> list[_Token]:
    merged = _xml_events(text)
    # an element is inline when an element enclosing it holds text of its own (mixed content)
    has_text, stack = set(), []
    for k, (kind, raw, _name, _, _) in enumerate(merged):
        if kind == "open":
            stack.append(k)
        elif kind == "close" and stack:
            stack.pop()
        elif kind == "text" and raw.strip() and stack:
            has_text.add(stack[-1])
    inline_at: dict[int, bool] = {}
    stack = []
    for k, (kind, *_) in enumerate(merged):
        if kind in ("open", "void"):
            inline_at[k] = any(s in has_text for s in stack)
            if kind == "open":
                stack.append(k)
        elif kind == "close" and stack:
            inline_at[k] = inline_at[stack.pop()]
    return _collapse(merged, text, [inline_at.get(k, False) for k in range(len(merged))], xml=True)


# ---------------------------------------------------------------- shared structure
def _opaque(name: str, attrs: dict, xml: bool) -> bool:
    if attrs.get("translate") == "no" or attrs.get("its:translate") == "no":
        return True
    return not xml and name in _OPAQUE


def _collapse(events, text: str, inline_tags: list[bool], *, xml: bool = False) -> list[_Token]:
    """Tokens of the sliced events (``inline_tags``: whether each, when a tag, sits inside a block): an
    untranslated element (see :func:`_opaque`), with all it holds, one atom; comments atoms; declarations
    block boundaries."""
    starts = _line_starts(text)

    def line_of(at: int) -> int:
        return bisect.bisect_right(starts, at)

    out: list[_Token] = []
    k = 0
    while k < len(events):
        kind, raw, name, attrs, at = events[k]
        inline = inline_tags[k] if kind in ("open", "close", "void") else kind != "other"
        if kind == "open" and _opaque(name, attrs, xml):
            depth, j = 1, k + 1
            while j < len(events) and depth:  # to its own close (html.parser nests nothing: count this name)
                depth += {"open": 1, "close": -1}.get(events[j][0], 0) * (xml or events[j][2] == name)
                j += 1
            out.append(_Token("atom", "".join(e[1] for e in events[k:j]), name, inline, line_of(at)))
            k = j
            continue
        tok_kind = {"comment": "atom", "void": "atom"}.get(kind, kind)
        out.append(_Token(tok_kind, raw, name, inline, line_of(at)))
        k += 1
    return out


def _runs(tokens: list[_Token]) -> list[_Block | str]:
    """The document as kept text and blocks (maximal runs of text and inline tokens)."""
    out: list[_Block | str] = []
    run: list[_Token] = []

    def flush():
        if run:
            out.append(_Block(list(run), "".join(t.raw for t in run)))
            run.clear()

    for t in tokens:
        if t.kind == "text" or t.inline:
            run.append(t)
        else:
            flush()
            out.append(t.raw)
    flush()
    return out


# ---------------------------------------------------------------- Markdown
def _markdown_pieces(text: str) -> tuple[list[_Block | str], list[str]]:
    """The document as kept text and blocks (each inline token of markdown-it whose source it can find)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    md.normalizeLink = lambda url: url  # link targets exactly as written
    md.normalizeLinkText = lambda url: url
    starts = [*_line_starts(text), len(text)]
    pieces: list[_Block | str] = []
    notes: list[str] = []
    done = 0
    for tok in md.parse(text):
        if tok.type != "inline" or tok.map is None or not tok.content.strip():
            continue
        where = _locate(text, tok.content, starts, tok.map[0], done)
        if where is None:
            notes.append(f"kept the block at line {tok.map[0] + 1} as it was: its source text was not found")
            continue
        at, end = where
        pieces.append(text[done:at])
        pieces.append(_Block(_markdown_inline(tok.children or [], tok.map[0] + 1), text[at:end]))
        done = end
    pieces.append(text[done:])
    return pieces, notes


def _locate(text: str, content: str, starts: list[int], first: int, done: int) -> tuple[int, int] | None:
    """``[start, end)`` of an inline token's ``content`` in the source, from line ``first`` (0-based) on: one
    piece when it stands there as written, else line by line (a paragraph continued in a ``>`` quote or a
    list item, where each line has its own prefix), the prefixes of its later lines then inside the range, so
    that the translation, on one line, replaces them too."""
    lo = max(starts[first], done)
    hi = starts[min(first + content.count("\n") + 1, len(starts) - 1)]
    at = text.find(content, lo, hi)
    if at >= 0:
        return at, at + len(content)
    begin = end = None
    for i, line in enumerate(content.split("\n")):
        row = first + i
        if row + 1 >= len(starts):
            return None
        pos = text.find(line, max(starts[row], end or lo), starts[row + 1])
        if pos < 0:
            return None
        begin = pos if begin is None else begin
        end = pos + len(line)
    return (begin, end) if begin is not None else None


def _markdown_inline(children, line: int) -> list[_Token]:
    out: list[_Token] = []
    k = 0
    while k < len(children):
        c = children[k]
        if c.type in ("text", "text_special"):
            out.append(_Token("text", c.content, line=line))
        elif c.type in ("softbreak", "hardbreak"):
            out.append(_Token("text", " ", line=line))
        elif c.type == "code_inline":
            out.append(_Token("atom", f"{c.markup}{c.content}{c.markup}", "code", line=line))
        elif c.type == "html_inline":
            out.append(_Token("atom", c.content, "html", line=line))
        elif c.type == "image":
            title = c.attrGet("title")
            target = c.attrGet("src") + (f' "{title}"' if title else "")
            out.append(_Token("atom", f"![{c.content}]({target})", "img", line=line))
        elif c.type == "link_open" and c.markup == "autolink":
            j = k
            while children[j].type != "link_close":
                j += 1
            out.append(_Token("atom", f"<{children[k + 1].content}>", "a", line=line))
            k = j
        elif c.type == "link_open":
            out.append(_Token("open", "[", "a", line=line))
            title = c.attrGet("title")
            close = f"]({c.attrGet('href')}" + (f' "{title}"' if title else "") + ")"
            out.append(_Token("pending", close, "a", line=line))  # replaced by its close below
        elif c.type == "link_close":
            pending = next(t for t in reversed(out) if t.kind == "pending")
            out.remove(pending)
            out.append(_Token("close", pending.raw, "a", line=line))
        elif c.type.endswith("_open"):
            out.append(_Token("open", c.markup, c.type[:-5], line=line))
        elif c.type.endswith("_close"):
            out.append(_Token("close", c.markup, c.type[:-6], line=line))
        else:
            out.append(_Token("atom", c.content, c.type, line=line))
        k += 1
    return out


def _escape_markdown(word: str) -> str:
    return "".join("\\" + ch if ch in "\\`*_[]<" else ch for ch in word)


def _escape_markup(word: str) -> str:
    return html.escape(word, quote=False)


# ---------------------------------------------------------------- one block
@dataclass
class _Tagged:
    """A block's words and tags: ``spans`` over the words, each with its open and close text (an atom's
    close is empty), and the whitespace before the first word and after the last."""

    words: list[str]
    spans: list[TagSpan]
    opens: list[str]
    closes: list[str]
    lead: str
    tail: str
    notes: list[str]


def _word_bounds(text: str) -> list[tuple[int, int]]:
    """``[start, end)`` character offsets of the whitespace-separated words of ``text``."""
    bounds, k = [], 0
    while k < len(text):
        if text[k].isspace():
            k += 1
            continue
        j = k
        while j < len(text) and not text[j].isspace():
            j += 1
        bounds.append((k, j))
        k = j
    return bounds


def _tagged(block: _Block, unescape: bool) -> _Tagged:
    """The block's words (whitespace-split text, entities read) and its tags as word spans, repaired."""
    parts: list[str] = []
    at = 0
    marks: list[tuple[int, _Token]] = []  # (character offset, token) of every tag
    for t in block.tokens:
        if t.kind == "text":
            s = html.unescape(t.raw) if unescape else t.raw
            parts.append(s)
            at += len(s)
        else:
            marks.append((at, t))
    text = "".join(parts)
    bounds = _word_bounds(text)
    words = [text[a:b] for a, b in bounds]
    notes: list[str] = []

    def first_word(c: int) -> int:  # the first word that ends after offset c
        return next((w for w, (_, b) in enumerate(bounds) if b > c), len(bounds))

    def end_word(c: int) -> int:  # one past the last word that starts before offset c
        return sum(1 for a, _ in bounds if a < c)

    def inside_word(c: int) -> bool:  # within a word, letters or digits on both sides (not "tierra</i>.")
        return any(a < c < b and text[a:c].strip(_PUNCT) and text[c:b].strip(_PUNCT) for a, b in bounds)

    spans: list[TagSpan] = []
    opens: list[str] = []
    closes: list[str] = []
    names: list[str] = []
    starts: list[int] = []
    stack: list[int] = []

    def add(raw: str, name: str, c: int) -> int:
        w = end_word(c)
        spans.append(TagSpan(w, w, stack[-1] if stack else None))
        opens.append(raw)
        closes.append("")
        names.append(name)
        starts.append(c)
        return len(spans) - 1

    def close(k: int, c: int, raw: str) -> None:
        s, e = first_word(starts[k]), end_word(c)
        if inside_word(starts[k]) or inside_word(c):
            notes.append(f"<{names[k]}> inside a word wraps the whole word")
        spans[k] = TagSpan(s, max(s, e), spans[k].parent)
        closes[k] = raw

    for c, t in marks:
        if t.kind == "open":
            stack.append(add(t.raw, t.name, c))
        elif t.kind == "close":
            match = next((i for i in range(len(stack) - 1, -1, -1) if names[stack[i]] == t.name), None)
            if match is None:
                notes.append(f"kept the stray </{t.name}> of line {t.line} where it was")
                add(t.raw, t.name, c)
                continue
            while len(stack) - 1 > match:
                k = stack.pop()
                notes.append(f"closed <{names[k]}> before </{t.name}> (line {t.line})")
                close(k, c, f"</{names[k]}>")
            close(stack.pop(), c, t.raw)
        else:  # an empty element or an untranslated unit: a point
            add(t.raw, t.name, c)
    while stack:
        k = stack.pop()
        notes.append(f"closed <{names[k]}> left open at the end of its block")
        close(k, len(text), f"</{names[k]}>")
    # a tag's children were placed while it was open: keep them inside its final span
    fixed = list(spans)
    for k, s in enumerate(fixed):
        if s.parent is not None:
            p = fixed[s.parent]
            a = min(max(s.start, p.start), p.end)
            fixed[k] = TagSpan(a, min(max(s.end, a), p.end), s.parent)
    lead = text[: bounds[0][0]] if bounds else text
    tail = text[bounds[-1][1] :] if bounds else ""
    return _Tagged(words, fixed, opens, closes, lead, tail, notes)


def _emit(target: list[str], tagged: _Tagged, spans: list[tuple[int, int]], escape: Callable[[str], str]) -> str:
    """The target words with the tags at ``spans`` (a valid tree), opens and closes as written. One space
    separates words; where tags sit between two words it goes after the closing ones and before the
    opening ones, and on both sides of a tag that wraps no word."""
    children: dict[int | None, list[int]] = {}
    for k, s in enumerate(tagged.spans):
        children.setdefault(s.parent, []).append(k)

    def kids(parent: int | None) -> list[int]:
        return sorted(children.get(parent, []), key=lambda k: (spans[k][0], spans[k][1], k))

    def subtree(k: int) -> str:
        return tagged.opens[k] + "".join(subtree(c) for c in kids(k)) + tagged.closes[k]

    items: list[tuple[str, str]] = []  # ("w", a word or a tag wrapping no word), ("o", open), ("c", close)

    def walk(parent: int | None, lo: int, hi: int) -> None:
        pos = lo
        for k in kids(parent):
            s, e = spans[k]
            items.extend(("w", escape(target[j])) for j in range(pos, s))
            if s == e:
                items.append(("w", subtree(k)))
            else:
                items.append(("o", tagged.opens[k]))
                walk(k, s, e)
                items.append(("c", tagged.closes[k]))
            pos = e
        items.extend(("w", escape(target[j])) for j in range(pos, hi))

    walk(None, 0, len(target))
    out: list[str] = []
    gap: list[tuple[str, str]] = []
    seen = False
    for kind, s in items:
        if kind != "w":
            gap.append((kind, s))
            continue
        if seen:
            out += [x for g, x in gap if g == "c"] + [" "] + [x for g, x in gap if g == "o"]
        else:
            out += [x for _, x in gap]
        gap = []
        out.append(s)
        seen = True
    out += [x for _, x in gap]
    return tagged.lead + "".join(out) + tagged.tail


# ---------------------------------------------------------------- XLIFF
#: XLIFF inline elements that wrap text (1.2 ``<g>``, ``<mrk>``; 2.x ``<pc>``, ``<mrk>``): tags to move.
_XLIFF_PAIRED = frozenset({"g", "mrk", "pc"})
#: The units whose ``<source>`` is translated: 1.2 ``<trans-unit>``, 2.x ``<segment>`` (inside ``<unit>``).
_XLIFF_UNITS = frozenset({"trans-unit", "segment"})


def _local(name: str) -> str:
    return name.rsplit(":", 1)[-1]


def _xliff_block(events: list[tuple[str, str, str, dict, int]], text: str) -> _Block:
    """A ``<source>``'s content as a block: ``<g>``/``<pc>``/``<mrk>`` tags to move, every other inline
    element (``<x/>``, ``<bx/>``, ``<ex/>``, ``<ph>``, ``<bpt>``, ``<ept>``, ``<it>``, ``<sc/>``, ``<ec/>``, and
    anything marked ``translate="no"``) one unit with what it holds, never translated."""
    starts = _line_starts(text)
    tokens: list[_Token] = []
    k = 0
    while k < len(events):
        kind, raw, name, attrs, at = events[k]
        line = bisect.bisect_right(starts, at)
        local = _local(name)
        if kind == "open" and (local not in _XLIFF_PAIRED or _opaque(name, attrs, True)):
            depth, j = 1, k + 1
            while j < len(events) and depth:
                depth += {"open": 1, "close": -1}.get(events[j][0], 0)
                j += 1
            tokens.append(_Token("atom", "".join(e[1] for e in events[k:j]), local, line=line))
            k = j
            continue
        tokens.append(
            _Token({"void": "atom", "comment": "atom", "other": "atom"}.get(kind, kind), raw, local, line=line)
        )
        k += 1
    return _Block(tokens, "".join(e[1] for e in events))


def _translate_xliff(translator, text: str, aligner, beam_size: int, length_penalty) -> tuple[str, int, list[str]]:
    """XLIFF 1.2 or 2.x: each unit's ``<source>`` translated, its inline tags moved, into its ``<target>`` (its
    content replaced, its own attributes kept) or a new ``<target>`` after the source, indented as the source
    is. The sources, and everything else, stay as written; a unit marked ``translate="no"`` is skipped."""
    events = _xml_events(text)
    units: list[tuple[int, int, tuple[str, int, int] | None]] = []  # (source open, close, target)
    stack: list[tuple[str, bool]] = []  # (local name, translate="no" here or above)
    unit: dict | None = None
    for k, (kind, _raw, name, attrs, _at) in enumerate(events):
        local = _local(name)
        in_unit = unit is not None and bool(stack) and stack[-1][0] in _XLIFF_UNITS
        if kind == "void" and local == "target" and in_unit:
            unit["target"] = ("void", k, k)
        elif kind == "open":
            if in_unit and local == "source":
                unit["source"] = [k, None]
            elif in_unit and local == "target":
                unit["target"] = ["open", k, None]
            no = (stack[-1][1] if stack else False) or attrs.get("translate") == "no"
            stack.append((local, no))
            if local in _XLIFF_UNITS:
                unit = {"no": no, "source": None, "target": None}
        elif kind == "close" and stack:
            stack.pop()
            if unit is None:
                continue
            if local == "source" and unit["source"] and unit["source"][1] is None:
                unit["source"][1] = k
            elif local == "target" and isinstance(unit["target"], list) and unit["target"][2] is None:
                unit["target"][2] = k
            elif local in _XLIFF_UNITS:
                if unit["source"] and unit["source"][1] is not None and not unit["no"]:
                    units.append((*unit["source"], tuple(unit["target"]) if unit["target"] else None))
                unit = None
    blocks = [_xliff_block(events[a + 1 : b], text) for a, b, _ in units]
    done, notes = _translate_blocks(translator, blocks, aligner, _escape_markup, True, beam_size, length_penalty)
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
def split_document(text: str, fmt: str) -> tuple[list[_Block | str], list[str]]:
    """The document as kept text and blocks, and the notes of what the parser could not take as it is (for
    ``html``, ``xml`` and ``markdown``; XLIFF's sources are read by :func:`translate_document` itself)."""
    if fmt not in FORMATS or fmt == "xliff":
        raise InputError(f"format must be one of {', '.join(f for f in FORMATS if f != 'xliff')}, got {fmt!r}")
    if fmt == "markdown":
        return _markdown_pieces(text)
    tokens = _html_tokens(text) if fmt == "html" else _xml_tokens(text)
    return _runs(tokens), []


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


def _translate_blocks(
    translator, blocks: list[_Block], aligner, escape, unescape: bool, beam_size: int, length_penalty
) -> tuple[list[str | None], list[str]]:
    """Each block translated with its tags projected (None: kept as it was, no word to translate), and the
    notes of the repairs made. All blocks' sentences go to the translator and the aligner in one batch each."""
    notes: list[str] = []
    tagged: list[tuple[int, _Tagged, list[tuple[int, int]]]] = []
    for k, p in enumerate(blocks):
        t = _tagged(p, unescape=unescape)
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
    results = (
        translator.translate(sources, beam_size=beam_size, length_penalty=length_penalty, truncate=True)
        if sources
        else []
    )
    targets = [r.translation.split() for r in results]
    pairs = [(s.split(), t) for s, t in zip(sources, targets)]
    links = list(aligner.align(pairs)) if pairs else []
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
        out[k] = _emit(target, t, spans, escape)
    return out, notes


def translate_document(
    translator,
    text: str,
    fmt: str,
    *,
    aligner=None,
    beam_size: int = 5,
    length_penalty: float | None = None,
) -> MarkupTranslation:
    """Translate the document ``text`` in format ``fmt`` (``html``, ``xml`` or ``markdown``; see the module
    docstring) with ``translator`` (a :class:`~attnkit.tasks.translation.Translator`), its tags projected
    by ``aligner`` (a :class:`~attnkit.tasks.translation.alignment.ModelAligner`; default: the translator's
    own default reading, its guided head when it has one)."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""  # a byte-order mark is kept, not read as text
    if aligner is None:
        aligner = default_aligner(translator)
    if fmt == "xliff":
        out, blocks, notes = _translate_xliff(translator, text[len(bom) :], aligner, beam_size, length_penalty)
        return MarkupTranslation(bom + out, blocks, list(dict.fromkeys(notes)))
    pieces, notes = split_document(text[len(bom) :], fmt)
    escape = _escape_markdown if fmt == "markdown" else _escape_markup
    blocks = [p for p in pieces if isinstance(p, _Block)]
    done, more = _translate_blocks(translator, blocks, aligner, escape, fmt != "markdown", beam_size, length_penalty)
    notes += more
    translated = iter(done)
    out = []
    for p in pieces:
        d = next(translated) if isinstance(p, _Block) else p
        out.append(p.raw if d is None else d)
    return MarkupTranslation(bom + "".join(out), sum(d is not None for d in done), list(dict.fromkeys(notes)))
