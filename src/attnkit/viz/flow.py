"""A picture of an information-flow graph (Ferrando & Voita 2024, "Information flow routes"; the LM
Transparency Tool's graph): layers × positions, as a PNG.

The residual stream of each position is a column; row ``l`` (0 = the embeddings, ``L`` = the last
block's output) is the stream between blocks. A head edge of layer ``l`` from position ``j`` to ``i`` is a
line from ``(j, l − 1)`` to ``(i, l)`` whose width is its importance; the residual edge of a position is a
grey vertical line; an MLP node is a square at ``(i, l)`` whose size is its importance. The input is the
graph as JSON (:func:`attnkit.explorer.lm_view_answer.lm_view_json`, layers and positions from 1), so this module
needs no model.
"""

from __future__ import annotations

from typing import Any

from ._common import DEFAULT_DPI, new_figure, save_png, tex_safe

__all__ = ["plot_flow_graph"]


def plot_flow_graph(data: dict, path: Any, *, dpi: float = DEFAULT_DPI, max_width: float = 6.0):
    """Draw the routes of ``data`` (an :class:`~attnkit.service.LMViewAnalysis`'s ``to_dict()`` of the routes
    view: ``graph``, ``pieces``, ``position``, ``token``) to ``path`` (a PNG); edge width ``max_width ×
    importance`` points. Returns the path."""
    if not isinstance(data, dict) or not isinstance(data.get("graph"), dict):
        raise ValueError("data must be the routes view's JSON (lm_view_json(analysis) with a 'graph')")
    g, pieces = data["graph"], list(data.get("pieces") or [])
    n, layers = len(pieces), int(g["layers"])
    if n < 1 or layers < 1:
        raise ValueError(f"data must have at least one piece and one layer, got {n} pieces and {layers} layers")
    fig = new_figure(max(4.0, 0.7 * n + 1.5), max(3.0, 0.9 * layers + 1.8))
    ax = fig.add_subplot(1, 1, 1)
    for e in g["edges"]:
        x0, x1, y1 = e["source"] - 1, e["target"] - 1, e["layer"]
        width = max(0.3, max_width * float(e["weight"]))
        if e["head"] is None:
            ax.plot([x1, x1], [y1 - 1, y1], color="0.7", lw=width, solid_capstyle="round", zorder=1)
        else:
            ax.plot([x0, x1], [y1 - 1, y1], color="tab:blue", lw=width, alpha=0.8, solid_capstyle="round", zorder=2)
    for m in g["mlp_nodes"]:
        size = 20 + 180 * float(m["weight"])
        ax.scatter([m["position"] - 1 + 0.18], [m["layer"]], s=size, marker="s", color="tab:orange", zorder=3)
    target = int(data.get("position", n)) - 1
    ax.scatter([target], [layers], s=60, color="tab:red", zorder=4)
    ax.set_xticks(range(n))
    ax.set_xticklabels([tex_safe(p.replace("\u2581", " ").strip() or p) for p in pieces], rotation=60, ha="right")
    ax.set_yticks(range(layers + 1))
    ax.set_yticklabels(["embeddings", *(f"layer {i}" for i in range(1, layers + 1))])
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylim(-0.4, layers + 0.4)
    token = (data.get("token") or {}).get("piece", "?")
    ax.set_title(
        tex_safe(
            f"information-flow routes to {token!r} at position {target + 1} (threshold {g['threshold']:g}); "
            "blue: heads, grey: residual, orange: MLP"
        ),
        fontsize=9,
    )
    fig.tight_layout()
    return save_png(fig, path, dpi)
