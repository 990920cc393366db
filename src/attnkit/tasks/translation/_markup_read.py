"""Reading a document into blocks for :mod:`attnkit.tasks.translation.markup`: HTML (the standard library's
:mod:`html.parser`), XML (expat), Markdown (``markdown-it-py``) and XLIFF's sources, each token with its own
source text so that what is not translated comes back byte for byte. No regular expression reads markup."""

from __future__ import annotations

import bisect
import xml.parsers.expat
from dataclasses import dataclass
from html.parser import HTMLParser

from ...errors import InputError

__all__ = [
    "XLIFF_UNITS",
    "Block",
    "Token",
    "html_tokens",
    "local_name",
    "markdown_pieces",
    "runs",
    "xliff_block",
    "xml_events",
    "xml_tokens",
]

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


# ---------------------------------------------------------------- tokens
@dataclass
class Token:
    """One piece of the document: ``kind`` text, open, close, atom (an empty element or an untranslated
    unit, placed as a point) or other (a block boundary); ``raw`` its source text."""

    kind: str
    raw: str
    name: str = ""
    inline: bool = True
    line: int = 1


@dataclass
class Block:
    """A run of text and inline tokens: translated when it holds a word, else kept as ``raw``."""

    tokens: list[Token]
    raw: str


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
    """html.parser's events with their character offsets (the parser's own repairs: none; see :func:`runs`)."""

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


def html_tokens(text: str) -> list[Token]:
    """The tokens of an HTML document, inline or block by the element's name (html.parser repairs nothing: :func:`attnkit.tasks.translation._markup_block.read_block` does)."""
    p = _HTMLEvents(text)
    p.feed(text)
    p.close()
    if not p.events or p.events[0][0] != 0:  # nothing before the first event is lost
        p.events.insert(0, (0, "text", "", {}))
    events = _sliced(text, p.events)
    return _collapse(events, text, [e[2] in _HTML_INLINE for e in events])


# ---------------------------------------------------------------- XML
def xml_events(text: str) -> list[tuple[str, str, str, dict, int]]:
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


def xml_tokens(text: str) -> list[Token]:
    """The tokens of an XML document: an element is inline when an element around it holds text of its own (mixed content)."""
    merged = xml_events(text)
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


def _collapse(events, text: str, inline_tags: list[bool], *, xml: bool = False) -> list[Token]:
    """Tokens of the sliced events (``inline_tags``: whether each, when a tag, sits inside a block): an
    untranslated element (see :func:`_opaque`), with all it holds, one atom; comments atoms; declarations
    block boundaries."""
    starts = _line_starts(text)

    def line_of(at: int) -> int:
        return bisect.bisect_right(starts, at)

    out: list[Token] = []
    k = 0
    while k < len(events):
        kind, raw, name, attrs, at = events[k]
        inline = inline_tags[k] if kind in ("open", "close", "void") else kind != "other"
        if kind == "open" and _opaque(name, attrs, xml):
            depth, j = 1, k + 1
            while j < len(events) and depth:  # to its own close (html.parser nests nothing: count this name)
                depth += {"open": 1, "close": -1}.get(events[j][0], 0) * (xml or events[j][2] == name)
                j += 1
            out.append(Token("atom", "".join(e[1] for e in events[k:j]), name, inline, line_of(at)))
            k = j
            continue
        tok_kind = {"comment": "atom", "void": "atom"}.get(kind, kind)
        out.append(Token(tok_kind, raw, name, inline, line_of(at)))
        k += 1
    return out


def runs(tokens: list[Token]) -> list[Block | str]:
    """The document as kept text and blocks (maximal runs of text and inline tokens)."""
    out: list[Block | str] = []
    run: list[Token] = []

    def flush():
        if run:
            out.append(Block(list(run), "".join(t.raw for t in run)))
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
def markdown_pieces(text: str) -> tuple[list[Block | str], list[str]]:
    """The document as kept text and blocks (each inline token of markdown-it whose source it can find)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    md.normalizeLink = lambda url: url  # link targets exactly as written
    md.normalizeLinkText = lambda url: url
    starts = [*_line_starts(text), len(text)]
    pieces: list[Block | str] = []
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
        pieces.append(Block(_markdown_inline(tok.children or [], tok.map[0] + 1), text[at:end]))
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


def _markdown_inline(children, line: int) -> list[Token]:
    out: list[Token] = []
    k = 0
    while k < len(children):
        c = children[k]
        if c.type in ("text", "text_special"):
            out.append(Token("text", c.content, line=line))
        elif c.type in ("softbreak", "hardbreak"):
            out.append(Token("text", " ", line=line))
        elif c.type == "code_inline":
            out.append(Token("atom", f"{c.markup}{c.content}{c.markup}", "code", line=line))
        elif c.type == "html_inline":
            out.append(Token("atom", c.content, "html", line=line))
        elif c.type == "image":
            title = c.attrGet("title")
            target = c.attrGet("src") + (f' "{title}"' if title else "")
            out.append(Token("atom", f"![{c.content}]({target})", "img", line=line))
        elif c.type == "link_open" and c.markup == "autolink":
            j = k
            while children[j].type != "link_close":
                j += 1
            out.append(Token("atom", f"<{children[k + 1].content}>", "a", line=line))
            k = j
        elif c.type == "link_open":
            out.append(Token("open", "[", "a", line=line))
            title = c.attrGet("title")
            close = f"]({c.attrGet('href')}" + (f' "{title}"' if title else "") + ")"
            out.append(Token("pending", close, "a", line=line))  # replaced by its close below
        elif c.type == "link_close":
            pending = next(t for t in reversed(out) if t.kind == "pending")
            out.remove(pending)
            out.append(Token("close", pending.raw, "a", line=line))
        elif c.type.endswith("_open"):
            out.append(Token("open", c.markup, c.type[:-5], line=line))
        elif c.type.endswith("_close"):
            out.append(Token("close", c.markup, c.type[:-6], line=line))
        else:
            out.append(Token("atom", c.content, c.type, line=line))
        k += 1
    return out


# ---------------------------------------------------------------- XLIFF
#: XLIFF inline elements that wrap text (1.2 ``<g>``, ``<mrk>``; 2.x ``<pc>``, ``<mrk>``): tags to move.
_XLIFF_PAIRED = frozenset({"g", "mrk", "pc"})
#: The units whose ``<source>`` is translated: 1.2 ``<trans-unit>``, 2.x ``<segment>`` (inside ``<unit>``).
XLIFF_UNITS = frozenset({"trans-unit", "segment"})


def local_name(name: str) -> str:
    """An element's name without its namespace prefix (``xliff:source`` -> ``source``)."""
    return name.rsplit(":", 1)[-1]


def xliff_block(events: list[tuple[str, str, str, dict, int]], text: str) -> Block:
    """A ``<source>``'s content as a block: ``<g>``/``<pc>``/``<mrk>`` tags to move, every other inline
    element (``<x/>``, ``<bx/>``, ``<ex/>``, ``<ph>``, ``<bpt>``, ``<ept>``, ``<it>``, ``<sc/>``, ``<ec/>``, and
    anything marked ``translate="no"``) one unit with what it holds, never translated."""
    starts = _line_starts(text)
    tokens: list[Token] = []
    k = 0
    while k < len(events):
        kind, raw, name, attrs, at = events[k]
        line = bisect.bisect_right(starts, at)
        local = local_name(name)
        if kind == "open" and (local not in _XLIFF_PAIRED or _opaque(name, attrs, True)):
            depth, j = 1, k + 1
            while j < len(events) and depth:
                depth += {"open": 1, "close": -1}.get(events[j][0], 0)
                j += 1
            tokens.append(Token("atom", "".join(e[1] for e in events[k:j]), local, line=line))
            k = j
            continue
        tokens.append(
            Token({"void": "atom", "comment": "atom", "other": "atom"}.get(kind, kind), raw, local, line=line)
        )
        k += 1
    return Block(tokens, "".join(e[1] for e in events))
