"""``attnkit explain`` on a Hugging Face encoder-only or decoder-only model (BERT, GPT-2, Llama and kin).

- A decoder-only model (one that writes: a language-model head) continues the text greedily (at most
  ``--max-new-tokens``) and every written token is attributed to the tokens before it by ``--method``
  (attention, rollout, saliency, input_x_gradient, integrated_gradients): the table of ``explain``,
  ``--json``, and ``--plot`` as a heatmap (``.png``) or a self-contained page (``.html``).
- An encoder-only model, or any of them with ``--self-attention``: the self-attention views (what
  bertviz shows). ``--method attention`` prints each piece's most-attended pieces in a layer (``--layer``,
  default the last; ``--head``, default the mean) and ``--plot`` draws every layer and head (``.png``, the
  per-head grid of :func:`attnkit.viz.plot_heads`; only ``--layer`` with it) or writes the explorer's view
  with every layer, head, head mean and the rollout (``.html``); ``--method rollout``: the same for the
  attention rollout (``.png``: its heatmap).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .common import CLIError

__all__ = ["explain_self_attention_model"]

VIEW_METHODS = ("attention", "rollout")


def _where(args):
    return sys.stderr if args.json else sys.stdout


def _check_plot(path: str | None) -> str | None:
    if path is None:
        return None
    suffix = Path(path).suffix.lower()
    if suffix not in (".png", ".html"):
        raise CLIError(f"--plot must end with .png (a picture) or .html (a page), got {path}")
    return suffix


def explain_self_attention_model(args, sa, method: str, progress) -> None:
    """``attnkit explain`` on ``sa``, a Hugging Face encoder-only or decoder-only model opened by
    :func:`attnkit.service.open_model` (module docstring)."""
    suffix = _check_plot(args.plot)
    text = args.input
    if not text.strip():
        raise CLIError("the text is empty: give the text to read")
    if sa.can_generate and not args.self_attention:
        _explain_continuation(args, sa, method, progress, suffix)
    else:
        _self_attention_views(args, sa, method, suffix)


def _explain_continuation(args, sa, method, progress, suffix) -> None:
    from ..attribution import explain_generation
    from ..attribution.report import format_attribution, plot_attribution

    if args.target is not None:
        raise CLIError("--target is for translators; a decoder-only model explains its own continuation")
    att = explain_generation(
        sa,
        args.input,
        method=method,
        max_new_tokens=args.max_new_tokens,
        layer=args.layer,
        head=args.head,
        steps=args.steps,
        batch=args.batch,
        progress=progress,
    )
    if progress is not None:
        print("\r", end="", file=sys.stderr)
    if args.json:
        print(json.dumps({"model": sa.source, **att.to_dict(), "kv_groups": sa.kv_groups()}, ensure_ascii=False))
    else:
        print(f"continuation of the text by {sa.source} (greedy, at most {args.max_new_tokens} tokens):")
        print(format_attribution(att, k=args.top, pieces=args.pieces))
    if suffix == ".png":
        print(f"wrote {plot_attribution(att, args.plot, pieces=args.pieces)}", file=_where(args))
    elif suffix == ".html":
        from ..explorer.notebook import show

        print(f"wrote {show(att).save(args.plot)}", file=_where(args))


def _self_attention_views(args, sa, method, suffix) -> None:
    from ..viz import format_top_alignments, plot_alignment, plot_heads

    if method not in VIEW_METHODS:
        what = "an encoder-only model" if not sa.can_generate else "the self-attention views"
        raise CLIError(
            f"{method} is not defined for {what}: its methods are {', '.join(VIEW_METHODS)} "
            "(attributions are for a decoder-only model's continuation)"
        )
    if args.steps is not None or args.batch is not None:
        raise CLIError("--steps and --batch are for the gradient methods; the self-attention views take none")
    if args.layer is not None and not 1 <= args.layer <= sa.num_layers:
        raise CLIError(
            f"--layer must be in 1..{sa.num_layers} ({sa.source} has {sa.num_layers} layers), got {args.layer}"
        )
    if args.head is not None and not 1 <= args.head <= sa.num_heads:
        raise CLIError(f"--head must be in 1..{sa.num_heads} ({sa.source} has {sa.num_heads} heads), got {args.head}")
    if method == "rollout" and (args.layer is not None or args.head is not None):
        raise CLIError("rollout composes every layer and head: --layer and --head do not apply")
    maps = sa.self_attention(args.input)
    pieces = [p.replace("\u2581", " ").strip() or p for p in maps.pieces]
    li = (args.layer or sa.num_layers) - 1
    if method == "rollout":
        matrix, what = maps.rollout(), "attention rollout through every layer"
    elif args.head is None:
        matrix, what = maps.head_mean[li], f"layer {li + 1}, mean of the {sa.num_heads} heads"
    else:
        matrix, what = maps.attention[li, args.head - 1], f"layer {li + 1}, head {args.head}"
    if args.json:
        out = {
            "model": sa.source,
            "method": method,
            "pieces": maps.pieces,
            "causal": maps.causal,
            "layer": None if method == "rollout" else li + 1,
            "head": args.head,
            "kv_groups": maps.kv_groups,
            "scores": [[round(float(v), 5) for v in row] for row in matrix],
        }
        print(json.dumps(out, ensure_ascii=False))
    else:
        kind = "decoder-only" if maps.causal else "encoder-only"
        print(f"self-attention of {sa.source} ({kind}, {sa.num_layers} layers × {sa.num_heads} heads): {what}")
        print(
            format_top_alignments(matrix, pieces, pieces, k=min(args.top, len(pieces))).replace("target", "piece ", 1)
        )
    if suffix == ".html":
        from ..explorer.notebook import self_attention_view

        print(f"wrote {self_attention_view(maps, model=sa.source).save(args.plot)}", file=_where(args))
    elif suffix == ".png" and method == "rollout":
        out = plot_alignment(matrix, pieces, pieces, args.plot, title=f"{sa.source}: attention rollout")
        print(f"wrote {out}", file=_where(args))
    elif suffix == ".png":
        # the rows are labelled with the model's layer numbers (1-based): one asked layer keeps its own
        grid = maps.attention if args.layer is None else {f"layer {args.layer}": maps.attention[li]}
        out = plot_heads(
            grid,
            args.plot,
            query_tokens=pieces,
            key_tokens=pieces,
            title=f"{sa.source}: self-attention",
            kv_groups=maps.kv_groups,
        )
        print(f"wrote {out}", file=_where(args))
