"""Every number the ``attnkit`` command line takes is bounded on both sides.

The walk below finds every int and float option of every subcommand (hand-written flags and the ones
generated from config fields alike), so a flag added later without a range fails here. Each must
refuse an absurd value (``10**12``, ``-1``; for floats also ``nan`` and ``inf``) the way every other
bad input is refused: exit status 2 and one line on stderr naming the flag and the range, no traceback.
"""

from __future__ import annotations

import argparse
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnkit.checks import Range, arg_type, between
from attnkit.cli import build_parser, main


def _walk(parser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))
        elif action.option_strings and _numeric(action):
            yield path, action


def _numeric(action) -> bool:
    return action.type in (int, float) or getattr(action.type, "__name__", None) in ("int", "float")


NUMERIC = sorted(
    ((" ".join(path), action.option_strings[-1], action) for path, action in _walk(build_parser())),
    key=lambda t: (t[0], t[1]),
)


def test_the_walk_finds_the_numeric_options():
    """The walk is not vacuous: it sees flags of the hand-written parsers and of the config fields."""
    found = {f"{cmd} {flag}" for cmd, flag, _ in NUMERIC}
    assert {
        "caption --beam",
        "translate --beam",
        "train translation --d-model",
        "train translation --seed",
        "train captioning --canvas",
        "data prepare --max-words",
        "data prepare --max-chars",
        "evaluate alignment --samples",
    } <= found
    assert len(NUMERIC) > 80


@pytest.mark.parametrize(("command", "flag", "action"), NUMERIC, ids=[f"{c} {f}" for c, f, _ in NUMERIC])
def test_every_numeric_option_has_a_finite_range(command, flag, action):
    allowed = getattr(action.type, "range", None)
    assert isinstance(allowed, Range), f"attnkit {command} {flag}: a plain {action.type.__name__}, no range"
    assert allowed.low is not None and allowed.high is not None and math.isfinite(allowed.high)
    # the range is not empty, and its ends are accepted by the flag's own parser
    low = allowed.low + (1 if allowed.open_low else 0) if allowed.integer else allowed.low + 0.5 * allowed.open_low
    assert action.type(str(low)) == low
    high = allowed.high - (1 if allowed.open_high else 0) if allowed.integer else allowed.high / (1 + allowed.open_high)
    assert action.type(str(high)) == high
    if action.default is not None:  # a hand-written flag's default is inside its own range
        assert allowed.holds(action.default), f"{command} {flag}: default {action.default!r} outside {allowed}"


@pytest.mark.parametrize(("command", "flag", "action"), NUMERIC, ids=[f"{c} {f}" for c, f, _ in NUMERIC])
def test_every_numeric_option_refuses_absurd_values_in_one_line(command, flag, action, capsys):
    absurd = ["1000000000000", "-1"]
    if action.type is float or action.type.__name__ == "float":
        absurd += ["nan", "inf", "-inf"]
    for value in absurd:
        rc = main([*command.split(), f"{flag}={value}"])
        err = capsys.readouterr().err
        assert rc == 2, f"attnkit {command} {flag}={value}: exit status {rc}"
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith("attnkit: error: ") and flag in lines[0], lines[0]
        assert str(action.type.range) in lines[0], lines[0]  # the message names the range


def test_caption_beam_names_its_bound(capsys):
    assert main(["caption", "x.png", "--beam", "100000"]) == 2
    err = capsys.readouterr().err
    assert "argument --beam: beam must be an int in [1, 256], got 100000" in err


@given(
    low=st.integers(-1000, 1000),
    width=st.integers(0, 1000),
    x=st.one_of(st.integers(-3000, 3000), st.floats(allow_nan=True, allow_infinity=True)),
    open_low=st.booleans(),
    integer=st.booleans(),
)
def test_between_holds_exactly_the_closed_interval(low, width, x, open_low, integer):
    """``between`` against the plain comparison it stands for (ints only when ``integer``)."""
    r = between(low, low + width, integer=integer, open_low=open_low)
    expected = (
        not (integer and not isinstance(x, int))
        and not (isinstance(x, float) and math.isnan(x))
        and (low < x if open_low else low <= x)
        and x <= low + width
    )
    assert r.holds(x) == expected
    assert str(r).endswith(f", {low + width}]")


def test_arg_type_refuses_out_of_range_text():
    parse = arg_type(between(1, 256, integer=True), "beam")
    assert parse("256") == 256
    for text in ("257", "0", "1e3", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
