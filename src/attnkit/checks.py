"""Range checks for numeric settings, written once for the configs, the library and the command line.

A :class:`Range` says which numbers a setting takes (a lower bound, open or closed, an optional
upper bound, open or closed, and whether it must be an int). The same object is used three ways:

- :func:`check` in library code and in a config's ``__post_init__``: the value, or an error
  ``"{name} must be {range}, got {value!r}"`` (``ValueError`` by default, ``ConfigError`` for configs);
- :func:`check_fields` for a config dataclass whose fields carry their range (``option(..., check=POSITIVE)``),
  so a field's rule lives on the field, next to its default and help;
- :func:`arg_type` as argparse's ``type=``, so a bad ``--beam 0`` is refused when the command line is read,
  before any model is loaded or any work is done.

Every number the command line takes has an upper bound as well as a lower one: a value far beyond any
sensible run (``--beam 1000000000000``, ``--d-model 10**9``) would otherwise be accepted and fail
minutes later as an out-of-memory error, or never finish. The bounds below are generous (several
times what a large run uses) and named for what they bound, so one phrase explains each refusal.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BEAM",
    "CANVAS",
    "COUNT",
    "FRACTION",
    "LAYERS",
    "LEARNING_RATE",
    "LOSS_WEIGHT",
    "MAX_LENGTH",
    "NON_NEGATIVE",
    "NON_NEGATIVE_INT",
    "POSITIVE",
    "POSITIVE_INT",
    "POSITIVE_WEIGHT",
    "PROBABILITY",
    "SECONDS",
    "SEED",
    "STEPS",
    "THREADS",
    "VOCABULARY",
    "WIDTH",
    "Range",
    "arg_type",
    "between",
    "check",
    "check_fields",
]


@dataclass(frozen=True)
class Range:
    """Numbers ``low <= x`` (``low < x`` when ``open_low``), ``x < high`` when ``high`` is set (``x <= high``
    when not ``open_high``); ints only when ``integer``. ``str(range)`` is the phrase an error message uses
    ("an int >= 1", "in [0, 1)", "an int in [1, 256]")."""

    low: float | None = None
    open_low: bool = False
    high: float | None = None
    integer: bool = False
    open_high: bool = True

    def __str__(self) -> str:
        kind = "an int " if self.integer else ""
        if self.high is not None:
            return (
                f"{kind}in {'(' if self.open_low else '['}{_num(self.low)}, {_num(self.high)}"
                f"{')' if self.open_high else ']'}"
            )
        if self.low is None:
            return "an int" if self.integer else "a number"
        return f"{kind}{'>' if self.open_low else '>='} {_num(self.low)}"

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is a number (not a bool) inside the range."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if isinstance(value, float) and math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        if self.high is None:
            return True
        return value < self.high if self.open_high else value <= self.high


def between(low: float, high: float, *, integer: bool = False, open_low: bool = False) -> Range:
    """The closed range ``[low, high]`` (``(low, high]`` with ``open_low``), ints only when ``integer``."""
    return Range(low, open_low=open_low, high=high, integer=integer, open_high=False)


def _num(x: float | None) -> str:
    if x is None:
        return "-inf"
    if float(x).is_integer():
        x = int(x)
        return (
            f"{x:,}".replace(",", "_") if abs(x) >= 100_000 else str(x)
        )  # 1_000_000_000: readable, and a valid literal
    return str(x)


POSITIVE = Range(0, open_low=True)  # > 0: sizes, counts and rates where the field's type already says int or float
POSITIVE_INT = Range(1, integer=True)  # an int >= 1
NON_NEGATIVE = Range(0)  # >= 0
NON_NEGATIVE_INT = Range(0, integer=True)  # an int >= 0
PROBABILITY = Range(0, high=1)  # in [0, 1): dropout, label smoothing
FRACTION = between(0, 1)  # in [0, 1]: a share, a decay, an attention weight

# The bounded ranges of the command line's numbers (see the module docstring):
WIDTH = between(1, 65_536, integer=True)  # a layer's size: embeddings, hidden states, feature maps
LAYERS = between(1, 1000, integer=True)  # layers, heads, and 1-based indices into them
LENGTH_PENALTY = between(0, 10)  # GNMT's α: ((5 + 200) / 6)^10 is ~2e15, past it the ranking is by length alone
BEAM = between(1, 256, integer=True)  # beam sizes: the work of a search grows with the beam
COUNT = between(1, 1_000_000_000, integer=True)  # items to read or use: pairs, scenes, sentences, batch sizes
STEPS = between(1, 1_000_000_000, integer=True)  # optimizer steps, epochs, patience, checkpoints kept
THREADS = between(1, 4096, integer=True)  # threads and worker processes
LEARNING_RATE = between(0, 10, open_low=True)
LOSS_WEIGHT = between(0, 10_000)  # the weight of an auxiliary loss term or a regulariser
SECONDS = between(0, 100_000_000, open_low=True)  # a time budget: about three years at most
SEED = between(0, 2**32 - 1, integer=True)  # what every random generator (numpy's included) takes
POSITIVE_WEIGHT = between(0, 10_000, open_low=True)  # a loss weight that must be on when its option is
MAX_LENGTH = between(1, 100_000, integer=True)  # a sentence's length in tokens or words
VOCABULARY = between(8, 1_000_000, integer=True)  # sentencepiece pieces (8: the specials and a few more)
CANVAS = between(1, 2048, integer=True)  # an image's side in pixels


def check(
    name: str, value: Any, allowed: Range, *, allow_none: bool = False, error: type[Exception] = ValueError
) -> Any:
    """``value`` when it is in ``allowed`` (or ``None`` with ``allow_none``), else ``error`` naming ``name``."""
    if value is None and allow_none:
        return value
    if not allowed.holds(value):
        raise error(f"{name} must be {allowed}{' or None' if allow_none else ''}, got {value!r}")
    return value


def check_fields(config: Any, error: type[Exception] | None = None) -> None:
    """Check every field of the dataclass ``config`` that carries a range (``option(..., check=...)``).

    A field typed ``int`` must hold an int (``float`` fields take ints too); a field typed ``X | None``
    may be ``None``. The error is :class:`attnkit.errors.ConfigError` unless another is given.
    """
    if error is None:
        from .errors import ConfigError

        error = ConfigError
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        allowed = f.metadata.get("check")
        if allowed is None:
            continue
        args = typing.get_args(hints[f.name])
        optional = type(None) in args
        base = next((a for a in args if a is not type(None)), None) if args else hints[f.name]
        value = getattr(config, f.name)
        if base is int and value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise error(f"{f.name} must be an int, got {value!r}")
        check(f.name, value, allowed, allow_none=optional, error=error)


def arg_type(allowed: Range, name: str | None = None, *, integer: bool | None = None):
    """An argparse ``type=`` that parses a number and checks it against ``allowed``.

    The number is an int when ``allowed.integer`` (or ``integer=True``), else a float. A value out of
    range is an ``argparse.ArgumentTypeError`` saying ``"{name} must be {range}, got {value}"`` (argparse
    adds the flag), so the command line refuses it before doing anything.
    """
    as_int = allowed.integer if integer is None else integer

    def parse(text: str):
        try:
            value = int(text) if as_int else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{'an int' if as_int else 'a number'} expected, got {text!r}") from None
        if not allowed.holds(value):
            raise argparse.ArgumentTypeError(f"{name + ' ' if name else ''}must be {allowed}, got {value!r}")
        return value

    parse.__name__ = "int" if as_int else "float"  # argparse names the type in its own messages
    parse.range = allowed  # type: ignore[attr-defined]  # for help texts and for the tests that walk the parser
    return parse
