"""What ``attnkit translate`` does with each line, in one process or in a split job: check that the
model can read it, warn when it looks English, and format its result as printed."""

from __future__ import annotations

import itertools
import json
import sys

from ..data.text import TextError
from .common import CLIError

__all__ = ["_json_line", "_looks_english", "_readable", "_result_text", "_warn_if_english"]


#: Very common English function words: :func:`_looks_english`'s cue.
_COMMON_ENGLISH = frozenset(
    (
        "the",
        "and",
        "of",
        "to",
        "he",
        "his",
        "they",
        "that",
        "was",
        "is",
        "with",
        "for",
        "you",
        "i",
        "it",
        "will",
        "which",
        "who",
        "him",
        "them",
        "have",
        "be",
        "not",
        "this",
        "are",
        "shall",
    )
)
_PUNCTUATION = ".,;:!?\"'()"  # stripped from each end of a word


def _looks_english(text: str) -> bool:
    """A cheap guard: share of very common English function words among the words (over 0.3, of 4 words or
    more). Counted by C-level maps, not a Python step per word: a corpus job checks every line of its file."""
    words = text.lower().split()  # lower-casing makes no space and no stripped punctuation, nor removes one
    if len(words) < 4:
        return False
    hits = sum(map(_COMMON_ENGLISH.__contains__, map(str.strip, words, itertools.repeat(_PUNCTUATION))))
    return hits / len(words) > 0.3


def _readable(tr, inputs: list[tuple[str, str]], *, alone: bool | None = None) -> list[tuple[str, str]]:
    """The inputs ``tr`` can read. One it cannot (only zero-width, direction-mark, byte-order-mark or control
    characters: :class:`attnkit.data.text.TextError`) is named on stderr (``FILE line 3: ...; skipped``) and
    left out, and the others are translated; :func:`cmd_translate` then exits with status 1. Inputs over the
    model's length are left to ``translate`` (an error, or cut with ``--truncate``). ``alone``: whether these
    are all the inputs there are, one of which is then an error (default: when there is one)."""
    alone = len(inputs) == 1 if alone is None else alone
    kept = []
    for where, text in inputs:
        try:
            tr.encode_sources([text], truncate=True)
        except TextError as exc:
            if alone:
                raise CLIError(f"{where}: {exc}") from None
            print(f"attnkit: warning: {where}: {exc}; skipped", file=sys.stderr)
            continue
        kept.append((where, text))
    return kept


def _warn_if_english(tr, sentences: list[str]) -> None:
    """A warning on stderr for each sentence that looks English when the model translates into English."""
    if tr.src_lang == "en" or tr.tgt_lang != "en":
        return
    for s in sentences:
        if _looks_english(s):
            print(
                f"attnkit: warning: this looks like English, but the model translates {tr.language_pair}: {s[:60]!r}",
                file=sys.stderr,
            )


def _result_text(source: str, r, args) -> str:
    """What ``translate`` prints for one sentence, line ends included: the translation (and with
    ``--show-attention`` the top source pieces of each output piece), or with ``--json`` its JSON line."""
    if args.json:
        return json.dumps(_json_line(source, r, attention=args.show_attention), ensure_ascii=False) + "\n"
    if args.show_attention and r.attention is not None:
        from ..viz import format_top_alignments

        return f"{r.translation}\n{format_top_alignments(r.attention, r.source_pieces, r.target_pieces, k=3)}\n"
    return r.translation + "\n"


def _json_line(source: str, r, *, attention: bool) -> dict:
    """``--json``: one translated sentence as one JSON object: the source, the translation, its token ids and
    the search's score (log-probability, length-penalised under beam search); with ``--show-attention`` the
    pieces and the attention ``(T, S)`` that the table's top alignments are read from."""
    out = {"source": source, "translation": r.translation, "tokens": [int(t) for t in r.tokens]}
    out["score"] = round(float(r.score), 6)
    if attention and r.attention is not None:
        out["source_pieces"] = list(r.source_pieces)
        out["target_pieces"] = list(r.target_pieces)
        out["attention"] = [[round(float(v), 5) for v in row] for row in r.attention.tolist()]
    return out
