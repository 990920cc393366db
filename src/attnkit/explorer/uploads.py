"""Request bodies read into memory under a byte limit: an upload is never written to disk, and one
over the limit is refused before any of it is decoded.

The size is checked twice: against the declared ``Content-Length`` before reading, and while the
body streams in (a chunked upload declares none), so at most ``limit`` bytes are ever held. A
``multipart/form-data`` body is parsed as it arrives with python-multipart's streaming parser
(the one Starlette uses), but into memory: Starlette's own form parser spools files over 1 MB to a
temporary file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

__all__ = ["Upload", "UploadError", "read_body"]


class UploadError(Exception):
    """A body the API refuses: ``status`` (400 malformed, 413 too large) and a message for a person."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Upload:
    """A request body: ``files`` (field name → bytes) and ``fields`` (text form fields) for multipart,
    or the raw ``body`` for anything else."""

    multipart: bool
    body: bytes = b""
    files: dict[str, bytes] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)


class _Parts:
    """python-multipart callbacks that keep every part in memory."""

    def __init__(self, out: Upload):
        self.out, self.headers, self.data = out, {}, bytearray()
        self._name, self._value = b"", b""

    def on_part_begin(self) -> None:
        self.headers, self.data = {}, bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def on_header_end(self) -> None:
        self.headers[self._name.lower()] = self._value
        self._name, self._value = b"", b""

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        self.data += data[start:end]

    def on_part_end(self) -> None:
        _, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if b"filename" in options:
            self.out.files[name] = bytes(self.data)
        elif name:
            self.out.fields[name] = bytes(self.data).decode("utf-8", "replace")

    def callbacks(self) -> dict:
        return {
            k: getattr(self, k)
            for k in (
                "on_part_begin",
                "on_header_field",
                "on_header_value",
                "on_header_end",
                "on_part_data",
                "on_part_end",
            )
        }


async def read_body(request, limit: int) -> Upload:
    """Read ``request``'s body (a Starlette request) into memory, refusing more than ``limit`` bytes;
    parse it when it is ``multipart/form-data``."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise UploadError(413, f"the upload has {int(declared)} bytes; the limit is {limit} bytes")
    ctype, options = parse_options_header(request.headers.get("content-type", ""))
    out = Upload(multipart=ctype == b"multipart/form-data")
    parser = None
    if out.multipart:
        if not options.get(b"boundary"):
            raise UploadError(400, "the multipart/form-data upload has no boundary")
        parser = MultipartParser(options[b"boundary"], _Parts(out).callbacks())
    received, body = 0, bytearray()
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit:
                raise UploadError(413, f"the upload has more than {limit} bytes, the limit")
            if parser is not None:
                parser.write(chunk)
            else:
                body += chunk
        if parser is not None:
            parser.finalize()
    except MultipartParseError as exc:
        raise UploadError(400, f"the upload is not well-formed multipart/form-data ({exc})") from None
    out.body = bytes(body)
    return out
