"""How the API says no: every refusal is ``{"error": "..."}`` with its status, never a traceback."""

from __future__ import annotations

import json

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import AttnkitError
from . import schema

__all__ = ["ERRORS", "ApiError", "ErrorResponse", "describe", "install_error_handlers"]


class ErrorResponse(JSONResponse):
    """``{"error": ...}`` as JSON that can always be written: a message that quotes the request (an unknown
    model's name) may hold a lone surrogate, which UTF-8 cannot encode; it is written as its JSON escape
    (``\\ud800``), the way the request sent it, instead of failing the answer."""

    def render(self, content) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


class ApiError(Exception):
    """An error the API reports as ``{"error": message}`` with ``status`` (and extra ``headers``, e.g. Retry-After)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def describe(errors) -> str:
    """pydantic's validation errors as one line a person can read."""
    if any(e.get("type") == "json_invalid" for e in errors):
        return "the request body is not valid JSON"
    parts = []
    for e in errors:
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        if e.get("type") == "lone_surrogate":  # "text is not valid Unicode: lone surrogate U+D800 at position 3"
            parts.append(f"{where or 'the body'} {e.get('msg')}")
        else:
            parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
    return "bad request: " + "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    """Every error as ``{"error": ...}``: ours, bad input, validation, HTTP errors, and bugs (500, no traceback)."""

    @app.exception_handler(ApiError)
    def _api_error(request, exc: ApiError):
        return ErrorResponse({"error": str(exc)}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(AttnkitError)
    def _input_error(request, exc: AttnkitError):
        return ErrorResponse({"error": str(exc)}, status_code=getattr(exc, "status", 400))

    @app.exception_handler(RequestValidationError)
    def _invalid(request, exc: RequestValidationError):
        return ErrorResponse({"error": describe(exc.errors())}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    def _http(request, exc: StarletteHTTPException):
        return ErrorResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    @app.exception_handler(Exception)
    def _bug(request, exc: Exception):  # a bug: say so, without a traceback, and keep serving
        return ErrorResponse(
            {"error": f"internal error ({type(exc).__name__}); the server keeps running"}, status_code=500
        )


ERRORS = {
    code: {"model": schema.ApiErrorBody, "description": what}
    for code, what in (
        (400, "empty input, more tokens than the model reads, a malformed image"),
        (401, "no token, or a wrong one (a server that needs one)"),
        (403, "a Host header not of this server, or a request from another origin or site"),
        (404, "an unknown model or scene"),
        (413, "text, tokens, beam work, image, answer or body over its limit"),
        (415, "a body that is not JSON, an image that is not a PNG or JPEG"),
        (
            422,
            "malformed JSON, a field of the wrong type, text that is not valid Unicode (a lone surrogate), or "
            "text with no word the model can read (only invisible or control characters)",
        ),
        (499, "the client went away; the job was stopped"),
        (503, "every worker busy and the queue full (Retry-After says when to try again), or a worker died"),
        (504, "a heavy job ran past --job-timeout and was stopped"),
    )
}
