"""The errors attnkit raises for bad input, as opposed to bugs.

The command line reports an :class:`AttnkitError` as one line on stderr (exit status 2); any
other exception is a bug and keeps its traceback. Each class also derives from the built-in
error a Python caller would expect (``ValueError`` for a bad value), so library users can catch
either.
"""

from __future__ import annotations

import os

__all__ = ["AttnkitError", "ConfigError", "InputError", "TraceError", "no_such_file"]


class AttnkitError(Exception):
    """Base of the errors that describe a problem with the user's input, data or files."""


class ConfigError(AttnkitError, ValueError):
    """A configuration value is out of range or inconsistent (raised when the config is built)."""


class InputError(AttnkitError, ValueError):
    """Input data the user gave cannot be used (empty text, too long, not an image, ...)."""


class TraceError(AttnkitError, ValueError):
    """A model whose blocks cannot be traced: a replayed block does not give the model's own output, or a
    method needs a part (a next-token head, residual blocks) the model does not have."""


def no_such_file(path: str | os.PathLike, what: str = "file") -> str:
    """The one wording, in every command, of an input path that is not there: ``nope.es: no such file``
    (``what``: ``folder`` for a folder)."""
    return f"{os.fspath(path)}: no such {what}"
