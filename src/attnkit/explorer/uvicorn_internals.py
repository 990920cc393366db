"""The one place attnkit touches ``uvicorn``'s undocumented internals.

``attnkit serve`` bounds its open connections (:mod:`attnkit.explorer.connections`) by subclassing
uvicorn's h11 protocol, ``uvicorn.protocols.http.h11_impl.H11Protocol``, which uvicorn documents only as
the value of ``--http h11``: its module path, its methods ``handle_events`` and ``on_response_complete``
(overridden to start and stop the header clock) and its attributes ``conn`` (the ``h11.Connection``),
``cycle`` (the current request, with ``response_complete``), ``client``, ``loop`` and ``transport`` are
uvicorn's own and may change in any release. :func:`h11_protocol` is the one import of that class; it
fails with a :class:`UvicornInternalsError` naming what is missing and the installed version.
:func:`request_cycle` and :func:`their_state` are the reads of a protocol's current request and of the
client's side of its ``h11`` state.

**Version check.** At import the installed ``uvicorn`` is compared with :data:`SUPPORTED` (the range this
module was written for; the project pins 0.54.0); outside it the import fails with a
:class:`UvicornInternalsError` (one line: the library, the installed version, the range), not a
warning: the subclass overrides the protocol's event handling, and a change there would not fail
loudly but could leave the bounds against idle and trickling connections (slow-loris bounds) silently off, or
break every connection of a running server. ``attnkit serve`` then refuses to start, with that line.
"""

from __future__ import annotations

from typing import Any

from ..errors import AttnkitError
from ..version import installed_version, outside_range

__all__ = ["SUPPORTED", "UvicornInternalsError", "check_version", "h11_protocol", "request_cycle", "their_state"]

#: ``(minimum, below)``: the ``uvicorn`` releases this module was written for (``>=0.29,<1``).
SUPPORTED = ("0.29", "1")

#: The methods of ``H11Protocol`` that the guarded protocol overrides or calls.
PROTOCOL_METHODS = (
    "connection_made",
    "data_received",
    "eof_received",
    "connection_lost",
    "handle_events",
    "on_response_complete",
)


class UvicornInternalsError(AttnkitError, RuntimeError):
    """An internal of ``uvicorn`` that attnkit relies on is missing or has another version than
    :data:`SUPPORTED` names."""


def _missing(what: str) -> UvicornInternalsError:
    low, high = SUPPORTED
    return UvicornInternalsError(
        f"uvicorn {installed_version('uvicorn') or '(not installed)'} has no {what}, which attnkit serve's "
        f"connection bounds rely on (written for uvicorn >={low},<{high}); install a version in that range"
    )


def check_version() -> str | None:
    """Raise a one-line :class:`UvicornInternalsError` (the library, the installed version, the supported
    range) when the installed ``uvicorn`` lies outside :data:`SUPPORTED`; None inside it."""
    message = outside_range("uvicorn", installed_version("uvicorn"), *SUPPORTED)
    if message is not None:
        raise UvicornInternalsError(f"{message}; attnkit serve's connection bounds cannot be trusted with it")
    return None


def h11_protocol() -> type:
    """uvicorn's ``H11Protocol`` class, checked to have the methods :data:`PROTOCOL_METHODS`."""
    try:
        from uvicorn.protocols.http.h11_impl import H11Protocol
    except ImportError:
        raise _missing("uvicorn.protocols.http.h11_impl.H11Protocol") from None
    for name in PROTOCOL_METHODS:
        if not callable(getattr(H11Protocol, name, None)):
            raise _missing(f"H11Protocol.{name}")
    return H11Protocol


def request_cycle(protocol: Any) -> Any:
    """The protocol's current request (``cycle``: None before the first head), or an error when the
    protocol has no such attribute."""
    try:
        return protocol.cycle
    except AttributeError:
        raise _missing("H11Protocol.cycle") from None


def their_state(protocol: Any) -> Any:
    """The client's side of the protocol's ``h11`` connection state (``h11.SEND_BODY`` while a request's
    body is arriving)."""
    conn = getattr(protocol, "conn", None)
    if conn is None or not hasattr(conn, "their_state"):
        raise _missing("H11Protocol.conn (an h11.Connection)")
    return conn.their_state


check_version()
