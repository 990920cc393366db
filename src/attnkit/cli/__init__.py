"""The ``attnkit`` command: data, train, translate, align, caption, generate, explain, heads, evaluate, export, models,
serve, demo.

Every subcommand reports bad input as one clear line on stderr (exit status 2), never a traceback.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

from ..errors import AttnkitError, no_such_file
from ..version import __version__
from . import align, caption, data, evaluate, explain, export, generate, heads, models, serve, train, translate
from .allocator import keep_freed_memory
from .common import CLIError, _Parser
from .flags import _add_home_flag

__all__ = ["CLIError", "build_parser", "main"]


class _VersionAction(argparse.Action):
    """``--version``: attnkit's version, torch's, and the device ``--device auto`` would use."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from ..device import describe

        print(f"attnkit {__version__} ({describe()})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser, in the order ``attnkit --help`` lists them (each from its module's ``add_parser``)."""
    p = _Parser(prog="attnkit", description="Attention mechanisms for PyTorch, and the models built from them.")
    p.add_argument(
        "--version", action=_VersionAction, help="print the attnkit and torch versions and the device auto picks"
    )
    _add_home_flag(p)
    sub = p.add_subparsers(dest="command", required=True)
    data.add_parser(sub)
    train.add_parser(sub)
    translate.add_parser(sub)
    align.add_align_parser(sub)
    translate.add_shortlist_parser(sub)
    caption.add_parser(sub)
    generate.add_parser(sub)
    explain.add_parser(sub)
    heads.add_parser(sub)
    evaluate.add_parser(sub)
    export.add_parser(sub)
    serve.add_parser(sub)
    models.add_parser(sub)
    return p


def _is_ct2_translate(argv: list[str]) -> bool:
    """Whether the command line is ``attnkit [--home H] translate ... --engine ctranslate2``."""
    rest = list(argv)
    while rest and rest[0].startswith("--home"):
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    if not rest or rest[0] != "translate":
        return False
    return "--engine=ctranslate2" in rest or any(
        a == "--engine" and b == "ctranslate2" for a, b in itertools.pairwise(rest)
    )


def _ct2_translate_parser() -> argparse.ArgumentParser:
    """The parser for ``translate --engine ctranslate2`` alone: :func:`build_parser` imports the models'
    configs (and so torch) to list every command's options; this path must not (a CTranslate2 export
    translates in a fraction of the second torch's import takes)."""
    p = _Parser(prog="attnkit")
    _add_home_flag(p)
    translate.add_parser(p.add_subparsers(dest="command", required=True))
    return p


#: The status a shell reports for a process ended by SIGPIPE (128 + 13): what ``yes | head -1`` gives ``yes``.
SIGPIPE_STATUS = 128 + 13


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (``attnkit translate --file F | head -2``): the write
    end of such a pipe polls as an error. True where that cannot be asked (no poll, no file descriptor)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return True


def _stdout_to_devnull() -> None:
    """Point stdout at the null device, so that nothing more is written to the closed pipe, including the
    interpreter's last flush of what is still buffered (the way Python's docs, "Note on SIGPIPE", end a
    program whose reader went away)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # a stdout with no file descriptor of its own
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (it lives until the interpreter exits)
    finally:
        os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Run the command; bad input (an :class:`attnkit.errors.AttnkitError`, a bad flag, a file that is not
    there or cannot be written, text that is not valid Unicode) is one line on stderr and exit status 2. Any
    other exception is a bug: it keeps its traceback. A command may end with status 1: done, but some input was
    skipped and named on stderr (``translate``: a line no model can read). A reader of stdout that stops early
    (``| head -2``) ends the command quietly with a closed pipe's status, 141."""
    argv = sys.argv[1:] if argv is None else list(argv)
    keep_freed_memory()  # before any tensor: freed blocks stay in the process for the next step
    parser = _ct2_translate_parser() if _is_ct2_translate(argv) else build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = argv  # a command given --processes N relaunches itself on N ranks with it
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except BrokenPipeError:
        if not _stdout_closed():  # another pipe of the command's (a worker's): not the reader going away
            print("attnkit: error: a pipe closed while writing to it (Broken pipe)", file=sys.stderr)
            return 2
        _stdout_to_devnull()
        return SIGPIPE_STATUS
    except (AttnkitError, FileNotFoundError) as exc:
        if not getattr(exc, "quiet", False):  # a split job's error is printed by its rank 0 only
            # an input file that is not there, however it was opened: the one wording (`nope.es: no such file`)
            missing = isinstance(exc, FileNotFoundError) and exc.filename is not None
            print(f"attnkit: error: {no_such_file(exc.filename) if missing else exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file-system error on a path the checks above could not foresee (a full disk)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"attnkit: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnkit: interrupted", file=sys.stderr)
        return 130
    return status if isinstance(status, int) else 0  # 1: done, but some input was skipped (translate)
