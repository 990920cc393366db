"""The checks every request passes before any route sees it (an ASGI middleware), in Jupyter's way:

1. **Host**: the ``Host`` header must name this server (localhost, ``127.0.0.1``, ``::1``, the bind
   address, ``--allow-host`` names), so a DNS-rebound name cannot read the answers (403).
2. **Origin**: a request that carries ``Origin`` must come from this very origin (scheme, host and port),
   and a browser's ``Sec-Fetch-Site`` must be ``same-origin`` or ``none``: another web page can neither
   start a job nor read an answer (403).
3. **Token**, when the server has one (any non-loopback bind): ``Authorization: token T`` (or ``Bearer T``),
   ``?token=T``, or the cookie the page gets when opened with ``?token=T``; compared in constant time
   (:func:`hmac.compare_digest`); missing or wrong is 401. The page's scripts and styles are public.
4. **Body**: every POST must be ``application/json`` (415 otherwise: ``text/plain`` and form posts are the
   "simple" requests a browser sends cross-site without asking first), and no body may exceed its route's
   limit: a declared ``Content-Length`` over it is refused before reading, and the body is counted as it
   streams in, so at most the limit is ever held (413); it must arrive within ``--body-timeout`` seconds of
   its head (408).

A refusal does not close the connection (closing with a body unread would reset it, and the client could
lose the answer), except 408 and 413; the rest of a body still arriving after the answer cannot keep the
connection open either: the header clock of :mod:`.connections` runs from the answer's end. The 403 for a wrong ``Host`` lists the allowed names (this machine's host name among them,
on a ``0.0.0.0`` bind) only to a caller who has the token, or on a server without one.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers

from .options import ServeOptions

__all__ = ["PUBLIC_PREFIXES", "Guard", "host_name", "token_cookie"]

PUBLIC_PREFIXES = ("/static/", "/docs-static/")  # the page's own files and Swagger UI's (and /favicon.ico): no secrets
BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def host_name(host: str) -> str:
    """The name in a ``Host`` header, lower case, without the port (``[::1]:8000`` → ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def token_cookie(port: int) -> str:
    """The cookie holding the token (one per port: two servers on one machine keep their own)."""
    return f"attnkit-token-{port}"


async def _refuse(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status in (408, 413):
        headers.append((b"connection", b"close"))  # the rest of the body is not read: the connection goes
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """The ASGI middleware of the module docstring, outermost in the app."""

    def __init__(self, app, options: ServeOptions, token: str | None):
        self.app, self.options, self.token = app, options, token
        self.hosts = options.allowed_hosts()
        self.cookie = token_cookie(options.port)

    def _token_ok(self, headers: Headers, query: bytes) -> bool:
        given = []
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() in ("token", "bearer") and value:
            given.append(value.strip())
        given += parse_qs(query.decode("latin-1")).get("token", [])
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.cookie:
                given.append(value)
        want = self.token.encode()
        return any(hmac.compare_digest(g.encode("utf-8", "replace"), want) for g in given)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if host_name(host) not in self.hosts:
            # the allowed names (this machine's host name among them) only for a caller who may know them
            known = self.token is None or self._token_ok(headers, scope.get("query_string", b""))
            names = f" (allowed: {', '.join(sorted(self.hosts))})" if known else ""
            return await _refuse(
                send,
                403,
                f"the Host header {host!r} is not a name of this server{names}; "
                "add a name with `attnkit serve --allow-host NAME`",
            )
        origin = headers.get("origin")
        if origin is not None:
            o = urlsplit(origin)
            if o.scheme not in ("http", "https") or o.netloc.lower() != host.strip().lower():
                return await _refuse(
                    send,
                    403,
                    f"requests from another origin ({origin}) are refused: this server answers its own page only",
                )
        if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return await _refuse(
                send, 403, "requests from another site are refused: this server answers its own page only"
            )
        path = scope["path"]
        public = path.startswith(PUBLIC_PREFIXES) or path == "/favicon.ico"
        if self.token is not None and not public and not self._token_ok(headers, scope.get("query_string", b"")):
            return await _refuse(
                send,
                401,
                "this server needs its token: send 'Authorization: token TOKEN', or open the URL with "
                "?token=TOKEN that `attnkit serve` printed",
            )
        limit = self.options.caption_body_bytes if path == "/api/caption" else self.options.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return await _refuse(send, 413, f"the body has {declared} bytes; the limit of {path} is {limit} bytes")
        if scope["method"] not in BODY_METHODS:
            return await self.app(scope, receive, send)
        ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype != "application/json":
            return await _refuse(
                send,
                415,
                f"send the body as JSON (Content-Type: application/json), not {ctype or 'no type'}",
            )
        body, more = bytearray(), True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.body_timeout
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11
                return await _refuse(
                    send,
                    408,
                    f"the body did not arrive within {self.options.body_timeout:g} s (--body-timeout); "
                    f"{len(body)} bytes came",
                )
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > limit:
                return await _refuse(send, 413, f"the body has more than {limit} bytes, the limit of {path}")
        delivered = False

        async def replay():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # then the client's disconnect, when it goes

        return await self.app(scope, replay, send)
