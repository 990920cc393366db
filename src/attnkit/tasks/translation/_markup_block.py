"""One block of :mod:`attnkit.tasks.translation.markup`: its words and its tags as word spans (repaired
where the markup was broken), and the translated block written back with each tag at its projected span."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

from ...alignment.markup import TagSpan
from ._markup_read import Block, Token

__all__ = ["TaggedBlock", "escape_markdown", "escape_markup", "read_block", "write_block"]

_PUNCT = ".,;:!?¡¿\"'“”«»()[]-"


def escape_markdown(word: str) -> str:
    """A translated word as Markdown text: the characters that would start markup escaped with a backslash."""
    return "".join("\\" + ch if ch in "\\`*_[]<" else ch for ch in word)


def escape_markup(word: str) -> str:
    """A translated word as HTML or XML text: ``&``, ``<`` and ``>`` as entities."""
    return html.escape(word, quote=False)


# ---------------------------------------------------------------- one block
@dataclass
class TaggedBlock:
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


def read_block(block: Block, unescape: bool) -> TaggedBlock:
    """The block's words (whitespace-split text, entities read) and its tags as word spans, repaired."""
    parts: list[str] = []
    at = 0
    marks: list[tuple[int, Token]] = []  # (character offset, token) of every tag
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
    return TaggedBlock(words, fixed, opens, closes, lead, tail, notes)


def write_block(
    target: list[str], tagged: TaggedBlock, spans: list[tuple[int, int]], escape: Callable[[str], str]
) -> str:
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
