"""``attnkit serve``: the attention explorer."""

from __future__ import annotations

import sys

from ..checks import Range, arg_type
from .common import CLIError, _add_device_flags, _add_engine_flag, _check_engine_flags, _model_paths


def cmd_serve(args) -> None:
    import uvicorn

    from ..explorer.app import create_app, load_models

    _check_engine_flags(args)
    if args.vmap:
        raise CLIError("--vmap is for translate and evaluate; the explorer decodes over the whole vocabulary")
    # a training run's folder: its newest complete checkpoint (a model still training, as it is now)
    models = load_models(_model_paths(args.model), device=args.device, dtype=args.precision, engine=args.engine)
    loaded = ", ".join(f"{n} ({i['task']})" for n, i in models.info.items())
    print(f"attnkit explorer: {loaded}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: --host {args.host} lets other machines reach this server, which has no authentication",
            file=sys.stderr,
        )
    print(f"open http://{args.host}:{args.port}/  (API docs at /docs; Ctrl-C stops)", flush=True)
    uvicorn.run(create_app(models, home=args.home), host=args.host, port=args.port, log_level="warning")


def add_parser(sub) -> None:
    sv = sub.add_parser("serve", help="the attention explorer: a local web page and JSON API over the models")
    sv.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind; anything but 127.0.0.1 exposes the "
        "server to the network and must be given explicitly (default: 127.0.0.1)",
    )
    sv.add_argument(
        "--port", type=arg_type(Range(0, high=65536, integer=True), "port"), default=8000, help="port (default: 8000)"
    )
    sv.add_argument(
        "--model",
        action="extend",
        nargs="+",
        default=None,
        metavar="MODEL",
        help="model names or folders to load (--model a b, or --model a --model b) (default: every shipped model)",
    )
    _add_device_flags(sv, int8=True)
    _add_engine_flag(sv)
    sv.set_defaults(func=cmd_serve)
