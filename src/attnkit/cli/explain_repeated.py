"""``attnkit explain --model LM --repeated N [--seed S] [--layer L --head H]``: a language model's attention
on ``N`` random tokens followed by the same ``N`` tokens again, where an induction head draws its stripe
(Olsson et al. 2022, "In-context Learning and Induction Heads").

The tokens are drawn as ``attnkit evaluate induction`` draws its rows (seeded, special tokens excluded:
its first row for the same seed). The shown head is ``--layer``/``--head``, by default the best induction
head by prefix-matching score on this sequence, named with its score; every head's prefix-matching and
previous-token scores are listed. Its map marks the induction stripe (query ``i`` → key ``i − N + 1``, the
token after the earlier occurrence of the query's token) and the previous-token diagonal (key ``i − 1``),
so a learner sees which head follows which: ``--json`` (the analysis's
:meth:`~attnkit.service.RepeatedAnalysis.to_dict`), ``--plot .png`` (the shown head's map, red squares on the
stripe, orange dots on the previous-token diagonal) or ``--plot .html`` (the explorer's heads grid of every
layer and head, as one self-contained page). Through :class:`attnkit.service.RepeatedRequest` and
:func:`attnkit.service.analyse`, on attnkit's language models and Hugging Face causal language models.
"""

from __future__ import annotations

import json
import sys

from .common import CLIError

__all__ = ["explain_repeated", "format_repeated"]

#: the flags that say what text to read or how to attribute it: none applies to random tokens
_REFUSED = (
    ("--target", "target"),
    ("--steps", "steps"),
    ("--batch", "batch"),
    ("--sample", "sample"),
    ("--temperature", "temperature"),
    ("--top-k", "top_k"),
    ("--contrast", "contrast"),
    ("--position", "position"),
    ("--threshold", "threshold"),
    ("--self-attention", "self_attention"),
)


def _piece(p: str) -> str:
    return p.replace("\u2581", " ").replace("\u0120", " ").strip() or p


def format_repeated(data: dict) -> str:
    """The text report of a :class:`~attnkit.service.RepeatedAnalysis`'s JSON (:meth:`to_dict`)."""
    n, b = data["length"], data["best_head"]
    lines = [
        f"attention of {data['model']} on {n} random tokens repeated twice (seed {data['seed']}, {2 * n} positions)",
        f"best induction head: layer {b['layer']}, head {b['head']} (prefix-matching {b['prefix_matching']:.3f} "
        "on this sequence)",
        "layer head | prefix-matching  previous-token",
    ]
    for h in data["heads"]:
        lines.append(f"{h['layer']:>5} {h['head']:>4} | {h['prefix_matching']:15.3f}  {h['previous_token']:14.3f}")
    lines.append(
        f"shown: layer {data['layer']}, head {data['head']} (prefix-matching {data['prefix_matching']:.3f}, "
        f"previous-token {data['previous_token']:.3f}); each query of the second half, the key it attends to "
        f"most and its weight, * where that key is on the induction stripe (key = query − {n - 1}):"
    )
    pieces, scores = data["pieces"], data["scores"]
    for q, k in data["stripe"]:
        row = scores[q - 1]
        top = max(range(len(row)), key=row.__getitem__) + 1
        mark = "*" if top == k else " "
        lines.append(
            f"{q:>5} {_piece(pieces[q - 1])!r:<16} → {top:>3} {_piece(pieces[top - 1])!r:<16} {row[top - 1]:.3f} {mark}"
        )
    return "\n".join(lines)


def explain_repeated(args, model) -> None:
    """``attnkit explain --repeated N`` on ``model`` (opened by :func:`attnkit.service.open_model`)."""
    from pathlib import Path

    from ..service import ModelKind, RepeatedRequest, analyse

    if args.text is not None or args.input is not None:
        raise CLIError("--repeated and --text (or the text argument) are exclusive: the input is N random tokens twice")
    if args.file is not None:
        raise CLIError("--repeated and --file are exclusive: the input is N random tokens twice")
    refused = [flag for flag, name in _REFUSED if getattr(args, name) not in (None, False)]
    if args.method != "attention":
        refused.insert(0, "--method")
    if refused:
        raise CLIError(f"{', '.join(refused)}: not for --repeated, which shows a head's attention on random tokens")
    if (args.layer is None) != (args.head is None):
        raise CLIError("--layer and --head go together with --repeated: give both, or neither for the best head")
    if model.kind not in (ModelKind.LANGUAGE_MODEL, ModelKind.SELF_ATTENTION) or (
        model.kind is ModelKind.SELF_ATTENTION and not model.impl.causal
    ):
        raise CLIError(
            f"--repeated is for a language model (attnkit's own, or a Hugging Face causal language model); "
            f"{model.label} is not one"
        )
    suffix = None if args.plot is None else Path(args.plot).suffix.lower()
    if suffix not in (None, ".png", ".html"):
        raise CLIError(f"--plot must end with .png (a picture) or .html (a page), got {args.plot}")
    try:
        request = RepeatedRequest(args.repeated, seed=args.seed or 0, layer=args.layer, head=args.head)
        analysis = analyse(model, request)
    except ValueError as exc:  # the service names its argument; the command line names the flag
        msg = str(exc)
        for field, flag in (("length ", "--repeated "), ("layer ", "--layer "), ("head ", "--head ")):
            if msg.startswith(field):
                msg = flag + msg[len(field) :]
        raise CLIError(msg) from None
    data = analysis.to_dict()
    where = sys.stderr if args.json else sys.stdout
    print(json.dumps(data, ensure_ascii=False) if args.json else format_repeated(data))
    if suffix == ".png":
        from ..viz import plot_alignment

        n = analysis.length
        pieces = [_piece(p) for p in analysis.pieces]
        title = (
            f"{analysis.model}: layer {analysis.layer}, head {analysis.head} on {n} random tokens twice "
            f"(red: induction stripe, key = query − {n - 1}; orange: previous token)"
        )
        stripe = {(k - 1, q - 1) for q, k in analysis.stripe()}  # (key, query), 0-based: x, y
        previous = {(k - 1, q - 1) for q, k in analysis.previous()}
        out = plot_alignment(analysis.map(), pieces, pieces, args.plot, title=title, sure=stripe, possible=previous)
        print(f"wrote {out}", file=where)
    elif suffix == ".html":
        from ..explorer.notebook import repeated_view

        print(f"wrote {repeated_view(analysis).save(args.plot)}", file=where)
