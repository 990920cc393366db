"""The information-flow graph of a decoder-only model's prediction as a self-contained page and an inline
notebook view (no server, no network): ``static/flow.js`` (the explorer page's graph view) and the routes
view's JSON (:func:`attnkit.explorer.lm_view_answer.lm_view_json`) inline in one HTML file.

``attnkit explain --method routes --plot graph.html`` writes it; ``attnkit.show(analysis)`` and the
analysis's ``_repr_html_`` show it in an ``<iframe srcdoc=…>`` as the other notebook views do.
"""

from __future__ import annotations

import html as html_lib
import json
from pathlib import Path

from ..paths import atomic_write_text

__all__ = ["FlowView", "flow_html", "flow_view", "lm_view_html", "table_html"]

STATIC = Path(__file__).resolve().parent / "static"


def _json(obj) -> str:
    """JSON for inside a ``<script>``: ``<`` escaped, so no ``</script>`` can end it early."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def flow_html(data: dict) -> str:
    """The page of the routes view ``data`` (its JSON, with a ``graph``): every script and style inline."""
    if not isinstance(data, dict) or not isinstance(data.get("graph"), dict):
        raise ValueError("data must be the routes view's JSON (lm_view_json(analysis) with a 'graph')")
    script = (STATIC / "flow.js").read_text(encoding="utf-8").replace("</script", "<\\/script")
    title = html_lib.escape(f"{data.get('model', '')}: information-flow routes")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:1em}.flow-current{font-weight:bold;"
        "background:#fff3c4}.flow-lens-table td,.flow-lens-table th{padding:2px 8px;text-align:left}"
        ".flow-attention{padding-left:2em}.flow-piece{display:inline-block;min-width:6em}</style>"
        f'</head><body><h1 style="font-size:1.1em">{title}</h1><div id="flow"></div>'
        f"<script>{script}</script>"
        f"<script>window.ATTNKIT_FLOW = {_json(data)};"
        "AttnkitFlow.render(document.getElementById('flow'), window.ATTNKIT_FLOW);</script>"
        "</body></html>\n"
    )


class FlowView:
    """The routes view as an inline page: ``_repr_html_`` (an iframe), ``html`` (the page), ``save(path)``."""

    def __init__(self, data: dict, *, height: int | None = None):
        self.data = data
        self.height = height or min(1400, 420 + 56 * int(data["graph"]["layers"]))

    @property
    def html(self) -> str:
        """The page (:func:`flow_html`)."""
        return flow_html(self.data)

    def save(self, path: str | Path) -> Path:
        """Write the page to ``path`` (atomically); returns the path."""
        out = atomic_write_text(path, self.html)
        out.chmod(0o644)  # a page to open and share
        return out

    def _repr_html_(self) -> str:
        return (
            f'<iframe class="attnkit-view" srcdoc="{html_lib.escape(self.html, quote=True)}" '
            f'style="width: 100%; height: {self.height}px; border: 1px solid #ddd; resize: vertical"></iframe>'
        )


def flow_view(data: dict) -> FlowView:
    """A :class:`FlowView` of the routes view's JSON ``data``."""
    flow_html(data)  # checked now, not at the first display
    return FlowView(data)


def _table(head: list[str], rows: list[list[str]]) -> str:
    cell = html_lib.escape
    out = ['<table class="attnkit-lm-view"><tr>', *(f"<th>{cell(h)}</th>" for h in head), "</tr>"]
    for r in rows:
        out += ["<tr>", *(f"<td>{cell(c)}</td>" for c in r), "</tr>"]
    return "".join([*out, "</table>"])


def table_html(data: dict) -> str:
    """The logit lens or the direct logit attribution of ``data`` (an
    :class:`~attnkit.service.LMViewAnalysis`'s JSON) as an HTML table, for a notebook."""
    pos, token = data["position"], data["token"]["piece"]
    if data.get("lens") is not None:
        caption = f"logit lens at position {pos}, predicting {token!r} (nostalgebraist 2020)"
        rows = [
            [
                "embeddings" if r["layer"] == 0 else str(r["layer"]),
                str(r["rank"]),
                ", ".join(f"{t['piece']} ({t['logit']:.2f})" for t in r["top"]),
            ]
            for r in data["lens"]
        ]
        return f"<p>{html_lib.escape(caption)}</p>" + _table(["layer", "rank of the prediction", "top tokens"], rows)
    d = data["direct_logit"]
    heads = len(d["layers"][0]["heads"]) if d["layers"] else 0
    caption = (
        f"direct logit attribution of {token!r} at position {pos}: logit {d['logit']:.4f} = the terms below + "
        f"embedding {d['embedding']:.4f} + final norm's bias {d['norm_bias']:.4f}"
    )
    rows = [
        [str(r["layer"]), *(f"{v:.4f}" for v in r["heads"]), f"{r['out_bias']:.4f}", f"{r['mlp']:.4f}"]
        for r in d["layers"]
    ]
    head = ["layer", *(f"head {h + 1}" for h in range(heads)), "out bias", "MLP"]
    return f"<p>{html_lib.escape(caption)}</p>" + _table(head, rows)


def lm_view_html(analysis) -> str:
    """An :class:`~attnkit.service.LMViewAnalysis` in a notebook: the routes as the graph page (an iframe),
    the logit lens and the direct logit attribution as tables."""
    from .lm_view_answer import lm_view_json

    data = lm_view_json(analysis)
    return flow_view(data)._repr_html_() if "graph" in data else table_html(data)
