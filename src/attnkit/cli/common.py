"""What every ``attnkit`` command shares: the one-line error, the parser class, output-path checks,
the engine flags' check and the shortlist's loading (the shared flags themselves are :mod:`.flags`'; every
command opens its model with :func:`attnkit.service.open_model`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..errors import AttnkitError


class CLIError(AttnkitError):
    """A user-facing error found by the command line itself: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors (an unknown flag, ``--beam 0``) are one :class:`CLIError` line, like every
    other bad input, instead of argparse's usage block and ``SystemExit``."""

    def error(self, message: str):
        raise CLIError(f"{message} (see `{self.prog} --help`)")


def _output(path: str | Path | None, flag: str, *, folder: bool = False) -> Path | None:
    """Check an output path before any work is done, without creating anything: the nearest folder
    that exists on the way to it must be a writable folder, and the path itself, if it exists, a
    folder (``folder=True``) or a file. A path that cannot be written (a file in the way, no
    permission) is a one-line :class:`CLIError` naming ``flag``, not a traceback after the work."""
    if path is None:
        return None
    p = Path(path)
    if p.exists() and p.is_dir() != folder:
        raise CLIError(f"{flag}: {p} is a {'file' if folder else 'folder'}; give a {'folder' if folder else 'file'}")
    existing = (p if folder else p.parent).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise CLIError(f"{flag}: cannot create {p}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CLIError(f"{flag}: cannot create {p}: {existing} is not writable")
    return p


@contextlib.contextmanager
def _output_text(path: str | Path | None) -> Iterator[IO[str]]:
    """``with _output_text(args.output) as out:`` the text file ``path`` (UTF-8), written whole or not at
    all (:func:`attnkit.paths.atomic_writer`: an error or Ctrl-C midway leaves an earlier file of that name
    as it was), or stdout when ``path`` is None (flushed at the end)."""
    if path is None:
        try:
            yield sys.stdout
        finally:
            with contextlib.suppress(BrokenPipeError):
                sys.stdout.flush()
        return
    from ..paths import atomic_writer

    with atomic_writer(path, "w", encoding="utf-8") as out:
        yield out


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def _check_engine_flags(args) -> None:
    """The flags that belong to one engine only, refused on the other with the reason."""
    if args.engine == "ctranslate2":
        if args.precision != "fp32":
            raise CLIError(
                "--precision is the PyTorch engine's: a CTranslate2 model computes in the type it was "
                "exported with (`attnkit export --quantization`)"
            )
        if getattr(args, "shortlist", None):
            raise CLIError(
                "--shortlist is the PyTorch engine's: give the shortlist to `attnkit export --shortlist` "
                "and decode with --vmap"
            )
    elif getattr(args, "vmap", False):
        raise CLIError("--vmap needs --engine ctranslate2 (the PyTorch engine takes --shortlist FILE)")


def _load_shortlist(path: str | None):
    """The ``--shortlist`` file (None without one); a missing or corrupt one is a ShortlistError."""
    if path is None:
        return None
    from ..tasks.translation import LexicalShortlist

    return LexicalShortlist.load(path)


def _checkpoint_errors_as_cli(run, *args, **kwargs):
    """``run(*args, **kwargs)`` with an unloadable checkpoint reported as one :class:`CLIError` line."""
    from ..training.checkpoint import CheckpointError

    try:
        return run(*args, **kwargs)
    except CheckpointError as exc:
        raise CLIError(f"cannot load model: {exc}") from None


_FLAG = object()  # _open_model's ref when the model is the command's --model


def _open_model(args, default: str | None, *, ref=_FLAG, kind=None, device: str | None = None):
    """:func:`attnkit.service.open_model` of ``--model`` (``ref``: another model argument, e.g. the reverse
    model of ``align``; else ``default``) with the command's engine flags (``--engine``, ``--device``,
    ``--precision``, ``--keep-spelling``, ``--length-penalty`` where it has them); ``device`` overrides
    ``--device`` (a rank of a corpus job: its own GPU, :func:`attnkit.cli.corpus_job.start_group`); an
    unknown name is a :class:`CLIError` that lists the known ones."""
    from ..pretrained import UnknownModelError
    from ..service import open_model

    try:
        return open_model(
            args.model if ref is _FLAG else ref,
            default=default,
            engine=getattr(args, "engine", "pytorch"),
            device=args.device if device is None else device,
            precision=getattr(args, "precision", None),
            keep_spelling=getattr(args, "keep_spelling", False),
            length_penalty=getattr(args, "length_penalty", None),
            kind=kind,
        )
    except UnknownModelError as exc:
        raise CLIError(str(exc)) from None


def _model_folder(ref: str | None, default: str):
    """:func:`attnkit.service.model_folder` of a model argument (for commands that read its files, not load
    it); an unknown name is a :class:`CLIError` that lists the known ones."""
    from ..pretrained import UnknownModelError
    from ..service import model_folder

    try:
        return model_folder(ref, default=default)
    except UnknownModelError as exc:
        raise CLIError(str(exc)) from None


def _shown_name(model) -> str:
    """The name a command's output gives a :class:`attnkit.service.Model`: its folder's (a training run's
    checkpoint, ``step-…``), or its label when it has no folder (a Hugging Face hub name)."""
    return model.path.name if model.path is not None else model.label


def _check_explanations_model(path, kind) -> None:
    """Refuse, in one line that says what the folder is, a model ``attnkit evaluate explanations`` cannot
    score: the command scores source-target attributions against gold word alignments (translators), gold
    boxes (captioners), or a decoder-only model's next tokens by deletion and insertion; so a Hugging Face
    encoder-only model, which predicts no next token, and a folder holding no model are named as such
    (not as an incomplete checkpoint). A decoder-only model passes."""
    from ..service import ModelKind

    which = (
        "`attnkit evaluate explanations` scores translators (attnkit's, and Hugging Face encoder-decoders "
        "such as Marian), attnkit's captioners and decoder-only language models"
    )
    if kind is ModelKind.SELF_ATTENTION:
        try:
            config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
        config = config if isinstance(config, dict) else {}
        from ..hf.loading import CAUSAL_LM_SUFFIXES

        if any(str(a).endswith(CAUSAL_LM_SUFFIXES) for a in config.get("architectures") or []):
            return
        model_type = config.get("model_type")
        what = f"a Hugging Face {model_type} model" if model_type else "a Hugging Face model"
        raise CLIError(
            f"{path} is {what}, encoder-only: it has no source-target explanations to score against gold and "
            f"predicts no next token; {which}"
        )
    if kind is None and Path(path).is_dir() and not any(Path(path).iterdir()):
        raise CLIError(f"{path} holds no model (an empty folder); {which}")
