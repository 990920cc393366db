"""What every ``attnkit`` command shares: the one-line error, the parser class, output-path checks,
the engine flags' check and the model loaders (the shared flags themselves are :mod:`.flags`')."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..errors import AttnkitError
from ..pretrained import DEFAULT_CAPTION_MODEL, DEFAULT_TRANSLATION_MODEL


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


def _load_ct2(model: str | None, device: str, *, keep_spelling: bool = False, length_penalty: float | None = None):
    """A CTranslate2 export (a folder, or a name under ``$ATTNKIT_HOME/models``) as a
    :class:`attnkit.deploy.ct2_engine.CT2Translator`; ``keep_spelling``: no source spelling rewrite;
    ``length_penalty``: a GNMT ``α`` (``--length-penalty``) instead of the export's, as CTranslate2's ``β``."""
    from ..deploy.ct2_engine import CT2Translator, ctranslate2_length_penalty
    from ..paths import attnkit_home

    if not model:
        raise CLIError(
            "--engine ctranslate2 needs --model FOLDER, written by `attnkit export MODEL OUT --format ctranslate2`"
        )
    path = Path(model)
    if not path.is_dir():
        from ..pretrained import PRETRAINED_DIR

        for folder in (attnkit_home() / "models" / model, PRETRAINED_DIR / model):
            if "/" not in model and folder.is_dir():
                path = folder
                break
    tr = CT2Translator.load(path, device=device)
    tr.normalize_spelling = not keep_spelling
    if length_penalty is not None:
        tr.length_penalty = ctranslate2_length_penalty(length_penalty)
    return tr


def _model_path(model: str | None, default: str) -> Path:
    """The folder a ``--model`` argument means (a folder, a shipped or a local model name; a training
    run's folder means its latest complete checkpoint, see :func:`_run_checkpoint`); an unknown one is a
    CLIError that lists the known names."""
    from ..pretrained import UnknownModelError, resolve_model

    try:
        return _run_checkpoint(resolve_model(model or default))
    except UnknownModelError as exc:
        raise CLIError(str(exc)) from None


def _run_checkpoint(path: Path) -> Path:
    """``path`` itself when it is a model folder; for the folder of a training run (``--out-dir``: no
    ``config.json`` of its own, ``step-*`` checkpoints inside), its newest complete checkpoint, so a model
    still training can be opened (say, in the explorer, to watch its attention form) and is named on
    stderr; a run with no complete checkpoint yet is a CLIError."""
    import sys

    from ..training.checkpoint import is_training_run, list_checkpoints

    if not is_training_run(path):
        return path
    steps = list_checkpoints(path)
    if not steps:
        raise CLIError(
            f"--model {path}: a training run with no complete checkpoint yet (one is written every "
            "--save-every-steps steps and at the end of every epoch)"
        )
    print(f"attnkit: {path} is a training run: using its newest checkpoint, {steps[-1].name}", file=sys.stderr)
    return steps[-1]


def _load_translator(args, path: Path | None = None):
    """The ``--model`` translator (``path``: the folder it was already resolved to)."""
    from ..tasks.translation import Translator

    path = path or _model_path(args.model, DEFAULT_TRANSLATION_MODEL)
    tr = Translator.load(path, device=args.device, dtype=args.precision)
    tr.normalize_spelling = not getattr(args, "keep_spelling", False)
    return tr


def _load_shortlist(path: str | None):
    """The ``--shortlist`` file (None without one); a missing or corrupt one is a ShortlistError."""
    if path is None:
        return None
    from ..tasks.translation import LexicalShortlist

    return LexicalShortlist.load(path)


def _load_captioner(args, path: Path | None = None):
    """The ``--model`` captioner (``path``: the folder it was already resolved to)."""
    from ..tasks.captioning import Captioner

    path = path or _model_path(args.model, DEFAULT_CAPTION_MODEL)
    return Captioner.load(path, device=args.device, dtype=args.precision)


def _checkpoint_errors_as_cli(run, *args, **kwargs):
    """``run(*args, **kwargs)`` with an unloadable checkpoint reported as one :class:`CLIError` line."""
    from ..training.checkpoint import CheckpointError

    try:
        return run(*args, **kwargs)
    except CheckpointError as exc:
        raise CLIError(f"cannot load model: {exc}") from None
