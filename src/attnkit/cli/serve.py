"""``attnkit serve``: the attention explorer (see :mod:`attnkit.explorer.app`); its options, limits included,
are the fields of :class:`attnkit.explorer.options.ServeOptions`."""

from __future__ import annotations

import os
import secrets
import sys

from ..config import add_config_arguments, config_from_args
from .common import CLIError, _check_engine_flags
from .flags import _add_device_flags, _add_engine_flag, _add_spelling_flag

TOKEN_ENV = "ATTNKIT_TOKEN"


def server_token(options, environ=os.environ) -> tuple[str | None, bool]:
    """``(token, generated)``: ``--token``, else ``$ATTNKIT_TOKEN``, else a random one (:mod:`secrets`, 256 bits)
    when the server binds beyond loopback; None (no token asked) on loopback with none given."""
    from ..explorer.options import is_loopback

    token = options.token or environ.get(TOKEN_ENV) or None
    if token is not None and len(token) < 16:
        raise CLIError(f"the token must have at least 16 characters, got {len(token)} (--token or ${TOKEN_ENV})")
    if token is None and not is_loopback(options.host):
        return secrets.token_urlsafe(32), True
    return token, False


def cmd_serve(args) -> None:
    import dataclasses
    import socket

    import uvicorn

    from ..explorer.app import create_app, load_models
    from ..explorer.options import ServeOptions

    _check_engine_flags(args)
    if args.vmap:
        raise CLIError("--vmap is for translate and evaluate; the explorer decodes over the whole vocabulary")
    try:
        options = config_from_args(ServeOptions, args)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    token, generated = server_token(options)
    if options.host in ("0.0.0.0", "::"):  # every interface: this machine's own names may be used to reach it
        names = {socket.gethostname(), socket.getfqdn()}
        extra = ",".join(n for n in [options.allow_host, *sorted(names)] if n)
        options = dataclasses.replace(options, allow_host=extra)
    # a training run's folder opens its newest complete checkpoint (a model still training, as it is now),
    # and is followed: a newer checkpoint is served once written (--follow-every)
    models = load_models(
        args.model,
        device=args.device,
        dtype=args.precision,
        engine=args.engine,
        keep_spelling=args.keep_spelling,
    )
    follows = f", following its training run every {options.follow_every:g} s" if options.follow_every else ""
    loaded = ", ".join(
        f"{n} ({i['task']}" + (f": {i['checkpoint']}{follows})" if "checkpoint" in i else ")")
        for n, i in models.info.items()
    )
    print(f"attnkit explorer: {loaded}")
    shown = "127.0.0.1" if options.host in ("0.0.0.0", "::") else options.host
    shown = f"[{shown}]" if ":" in shown else shown
    url = f"http://{shown}:{options.port}/"
    if token is not None:
        if generated:
            print(
                f"--host {options.host} lets other machines reach this server: every API call needs this token "
                f"(set one with --token or ${TOKEN_ENV})",
                file=sys.stderr,
            )
        url += f"?token={token}"
    print(
        f"open {url}  (API docs at /docs; {options.workers} worker(s) for heavy jobs; Ctrl-C stops)",
        flush=True,
    )
    import torch

    torch.set_num_threads(options.fast_threads)  # the server's own torch work: the fast lane's
    _log_to_stderr()
    app = create_app(models, home=args.home, options=options, token=token, start_workers=True)
    uvicorn.run(
        app,
        host=options.host,
        port=options.port,
        log_level="warning",
        limit_concurrency=2 * options.limit_concurrency,  # a backstop on connections; requests: InFlightLimit
    )


def _log_to_stderr() -> None:
    """The explorer's own news (a followed training run moved on to a newer checkpoint, or one that does not
    load) as lines on stderr."""
    import logging

    log = logging.getLogger("attnkit.explorer")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def add_parser(sub) -> None:
    from ..explorer.options import ServeOptions

    sv = sub.add_parser(
        "serve",
        help="the attention explorer: a local web page and JSON API over the models",
        description="The attention explorer. Loopback only by default; any other --host needs a token. Every "
        "request's work is bounded by the limits below; heavy jobs (attribution methods, big beams) wait in a "
        "bounded queue for a pool of worker processes, while plain translations and captions run in the "
        "server's fast lane, which never waits behind them.",
    )
    add_config_arguments(sv, ServeOptions)
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
    _add_spelling_flag(sv)
    sv.set_defaults(func=cmd_serve)
