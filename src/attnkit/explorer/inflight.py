"""A bound on the requests a server handles at once (an ASGI middleware, just inside the guard): beyond
``--limit-concurrency`` requests in flight, one more is answered at once with 503, ``Retry-After: 1`` and
``{"error": ...}``, like every other refusal of the API. It sits inside the guard (:mod:`.guard`), so a
request counts only once its body has arrived: connections that send nothing, or a body a byte at a time,
take no request's place (they meet the bounds of :mod:`.connections` and ``--body-timeout`` instead).
uvicorn's own ``limit_concurrency``, which counted open connections and answered plain text, is not used."""

from __future__ import annotations

import json

__all__ = ["InFlightLimit"]


class InFlightLimit:
    """Counts HTTP requests from their start to their answer's end; the event loop is one thread, so a plain
    counter is exact."""

    def __init__(self, app, limit: int):
        self.app, self.limit, self.in_flight = app, limit, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.in_flight >= self.limit:
            body = json.dumps(
                {
                    "error": f"the server is busy: it is handling {self.in_flight} requests, the most it takes "
                    "at once (--limit-concurrency); try again in a second"
                }
            ).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"1"),
            ]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return None
        self.in_flight += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
