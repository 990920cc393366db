"""Which pairs of a parallel corpus a prepare keeps, and what it says of the others.

:func:`read_split` reads aligned files or a TSV (:mod:`attnkit.data.parallel`), strips each sentence
and turns its tabs into spaces, and drops the pairs it cannot use, counting each reason
(:data:`DROPPED_REASONS`) and keeping the first line numbers of each: a side empty, a side holding a
NUL byte, a side over ``max_words`` words or over ``max_chars`` characters. Nothing dropped reaches
sentencepiece, whose trainer otherwise stops on such a line with an ``INTERNAL`` error that names no
line. :func:`describe_dropped` turns the counts a prepare wrote into ``meta.json`` into one phrase.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .parallel import read_parallel

__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_WORDS",
    "DROPPED_LINES_KEPT",
    "DROPPED_REASONS",
    "clean",
    "describe_dropped",
    "read_split",
]

#: Pairs with more words than this on either side are dropped (and counted) by default.
DEFAULT_MAX_WORDS = 250
#: Pairs with more characters than this on either side are dropped (and counted) by default: the
#: words cap misses a line with few spaces (a URL list, base64, a script without spaces) that can be
#: megabytes long. 250 words of even long-worded text stay under it.
DEFAULT_MAX_CHARS = 2000
#: Why a pair is dropped, as ``meta.json`` counts it per split: a side empty, a side with a NUL byte,
#: a side over ``max_words`` words, a side over ``max_chars`` characters.
DROPPED_REASONS = ("empty", "nul", "too_long", "too_many_chars")
#: How many line numbers per reason ``meta.json`` keeps (and the command prints).
DROPPED_LINES_KEPT = 5


def clean(text: str) -> str:
    """The sentence stripped, its tabs turned into spaces (a TSV keeps its columns)."""
    return text.replace("\t", " ").strip()


def read_split(
    files: tuple[Path, ...], max_words: int, max_chars: int, dropped: dict, dropped_lines: dict
) -> Iterator[tuple[int, str, str]]:
    """The kept pairs of ``files``, cleaned; the others counted by reason in ``dropped`` (the first
    :data:`DROPPED_LINES_KEPT` line numbers in ``dropped_lines``): see :data:`DROPPED_REASONS`."""
    for lineno, src, tgt in read_parallel(files, allow_nul=True):
        src, tgt = clean(src), clean(tgt)
        if not src or not tgt:
            reason = "empty"
        elif "\0" in src or "\0" in tgt:
            reason = "nul"
        elif len(src) > max_chars or len(tgt) > max_chars:  # before splitting a megabyte line into words
            reason = "too_many_chars"
        elif len(src.split()) > max_words or len(tgt.split()) > max_words:
            reason = "too_long"
        else:
            yield lineno, src, tgt
            continue
        dropped[reason] += 1
        if len(dropped_lines[reason]) < DROPPED_LINES_KEPT:
            dropped_lines[reason].append(lineno)


def describe_dropped(meta: dict, split: str) -> str:
    """One phrase of what a prepare dropped from ``split`` and why, with the first line numbers
    ("2 with a NUL byte (lines 10, 40); 1 over 2000 characters (line 7)"); "nothing" when nothing."""
    counts, lines = meta["dropped"][split], meta.get("dropped_lines", {}).get(split, {})
    what = {
        "empty": "empty on a side",
        "nul": "with a NUL byte",
        "too_long": f"over {meta['max_words']} words",
        "too_many_chars": f"over {meta.get('max_chars')} characters",
    }
    parts = []
    for reason in DROPPED_REASONS:
        n = counts.get(reason, 0)
        if n:
            where = lines.get(reason, [])
            shown = ", ".join(map(str, where)) + (", ..." if n > len(where) else "")
            parts.append(
                f"{n} {what[reason]} ({'line' if n == 1 else 'lines'} {shown})" if where else f"{n} {what[reason]}"
            )
    return "; ".join(parts) or "nothing"
