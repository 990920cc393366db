"""``attnkit generate MODEL --prompt TEXT``: continue text with a language model of ``attnkit train language-model``."""

from __future__ import annotations

from ..checks import COUNT, SEED, arg_type, between
from .common import CLIError, _model_folder, _print_json, _shown_name
from .flags import _add_device_flags, _add_json_flag


def cmd_generate(args) -> None:
    from ..service import ModelKind, model_kind, open_model

    if args.top_k is not None and args.temperature == 0:
        raise CLIError("--top-k: only with --temperature above 0 (at 0 the continuation is greedy)")
    path = _model_folder(args.model, default=args.model)  # a training run: its newest checkpoint, named once
    kind = model_kind(path)
    if kind is not ModelKind.LANGUAGE_MODEL:
        what = f"a {kind} model" if kind is not None else "no model attnkit knows"
        raise CLIError(
            f"{path} is {what}: `attnkit generate` continues text with a language model of "
            "`attnkit train language-model` (a run's folder, or one of its checkpoints)"
        )
    model = open_model(path, device=args.device, precision=args.precision, kind=ModelKind.LANGUAGE_MODEL)
    results = model.impl.continue_text(
        args.prompt, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, seed=args.seed
    )
    if args.json:
        _print_json(
            {
                "model": _shown_name(model),
                "max_new_tokens": args.max_new_tokens,
                "temperature": args.temperature,
                "top_k": args.top_k,
                "seed": args.seed,
                "continuations": [r.to_dict() for r in results],
            }
        )
        return
    for r in results:
        print(r.text)


def add_parser(sub) -> None:
    g = sub.add_parser(
        "generate",
        help="continue text with a language model (attnkit train language-model)",
        description="Continue each --prompt with a language model trained by `attnkit train language-model`: "
        "greedily by default, or sampled with --temperature (and --top-k), reproducibly for a --seed.",
    )
    g.add_argument("model", help="the language model: a training run's folder (its newest checkpoint) or a checkpoint")
    g.add_argument(
        "--prompt",
        action="append",
        required=True,
        help="text to continue; give it several times for several texts (an empty one: a text from its start) "
        "(default: none, required)",
    )
    g.add_argument(
        "--max-new-tokens",
        type=arg_type(COUNT, "max_new_tokens", integer=True),
        default=50,
        help="stop after this many new pieces, or at the end of a text (default: 50)",
    )
    g.add_argument(
        "--temperature",
        type=arg_type(between(0, 100), "temperature"),
        default=0.0,
        help="0: greedy; above 0: draw each piece from softmax(logits / temperature) (default: 0)",
    )
    g.add_argument(
        "--top-k",
        type=arg_type(COUNT, "top_k", integer=True),
        default=None,
        help="with --temperature: draw from the K most likely pieces only (default: none: all)",
    )
    g.add_argument(
        "--seed",
        type=arg_type(SEED, "seed", integer=True),
        default=0,
        help="the sampling's random seed: the same seed, the same texts (default: 0)",
    )
    _add_json_flag(g, "one JSON object: each continuation's text, ids and log-probabilities")
    _add_device_flags(g)
    g.set_defaults(func=cmd_generate)
