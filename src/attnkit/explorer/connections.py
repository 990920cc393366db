"""Open connections that cannot starve the others: the HTTP protocol of ``attnkit serve``, uvicorn's h11
protocol with three bounds added against slow-loris clients (without them, 130 sockets that sent nothing
locked every other client out with 503, for as long as they were held).

1. **Header timeout** (``--header-timeout``): a connection must send a whole request head within this many
   seconds of its opening, or of the end of its previous answer; it is closed otherwise. The clock does
   not restart when bytes arrive, so trickling a header a byte a second does not keep it open. (A body
   then has ``--body-timeout``, which the guard counts, :mod:`.guard`; after an answer, a body still
   arriving counts as waiting for the next head.)
2. **Per-client cap** (``--max-client-connections``): one address (an IPv6 client: its /64 network) may hold
   this many connections at once; one more is closed as soon as it opens.
3. **Total cap** (``--max-connections``): at the cap, a new connection first closes the connection that has
   waited longest without a complete request (no head yet, or a body still arriving); only when every
   open connection is inside a complete request is the newcomer closed instead.

4. **Lingering close**: an answer sent before the request's body was read (413, 408) closes the connection
   only after the client has stopped sending (its end of the stream, or :data:`LINGER_S` seconds), the
   rest read and dropped: closing a socket with unread bytes resets it, and the reset can reach the
   client before the answer does, which then never sees why it was refused (as nginx's ``lingering_close``).

Connections are not requests: ``--limit-concurrency`` counts only requests whose head and body have both
arrived (:mod:`.inflight`, inside the guard), so a connection that never completes a request takes no
request's place. The counters live in one :class:`ConnectionTable` per server, touched only from the
event loop's thread.
"""

from __future__ import annotations

import ipaddress
from collections import Counter

import h11

from .options import ServeOptions
from .uvicorn_internals import h11_protocol, request_cycle, their_state

#: uvicorn's h11 protocol class, which :func:`guarded_protocol` subclasses (through the uvicorn shim).
H11Protocol = h11_protocol()

__all__ = ["LINGER_S", "ConnectionTable", "client_key", "guarded_protocol"]

#: the most seconds a connection answered before its body was read stays open, reading and dropping the rest
LINGER_S = 5.0


def client_key(host: str | None) -> str:
    """Who a connection counts against: its IPv4 address, or the /64 network of an IPv6 one (one machine
    may hold a whole /64)."""
    if not host:
        return "?"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class _LingeringTransport:
    """A connection's transport whose ``close()`` lingers while the request's body is still arriving: the
    answer goes, the write side is shut (FIN), and what the client still sends is read and dropped until it
    ends its stream or :data:`LINGER_S` seconds pass. Everything else is the transport's own."""

    def __init__(self, transport, protocol):
        self._transport, self._protocol, self.lingering = transport, protocol, False

    def __getattr__(self, name):
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        t = self._transport
        if self.lingering or t.is_closing():
            return
        if their_state(self._protocol) is not h11.SEND_BODY or not t.can_write_eof():
            t.close()
            return
        self.lingering = True
        t.write_eof()
        self._protocol.loop.call_later(LINGER_S, t.close)
        t.resume_reading()  # uvicorn pauses reading while a body waits: drain it now


class ConnectionTable:
    """The open connections of one server, by client, with counts of what the bounds did."""

    def __init__(self, options: ServeOptions):
        self.per_client = options.max_client_connections
        self.total = options.max_connections
        self.header_timeout = options.header_timeout
        self.open: set = set()
        self.by_client: Counter = Counter()
        self.refused = 0  # closed at once: over the client's cap, or the total with nothing to evict
        self.evicted = 0  # closed to make room for a newcomer
        self.timed_out = 0  # closed for sending no request head in time

    def stats(self) -> dict:
        return {"open": len(self.open), "refused": self.refused, "evicted": self.evicted, "timed_out": self.timed_out}


def guarded_protocol(options: ServeOptions) -> type[H11Protocol]:
    """A subclass of uvicorn's ``H11Protocol`` with the bounds of the module docstring, for
    ``uvicorn.Config(http=...)``; its table is ``cls.table``."""
    table = ConnectionTable(options)

    class GuardedH11Protocol(H11Protocol):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._key = "?"
            self._counted = False
            self._timer = None
            self._idle_since = 0.0
            self._last_cycle = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(_LingeringTransport(transport, self))
            self._key = client_key(self.client[0] if self.client else None)
            self._idle_since = self.loop.time()
            if table.by_client[self._key] >= table.per_client or (
                len(table.open) >= table.total and not self._evict_one()
            ):
                table.refused += 1
                transport.abort()
                return
            self._counted = True
            table.open.add(self)
            table.by_client[self._key] += 1
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self.transport.lingering:
                return  # the rest of a body that was answered already: dropped
            super().data_received(data)

        def eof_received(self) -> None:
            if self.transport.lingering:
                self.transport._transport.close()  # the client is done sending: close now
                return
            return super().eof_received()

        def connection_lost(self, exc) -> None:
            self._count_out()
            super().connection_lost(exc)

        def _count_out(self) -> None:
            self._disarm()
            if self._counted:
                self._counted = False
                table.open.discard(self)
                table.by_client[self._key] -= 1
                if table.by_client[self._key] <= 0:
                    del table.by_client[self._key]

        # ------------------------------------------------------------ the header clock
        def _arm(self) -> None:
            self._disarm()
            self._idle_since = self.loop.time()
            self._timer = self.loop.call_later(table.header_timeout, self._header_timeout)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _header_timeout(self) -> None:
            self._timer = None
            if self._waiting() and not self.transport.is_closing():
                table.timed_out += 1
                self.transport.close()

        def _waiting(self) -> bool:
            """No complete request on this connection now: no head yet, or only a body still arriving after
            its answer went (a request whose body is being read is the guard's, under --body-timeout)."""
            cycle = request_cycle(self)
            return cycle is None or cycle.response_complete

        def _evict_one(self) -> bool:
            """Close the connection that has waited longest for a complete request; False if none waits."""
            waiting = [c for c in table.open if c._waiting() and not c.transport.is_closing()]
            if not waiting:
                return False
            oldest = min(waiting, key=lambda c: c._idle_since)
            table.evicted += 1
            oldest.transport.close()
            oldest._count_out()  # now, so this newcomer's place is free at once
            return True

        def handle_events(self) -> None:
            super().handle_events()
            cycle = request_cycle(self)
            if cycle is not None and cycle is not self._last_cycle:  # a request head arrived
                self._last_cycle = cycle
                self._disarm()

        def on_response_complete(self) -> None:
            finished = request_cycle(self)
            super().on_response_complete()  # may start a pipelined request already here (handle_events)
            if request_cycle(self) is finished and not self.transport.is_closing():
                self._arm()  # waiting for the next head

    GuardedH11Protocol.table = table
    return GuardedH11Protocol
