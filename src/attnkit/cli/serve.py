"""``attnkit serve``: the attention explorer (see :mod:`attnkit.explorer.app`); its options, limits included,
are the fields of :class:`attnkit.explorer.options.ServeOptions`."""

from __future__ import annotations

import os
import secrets
import sys

from ..config import config_from_dict
from .common import CLIError, _check_engine_flags
from .flags import _add_device_flags, _add_engine_flag, _add_spelling_flag
from .options import add_config_arguments

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
    import signal
    import socket

    from ..explorer.options import ServeOptions

    _check_engine_flags(args)
    if args.vmap:
        raise CLIError("--vmap is for translate and evaluate; the explorer decodes over the whole vocabulary")
    try:
        options = config_from_dict(ServeOptions, vars(args))
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    token, generated = server_token(options)
    # the port first, before anything is loaded: a second server on it fails here, and says so, and no
    # "open" line is printed until this one listens (the line comes from the server's startup, below)
    sock = bind_socket(options.host, options.port)
    options = dataclasses.replace(options, port=sock.getsockname()[1])  # --port 0: the one the system gave
    if options.host in ("0.0.0.0", "::"):  # every interface: this machine's own names may be used to reach it
        names = {socket.gethostname(), socket.getfqdn()}
        extra = ",".join(n for n in [options.allow_host, *sorted(names)] if n)
        options = dataclasses.replace(options, allow_host=extra)
    folder = own_temp_folder()
    # uvicorn ends a graceful stop by raising the signal again; SIGTERM's default action would end the process
    # there, before any clean-up: as SystemExit instead, the exit handlers run and the folder goes
    previous = signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        _serve(args, options, sock, token, generated)
    finally:
        sock.close()
        signal.signal(signal.SIGTERM, previous)
    del folder  # removed at exit, after multiprocessing's own clean-up (own_temp_folder)


def _exit_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _serve(args, options, sock, token, generated) -> None:
    import uvicorn

    from ..explorer.app import create_app, load_models
    from ..explorer.connections import guarded_protocol

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
        f"{n} ({i.task}" + (f": {i.checkpoint}{follows})" if i.checkpoint is not None else ")")
        for n, i in models.info.items()
    )
    print(f"attnkit explorer: {loaded}", flush=True)
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
    ready = f"open {url}  (API docs at /docs; {options.workers} worker(s) for heavy jobs; Ctrl-C stops)"
    import torch

    torch.set_num_threads(options.fast_threads)  # the server's own torch work: the fast lane's
    _log_to_stderr()
    _raise_open_files(options.max_connections + 256)
    app = create_app(models, home=args.home, options=options, token=token, start_workers=True)

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if not self.should_exit:  # listening now
                print(ready, flush=True)

    config = uvicorn.Config(
        app,
        log_level="warning",
        http=guarded_protocol(options),  # header timeout, per-client and total connection caps
        timeout_keep_alive=max(1, min(5, round(options.header_timeout))),
        limit_concurrency=None,  # requests: InFlightLimit, once their bodies are in; connections: the protocol
        timeout_graceful_shutdown=10,  # a stop waits this long at most for requests still running
    )
    Server(config).run(sockets=[sock])


def bind_socket(host: str, port: int):
    """A TCP socket listening on ``host:port`` (connections wait in its backlog until the server accepts
    them), or a :class:`CLIError` that says why not."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn does ("localhost": 127.0.0.1)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait for TIME_WAIT
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)  # a second server's bind fails now, with SO_REUSEADDR too
    except OSError as exc:
        sock.close()
        why = (
            "another server listens there: stop it, or pick another --port"
            if exc.errno == errno.EADDRINUSE
            else exc.strerror
        )
        raise CLIError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


#: the prefix of the per-server folder the server and its worker processes keep their temporary files in
TEMP_PREFIX = "attnkit-serve-"


def own_temp_folder(environ=os.environ) -> str:
    """A temporary folder of this server's own (``attnkit-serve-PID-…`` in the system's), made the default of
    this process (:data:`tempfile.tempdir`) and of the processes it starts (``$TMPDIR``: the fork server and
    the workers, whose multiprocessing keeps its ``pymp-*`` folders there), and removed at exit. Folders of
    earlier servers that were killed before they could remove theirs go first: only those with our prefix,
    owned by this user, whose process is gone."""
    import shutil
    import tempfile
    from multiprocessing import util

    base = tempfile.gettempdir()
    remove_stale_temp_folders(base)
    folder = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=base)
    # at exit, just after multiprocessing removes its own pymp-* folder in it (exit priority -100)
    util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-101)
    environ["TMPDIR"] = folder
    tempfile.tempdir = folder
    return folder


def remove_stale_temp_folders(base: str) -> list[str]:
    """Remove the folders :func:`own_temp_folder` made in ``base`` for servers that are no longer running
    (owned by this user, their process id not alive); the removed paths."""
    import shutil

    removed = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(TEMP_PREFIX):
            continue
        pid = entry.name[len(TEMP_PREFIX) :].split("-", 1)[0]
        try:
            if not pid.isdigit() or not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if _alive(int(pid)):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _raise_open_files(want: int) -> None:
    """Raise this process's soft limit on open files towards ``want`` (each connection holds one), as far as
    the hard limit allows."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (ImportError, ValueError, OSError):
        pass


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
