"""Self-contained HTML: the explorer page with its scripts, styles and data inline, which opens offline.

One way to build it, in two steps:

1. :func:`page_template` (here, the only place that inlines assets): ``index.html`` with every
   ``<link rel="stylesheet" href="static/…">`` and ``<script src="static/…"></script>`` replaced by the
   file's text, and one script with two slots, ``window.ATTNKIT_DATA = <data slot>`` and
   ``window.ATTNKIT_TEMPLATE = <template slot>``. A tag the rule does not recognise is an error, so a
   new asset cannot be left out silently.
2. :func:`fill_page`: the template with the data's JSON in the first slot and the template's own JSON
   in the second (so an exported page can export again). The page's export button does only this
   step (``fillPage`` in ``static/export.js``, with the template the server gives at
   ``/api/page-template`` or the one an exported page carries); a browser test checks that it writes
   the same bytes as this function.

``attnkit translate --html``, ``attnkit caption --html``, the demo, the notebook views
(:mod:`attnkit.attribution.notebook`) and the page's export buttons all come out of these two steps.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from ..paths import atomic_write_text
from .schema import ExplorerData

__all__ = ["DATA_SLOT", "TEMPLATE_SLOT", "fill_page", "page_template", "standalone_html", "write_explorer_html"]

STATIC = Path(__file__).resolve().parent / "static"
DATA_SLOT = "/*attnkit:data*/null"
TEMPLATE_SLOT = "/*attnkit:template*/null"
_ASSET = re.compile(r'<link rel="stylesheet" href="static/([\w.-]+)">|<script src="static/([\w.-]+)"></script>')
_EXTERNAL = re.compile(r"<link\b[^>]*\bhref=(?![\"']data:)|<script\b[^>]*\bsrc=(?![\"']data:)", re.IGNORECASE)


def _json(obj) -> str:
    """JSON for inside a ``<script>``: compact, UTF-8, ``<`` escaped (no ``</script>`` can end it early)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def _inline(match: re.Match) -> str:
    css, js = match.groups()
    if css is not None:
        return f'<style data-asset="{css}">{(STATIC / css).read_text(encoding="utf-8")}</style>'
    text = (STATIC / js).read_text(encoding="utf-8").replace("</script", "<\\/script")
    return f'<script data-asset="{js}">{text}</script>'


@lru_cache(maxsize=1)
def _template_for(stamp: tuple) -> str:
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    first = _ASSET.search(html, html.index("</head>")) if "</head>" in html else None
    if first is None:
        raise RuntimeError("index.html has no static/ script after </head>: nothing to inline")
    slots = f"<script>window.ATTNKIT_DATA = {DATA_SLOT};\nwindow.ATTNKIT_TEMPLATE = {TEMPLATE_SLOT};</script>\n"
    html = html[: first.start()] + slots + html[first.start() :]
    out = _ASSET.sub(_inline, html)
    left = _EXTERNAL.search(out)
    if left is not None:
        raise RuntimeError(f"index.html loads an asset the inlining rule does not know: {out[left.start() :][:80]!r}")
    for slot in (DATA_SLOT, TEMPLATE_SLOT):
        if out.count(slot) != 1:
            raise RuntimeError(f"the page template must hold {slot} exactly once, found {out.count(slot)}")
    return out


def page_template() -> str:
    """The self-contained page with empty data and template slots (see the module docstring)."""
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(STATIC.iterdir()))
    return _template_for(stamp)


def fill_page(template: str, data_json: str) -> str:
    """``template`` with ``data_json`` (JSON text) in its data slot and its own JSON in its template slot."""
    head, rest = template.split(DATA_SLOT, 1)
    mid, tail = rest.split(TEMPLATE_SLOT, 1)
    return head + data_json + mid + _json(template) + tail


def standalone_html(data: dict) -> str:
    """The page with ``data`` (an :class:`~attnkit.explorer.schema.ExplorerData` as JSON: the
    payloads of :mod:`attnkit.explorer.payload`) inline: no server, no network."""
    return fill_page(page_template(), _json(data))


def write_explorer_html(
    path: str | Path,
    *,
    translations: list | None = None,
    captions: list | None = None,
    models: list | None = None,
    self_attention: list | None = None,
    head_steps: list | None = None,
    continuations: list | None = None,
) -> Path:
    """Write the offline page for these answers (the schema's objects, or their JSON) to ``path`` (atomically);
    returns the path. ``continuations``: a decoder-only model's contexts and continuations. ``head_steps``:
    step-throughs of chosen heads (:meth:`attnkit.service.head_step.HeadStep.to_dict`), drawn with their knobs, which
    recompute in the page offline as they do served."""
    data = ExplorerData.model_validate(
        {
            "models": models or [],
            "translations": translations or [],
            "captions": captions or [],
            "self_attention": self_attention or [],
            "head_steps": head_steps or [],
            "continuations": continuations or [],
        }
    )  # the API's format, checked
    out = atomic_write_text(path, standalone_html(data.model_dump(mode="json")))
    out.chmod(0o644)  # a page to open and share, not a private temporary
    return out
