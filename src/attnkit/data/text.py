"""The one check of text on its way into a model: valid Unicode, and at least one piece to read.

Every text entry point (the translators' :func:`attnkit.data.tokenizer.encode_sources`, a forced target, the
tokenizers' ``encode``, the explorer's routes, the command line) refuses odd text here with a
:class:`TextError`: an :class:`~attnkit.errors.InputError` (so a ``ValueError`` too) that the server answers
with 422 and the command line prints as one line. Two kinds of text are refused:

- text that is not valid Unicode: a lone surrogate (``"\\ud800"``), which no encoder can write as UTF-8. It
  comes from JSON (``"\\ud800"`` is a valid JSON escape) or from a command-line argument that was not UTF-8
  (Python keeps each such byte as a surrogate ``U+DC80``-``U+DCFF``, PEP 383);
- text the tokenizer reads as nothing: only zero-width characters, a byte-order mark, direction marks or
  control characters, which the tokenizer's normaliser drops. A model cannot read zero positions.

Everything else is valid input: combining characters, right-to-left text, emoji, any script (a tokenizer with
byte fallback spells an unknown character in bytes; others read it as ``<unk>``).
"""

from __future__ import annotations

from ..errors import InputError

__all__ = ["NO_WORD", "TextError", "UnreadableTextError", "check_unicode", "lone_surrogate", "no_readable_word"]

#: what a text the tokenizer reads as nothing is told (after "the text has")
NO_WORD = "no word the model can read (only invisible or control characters)"


class TextError(InputError):
    """Text a model cannot read: not valid Unicode, or nothing left once the tokenizer has normalised it.
    The explorer answers it with ``status`` (422); the command line prints it as one line."""

    status = 422


class UnreadableTextError(TextError):
    """A :class:`TextError` for valid Unicode that the tokenizer reads as no piece at all (only zero-width,
    direction-mark, byte-order-mark or control characters)."""


def lone_surrogate(text: str) -> int | None:
    """The position of the first lone surrogate in ``text`` (a code point ``U+D800``-``U+DFFF``, which a
    Python str can hold and UTF-8 cannot), or None when there is none."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_unicode(text: str, what: str = "the text") -> str:
    """``text`` itself when it is valid Unicode; else a :class:`TextError` naming the first lone surrogate's
    position (0-based, in code points), and the byte it stands for when it is a command-line argument's byte
    that was not UTF-8 (``U+DC80``-``U+DCFF``)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    at = lone_surrogate(text)
    if at is None:
        return text
    code = ord(text[at])
    byte = f" (the byte 0x{code - 0xDC00:02x}: the input is not UTF-8)" if 0xDC80 <= code <= 0xDCFF else ""
    raise TextError(f"{what} is not valid Unicode: lone surrogate U+{code:04X} at position {at}{byte}")


def no_readable_word(what: str = "the text") -> UnreadableTextError:
    """The error for a text the tokenizer reads as no piece at all (raise it)."""
    return UnreadableTextError(f"{what} has {NO_WORD}")
