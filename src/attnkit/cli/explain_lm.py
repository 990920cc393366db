"""``attnkit explain`` on a language model's own views (mechanistic interpretability): the views of one
prediction of a decoder-only model, and the context-mixing maps of every layer shown like the self-attention
views.

- ``--method logit_lens`` (nostalgebraist 2020): a table per layer of the text's prediction at
  ``--position`` (1-based, default the last token: the token after the text), each block's residual read
  through the final norm and the unembedding: its ``--top`` tokens and the rank of the model's own
  prediction;
- ``--method direct_logit``: each head's and MLP block's direct contribution to the predicted token's
  logit (they, the embedding and the norm's bias add up to it);
- ``--method routes`` (Ferrando & Voita 2024): the information-flow graph of the prediction, the edges
  whose importance is at least ``--threshold``; ``--plot graph.png`` draws it (layers × positions, edge
  width = importance), ``--plot graph.html`` writes the interactive page (a threshold slider, each block's
  logit lens, each edge's attention row).

All through :class:`attnkit.service.LMViewRequest` and :func:`attnkit.service.analyse`; ``--json`` prints
:func:`attnkit.explorer.lm_view_answer.lm_view_json` of the analysis.

``--method attention_norm|value_zeroing|alti`` on an encoder-only model (or with ``--self-attention``):
every layer's token-to-token map (:func:`attnkit.attribution.lm_methods.layer_maps`; ALTI's layer ``l`` is
its rollout through layers ``1..l``), the table and ``--json`` of layer ``--layer`` (default the last),
``--plot .png`` every layer's map, ``--plot .html`` the chosen layer's map as a page.
"""

from __future__ import annotations

import json
import sys

from ..method_registry import REGISTRY
from .common import CLIError

__all__ = ["explain_lm_view", "mixing_views"]


def _where(args):
    return sys.stderr if args.json else sys.stdout


def explain_lm_view(args, model, method: str, suffix: str | None) -> None:
    """``--method logit_lens|direct_logit|routes`` on a decoder-only model (module docstring)."""
    from ..service import LMViewRequest, analyse

    refused = [
        flag
        for flag, value in (
            ("--sample", args.sample or None),
            ("--contrast", args.contrast),
            ("--target", args.target),
            ("--layer", args.layer),
            ("--head", args.head),
            ("--steps", args.steps),
            ("--batch", args.batch),
            ("--seed", args.seed),
            ("--temperature", args.temperature),
            ("--top-k", args.top_k),
        )
        if value is not None
    ]
    if refused:
        raise CLIError(f"{', '.join(refused)}: not for {method}, a view of one prediction of the text as written")
    if args.text is not None and args.input is not None:
        raise CLIError("give the text as the argument or as --text: not both")
    text = args.text if args.text is not None else args.input
    if text is None:
        raise CLIError(f"give the text whose prediction {method} shows (the argument or --text)")
    if args.threshold is not None and method != "routes":
        raise CLIError(f"--threshold is for --method routes, not {method}")
    if suffix is not None and method != "routes":
        raise CLIError(f"--plot draws the routes graph (--method routes); {method} is a table (--json for its numbers)")
    extra = {} if args.threshold is None else {"threshold": args.threshold}
    analysis = analyse(model, LMViewRequest(text, view=method, position=args.position, top=args.top, **extra))
    from ..explorer.lm_view_answer import lm_view_json

    data = lm_view_json(analysis)
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
    else:
        print(format_view(data))
    if suffix == ".png":
        from ..viz.flow import plot_flow_graph

        print(f"wrote {plot_flow_graph(data, args.plot)}", file=_where(args))
    elif suffix == ".html":
        from ..explorer.flow_view import flow_view

        print(f"wrote {flow_view(data).save(args.plot)}", file=_where(args))


def _piece(p: str) -> str:
    return p.replace("\u2581", " ").replace("\u0120", " ")


def _lens_table(rows: list[dict], predicted: str) -> list[str]:
    lines = [f"layer      | rank of {predicted!r} | top tokens (logit)", "-----------+" + "-" * 40]
    for r in rows:
        name = "embeddings" if r["layer"] == 0 else f"{r['layer']:>10}"
        tops = ", ".join(f"{_piece(t['piece'])!r} ({t['logit']:.2f})" for t in r["top"])
        lines.append(f"{name:<10} | {r['rank']:>{len(predicted) + 10}} | {tops}")
    return lines


def format_view(data: dict) -> str:
    """The text table of an :class:`~attnkit.service.LMViewAnalysis`'s JSON (:func:`~attnkit.explorer.lm_view_answer.lm_view_json`)."""
    pos, predicted = data["position"], _piece(data["token"]["piece"])
    at = f"position {pos} ({_piece(data['pieces'][pos - 1])!r}) of the text, predicting {predicted!r}"
    view = data["view"]
    if view == "logit_lens":
        return "\n".join(
            [f"logit lens of {data['model']} at {at} (nostalgebraist 2020):", *_lens_table(data["lens"], predicted)]
        )
    if view == "direct_logit":
        d = data["direct_logit"]
        heads = len(d["layers"][0]["heads"]) if d["layers"] else 0
        lines = [
            f"direct logit attribution of {data['model']} at {at}: logit {d['logit']:.4f} = the terms below "
            f"+ embedding {d['embedding']:.4f} + final norm's bias {d['norm_bias']:.4f}",
            "layer | " + "  ".join(f"{'head ' + str(h + 1):>8}" for h in range(heads)) + "  out bias       MLP",
        ]
        for row in d["layers"]:
            cells = "  ".join(f"{v:8.4f}" for v in row["heads"])
            lines.append(f"{row['layer']:>5} | {cells}  {row['out_bias']:8.4f}  {row['mlp']:8.4f}")
        return "\n".join(lines)
    g = data["graph"]
    pieces = data["pieces"]
    heads = sorted((e for e in g["edges"] if e["head"] is not None), key=lambda e: -e["weight"])
    lines = [
        f"information-flow routes of {data['model']} at {at} (Ferrando & Voita 2024, threshold {g['threshold']:g}): "
        f"{len(heads)} head edges, {len(g['mlp_nodes'])} MLP nodes",
        "layer head | from               → to                 | importance",
    ]
    for e in heads:
        src = f"{e['source']} {_piece(pieces[e['source'] - 1])!r}"
        dst = f"{e['target']} {_piece(pieces[e['target'] - 1])!r}"
        lines.append(f"{e['layer']:>5} {e['head']:>4} | {src:<18} → {dst:<18} | {e['weight']:.4f}")
    for m in sorted(g["mlp_nodes"], key=lambda m: (-m["layer"], m["position"])):
        lines.append(
            f"{m['layer']:>5}  MLP | at {m['position']} {_piece(pieces[m['position'] - 1])!r:<34} | {m['weight']:.4f}"
        )
    return "\n".join(lines)


def mixing_views(args, sa, method: str, suffix: str | None) -> None:
    """Every layer's context-mixing map of an encoder-only (or ``--self-attention``) model (module docstring)."""
    from ..attribution.lm_methods import layer_maps

    if args.head is not None:
        raise CLIError(f"{method} sums every head: --head does not apply")
    ids, _ = sa.encode(args.input)
    pieces_raw = sa.pieces_of(ids)
    pieces = [_piece(p).strip() or p for p in pieces_raw]
    maps = layer_maps(sa.model, ids, method).float()  # (L, N, N)
    li = (args.layer or sa.num_layers) - 1
    matrix = maps[li]
    what = f"layer {li + 1}" + (f" (rolled out through layers 1..{li + 1})" if method == "alti" else "")
    if args.json:
        out = {
            "model": sa.source,
            "method": method,
            "pieces": pieces_raw,
            "causal": bool(sa.can_generate),
            "layer": li + 1,
            "scores": [[round(float(v), 5) for v in row] for row in matrix],
        }
        print(json.dumps(out, ensure_ascii=False))
    else:
        from ..viz import format_top_alignments

        magnitude = REGISTRY[method].magnitude
        said = f"; the magnitudes ({magnitude}), rows not normalised" if magnitude else ""
        print(f"{method} of {sa.source} ({sa.num_layers} layers): {what}{said}")
        top = format_top_alignments(matrix, pieces, pieces, k=min(args.top, len(pieces)))
        print(top.replace("target", "piece ", 1))
    if suffix == ".png":
        from ..viz import plot_heads

        grid = {f"layer {layer + 1}": maps[layer][None] for layer in range(maps.shape[0])}
        out = plot_heads(grid, args.plot, query_tokens=pieces, key_tokens=pieces, title=f"{sa.source}: {method}")
        print(f"wrote {out}", file=_where(args))
    elif suffix == ".html":
        from ..attribution import Attribution, normalise_rows
        from ..explorer.notebook import show

        att = Attribution(
            method=method,
            source=pieces_raw,
            target=pieces_raw,
            scores=normalise_rows(matrix.clamp_min(0.0)),
            raw=matrix.clone(),
            params={"layer": li + 1},
            seconds=0.0,
            needs_gradients=False,
            extra={"model": sa.source, "kind": "self-attention", "translation": " ".join(pieces)},
        )
        print(f"wrote {show(att).save(args.plot)}", file=_where(args))
