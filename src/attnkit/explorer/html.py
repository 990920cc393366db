"""Self-contained HTML: the explorer page with its script, style and data inline, which opens offline.

The page's own export button builds the same file in the browser (``standalone`` in ``app.js``);
this is the Python side, for ``attnkit translate --html``, ``attnkit caption --html`` and the demo.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..paths import atomic_write_text
from .schema import ExplorerData

__all__ = ["standalone_html", "write_explorer_html"]

STATIC = Path(__file__).resolve().parent / "static"


def _json(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def standalone_html(data: dict) -> str:
    """The page with ``data`` (an :class:`~attnkit.explorer.schema.ExplorerData` as JSON: the
    payloads of :mod:`attnkit.explorer.payload`) inline: no server, no network."""
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    css = (STATIC / "app.css").read_text(encoding="utf-8")
    js = (STATIC / "app.js").read_text(encoding="utf-8").replace("</script", "<\\/script")
    return html.replace('<link rel="stylesheet" href="static/app.css">', f'<style id="app-css">{css}</style>').replace(
        '<script src="static/app.js"></script>',
        f"<script>window.ATTNKIT_DATA = {_json(data)};\nwindow.ATTNKIT_TEMPLATE = {_json(html)};</script>\n"
        f'<script id="app-js">{js}</script>',
    )


def write_explorer_html(
    path: str | Path, *, translations: list | None = None, captions: list | None = None, models: list | None = None
) -> Path:
    """Write the offline page for these payloads to ``path`` (atomically); returns the path."""
    data = ExplorerData.model_validate(
        {"models": models or [], "translations": translations or [], "captions": captions or []}
    )  # the API's format, checked
    out = atomic_write_text(path, standalone_html(data.model_dump(mode="json")))
    out.chmod(0o644)  # a page to open and share, not a private temporary
    return out
