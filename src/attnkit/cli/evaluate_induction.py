"""``attnkit evaluate induction --model M``: the induction heads of a language model, measured (Olsson et
al. 2022): per layer and head the prefix-matching, previous-token and copying scores on repeated random
tokens, the best induction head, and the in-context-learning score on the model's own validation text
(:func:`attnkit.service.induction.measure_induction`). Layers and heads are numbered from 1."""

from __future__ import annotations

import json
import sys

from ..checks import COUNT, SEED, arg_type
from .common import CLIError, _model_folder, _open_model
from .flags import _add_device_flags, _add_json_flag

__all__ = ["add_evaluate_induction_parser", "format_induction"]


def _fmt(v) -> str:
    return "   n/a" if v is None else f"{v:6.3f}"


def format_induction(r: dict) -> str:
    """The text table of a :func:`~attnkit.service.induction.measure_induction` report."""
    b = r["best_head"]
    lines = [
        f"induction heads of {r['model']} ({r['kind']}) on {r['batch']} rows of {r['length']} random tokens "
        f"repeated twice:",
        "layer head | prefix-matching  previous-token  copying",
    ]
    for h in r["heads"]:
        lines.append(
            f"{h['layer']:>5} {h['head']:>4} | {_fmt(h['prefix_matching']):>15}  {_fmt(h['previous_token']):>14}  "
            f"{_fmt(h['copying']):>7}"
        )
    lines.append(
        f"best induction head: layer {b['layer']}, head {b['head']} (prefix-matching {b['prefix_matching']:.3f})"
    )
    lines.append(f"copying: {r['copying_note']}")
    if r["in_context_learning"] is None:
        lines.append(f"in-context-learning score: not measured: {r['icl_note']}")
    else:
        early, late = r["icl_positions"]
        lines.append(
            f"in-context-learning score: {r['in_context_learning']:.4f} (loss at token {late} minus loss at token "
            f"{early}, on {r['icl_note']})"
        )
    return "\n".join(lines)


def cmd_evaluate_induction(args) -> None:
    from ..service import ModelKind, model_kind
    from ..service.induction import measure_induction

    path = _model_folder(args.model, args.model)
    kind = model_kind(path)
    if kind is None:
        raise CLIError(f"--model: {path} holds no model attnkit knows (no language model's config.json and weights)")
    if kind in (ModelKind.TRANSLATOR, ModelKind.CAPTIONER):
        raise CLIError(
            f"--model: {path} is a {'translator' if kind is ModelKind.TRANSLATOR else 'captioner'}: induction heads "
            "are measured on a language model (attnkit's own, or a Hugging Face causal language model)"
        )
    model = _open_model(args, None, ref=str(path))
    if kind is ModelKind.SELF_ATTENTION and not model.impl.causal:
        raise CLIError(
            f"--model: {path} is an encoder-only model: induction heads are measured on a causal language model"
        )
    try:
        report = measure_induction(model, length=args.length, batch=args.batch, seed=args.seed, home=args.home)
    except ValueError as exc:  # the service names its argument; the command line names the flag
        msg = str(exc)
        raise CLIError(f"--{msg}" if msg.startswith(("length ", "batch ")) else msg) from None
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(format_induction(report))
    if args.json and report["in_context_learning"] is None:  # the table says it in its last line
        print(f"attnkit: in-context-learning score omitted: {report['icl_note']}", file=sys.stderr)


def add_evaluate_induction_parser(e) -> None:
    """``attnkit evaluate induction`` under the ``evaluate`` subparsers ``e``."""
    ei = e.add_parser(
        "induction",
        help="a language model's induction heads: prefix-matching, previous-token and copying scores per head "
        "on repeated random tokens, and the in-context-learning score (Olsson et al. 2022)",
    )
    ei.add_argument(
        "--model",
        required=True,
        help="a language model: attnkit's (a name, a run folder, a checkpoint) or a Hugging Face causal LM folder "
        "(required: there is no default)",
    )
    ei.add_argument(
        "--length",
        type=arg_type(COUNT, "length"),
        default=None,
        help="random tokens in each half of a row (default: min(context / 2, 64))",
    )
    ei.add_argument("--batch", type=arg_type(COUNT, "batch"), default=8, help="rows measured (default: 8)")
    ei.add_argument("--seed", type=arg_type(SEED, "seed"), default=0, help="the rows' random seed (default: 0)")
    _add_json_flag(ei)
    _add_device_flags(ei)
    ei.set_defaults(func=cmd_evaluate_induction)
