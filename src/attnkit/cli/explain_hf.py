"""``attnkit explain`` on a Hugging Face encoder-only or decoder-only model (BERT, GPT-2, Llama and kin).

- A decoder-only model (one that writes: a language-model head) continues the text, greedily or with
  ``--sample`` (``--seed``, ``--temperature``, ``--top-k``; at most ``--max-new-tokens``), or with ``--text``
  reads the given text (teacher forcing), and every written (or read) token is attributed to the tokens
  before it by ``--method`` (attention, rollout, saliency, input_x_gradient, integrated_gradients;
  ``--contrast TOKEN``: the gradient methods explain ``log p(token) − log p(TOKEN)``), through
  :func:`attnkit.service.analyse`: the table of ``explain`` and each token's step scores (probability,
  entropy), ``--json``, and ``--plot`` as a heatmap (``.png``) or a self-contained page (``.html``).
- An encoder-only model, or any of them with ``--self-attention``: the self-attention views (what
  bertviz shows). ``--method attention`` prints each piece's most-attended pieces in a layer (``--layer``,
  default the last; ``--head``, default the mean) and ``--plot`` draws every layer and head (``.png``, the
  per-head grid of :func:`attnkit.viz.plot_heads`; only ``--layer`` with it) or writes the explorer's view
  with every layer, head, head mean and the rollout (``.html``); ``--method rollout``: the same for the
  attention rollout (``.png``: its heatmap); ``--method attention_norm|value_zeroing|alti``: every layer's
  context-mixing map (:mod:`attnkit.cli.explain_lm`).
- A decoder-only model's views of one prediction, ``--method logit_lens|direct_logit|routes``
  (``--position``, ``--threshold``): :mod:`attnkit.cli.explain_lm`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..method_registry import REGISTRY, names
from .common import CLIError

__all__ = ["explain_self_attention_model", "model_methods"]

#: the self-attention views' methods (encoder-only models, and ``--self-attention``): every layer's maps
VIEW_METHODS = names(where="text_layers")


def _where(args):
    return sys.stderr if args.json else sys.stdout


def model_methods(args, sa) -> list[str]:
    """The methods ``attnkit explain`` has for ``sa`` (a Hugging Face self-attention model): a decoder-only
    model's attributions (those its blocks allow) and views of one prediction, else the self-attention views."""
    from ..attribution.generation import row_methods
    from ..attribution.lm_methods import LM_VIEWS

    if sa.can_generate and not args.self_attention:
        return [*row_methods(sa), *LM_VIEWS]
    return list(VIEW_METHODS)


def _check_plot(path: str | None) -> str | None:
    if path is None:
        return None
    suffix = Path(path).suffix.lower()
    if suffix not in (".png", ".html"):
        raise CLIError(f"--plot must end with .png (a picture) or .html (a page), got {path}")
    return suffix


def explain_self_attention_model(args, model, method: str, progress) -> None:
    """``attnkit explain`` on ``model``, a Hugging Face encoder-only or decoder-only model opened by
    :func:`attnkit.service.open_model` (module docstring)."""
    from ..attribution.lm_methods import LM_VIEWS

    sa = model.impl
    suffix = _check_plot(args.plot)
    if args.position is not None and method not in LM_VIEWS:
        raise CLIError(f"--position is for the views of one prediction ({', '.join(LM_VIEWS)}), not {method}")
    if args.threshold is not None and method != "routes":
        raise CLIError(f"--threshold is for --method routes, not {method}")
    if sa.can_generate and not args.self_attention:
        if method in LM_VIEWS:
            from .explain_lm import explain_lm_view

            return explain_lm_view(args, model, method, suffix)
        return _explain_continuation(args, model, method, progress, suffix)
    for flag, value in (("--text", args.text), ("--sample", args.sample or None), ("--contrast", args.contrast)):
        if value is not None:
            what = "an encoder-only model" if not sa.can_generate else "the self-attention views"
            raise CLIError(f"{flag} is for a decoder-only model's attributions; {what} takes none")
    if not (args.input or "").strip():
        raise CLIError("the text is empty: give the text to read")
    _self_attention_views(args, sa, method, suffix)


def _step_table(att) -> str:
    """Each attributed token's step scores (inseq's): its probability, the entropy of the next-token
    distribution it was drawn from (nats), and with a contrast the foil's probability."""
    scores = att.extra["step_scores"]
    foil = att.extra.get("contrast", {}).get("token")
    width = max([len("token"), *(len(t) for t in att.target)])
    head = f"{'token':<{width}} | p(token)  entropy" + (f"  p({foil})" if foil else "")
    lines = ["step scores:", head, "-" * (width + 1) + "+" + "-" * (len(head) - width - 1)]
    for i, tok in enumerate(att.target):
        row = f"{tok:<{width}} | {scores['probability'][i]:8.4f}  {scores['entropy'][i]:7.3f}"
        if foil:
            row += f"  {scores['contrast_probability'][i]:.4f}"
        lines.append(row)
    return "\n".join(lines)


def _explain_continuation(args, model, method, progress, suffix) -> None:
    from ..attribution.report import format_attribution, plot_attribution
    from ..service import analyse
    from .options import generation_request

    sa = model.impl
    if args.target is not None:
        raise CLIError(
            "--target is for translators; a decoder-only model explains its own continuation, or --text as given"
        )
    if args.text is not None and args.input is not None:
        raise CLIError("give the text to continue as the argument, or --text to explain as written: not both")
    if args.text is None and args.input is None:
        raise CLIError("give the text to continue (the argument), or --text to explain every next token of a text")
    analysis = analyse(model, generation_request(args, method), progress)
    att = analysis.attribution
    if progress is not None:
        print("\r", end="", file=sys.stderr)
    if args.json:
        print(json.dumps({"model": sa.source, **att.to_dict(), "kv_groups": sa.kv_groups()}, ensure_ascii=False))
    else:
        if analysis.mode == "forced":
            print(f"every next token of the text, read by {sa.source} (teacher forcing):")
        elif analysis.mode == "sample":
            r = analysis.request
            top_k = "every token" if r.top_k is None else f"top-k {r.top_k}"
            print(
                f"continuation of the text by {sa.source} (sampled: seed {analysis.seed}, temperature "
                f"{r.temperature:g}, {top_k}; at most {args.max_new_tokens} tokens):"
            )
        else:
            print(f"continuation of the text by {sa.source} (greedy, at most {args.max_new_tokens} tokens):")
        if "contrast" in att.extra:
            print(f"contrastive: log p(token) − log p({att.extra['contrast']['token']}) (Yin & Neubig 2022)")
        magnitude = REGISTRY[method].magnitude
        if magnitude:
            print(f"each row normalised to sum to 1 (shares); the magnitudes ({magnitude}) are 'raw' in --json")
        print(format_attribution(att, k=args.top, pieces=args.pieces))
        print(_step_table(att))
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
            "(attributions and the views of a prediction are for a decoder-only model's tokens)"
        )
    if args.steps is not None or args.batch is not None:
        raise CLIError("--steps and --batch are for the gradient methods; the self-attention views take none")
    if args.layer is not None and not 1 <= args.layer <= sa.num_layers:
        raise CLIError(
            f"--layer must be in 1..{sa.num_layers} ({sa.source} has {sa.num_layers} layers), got {args.layer}"
        )
    if method not in ("attention", "rollout"):
        from .explain_lm import mixing_views

        return mixing_views(args, sa, method, suffix)
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
