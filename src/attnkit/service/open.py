"""The one place a model is opened: :func:`open_model` (a loaded :class:`Model`) and :func:`model_folder`
(only the folder a model argument means, for the commands that read the files themselves: ``export``).

A model argument (``ref``) is resolved once (:func:`attnkit.pretrained.resolve_model`): a folder, a shipped
or local model name, or ``hf:NAME``; a training run's folder means its newest complete checkpoint (named on
stderr, so a model still training can be opened). The kind of model is read from the checkpoint's files
(:func:`attnkit.pretrained.model_task`), the task's wrapper loads it, and a translator gets its input
spelling rule (``keep_spelling``) and length penalty here, for every front end alike.

Nothing here imports torch until a PyTorch model is loaded: ``attnkit translate --engine ctranslate2``
opens its export without it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from .model import Model, ModelKind, ModelSpec

__all__ = ["ENGINES", "model_folder", "model_kind", "newest_spec", "open_model"]

ENGINES = ("pytorch", "ctranslate2")

_NO_CT2_MODEL = "--engine ctranslate2 needs --model FOLDER, written by `attnkit export MODEL OUT --format ctranslate2`"


def _name(ref: str | os.PathLike | None, default: str | os.PathLike | None) -> str:
    """``ref``, else ``default``, as the text a :class:`ModelSpec` keeps; neither is a ``ValueError``."""
    name = ref or default
    if name is None:
        raise ValueError("ref: give a model name or folder (there is no default model here)")
    return os.fspath(name)


def _newest_checkpoint(path: Path) -> Path:
    """``path`` itself when it is a model folder; for a training run's folder (``--out-dir``: no ``config.json``
    of its own, ``step-*`` checkpoints inside) its newest complete checkpoint, named on stderr; a run with no
    complete checkpoint yet is a :class:`attnkit.training.checkpoint.CheckpointError`."""
    from ..training.checkpoint import CheckpointError, is_training_run, list_checkpoints

    if not is_training_run(path):
        return path
    steps = list_checkpoints(path)
    if not steps:
        raise CheckpointError(
            f"--model {path}: a training run with no complete checkpoint yet (one is written every "
            "--save-every-steps steps and at the end of every epoch)"
        )
    print(f"attnkit: {path} is a training run: using its newest checkpoint, {steps[-1].name}", file=sys.stderr)
    return steps[-1]


def model_folder(ref: str | os.PathLike | None = None, *, default: str | os.PathLike | None = None) -> Path:
    """The checkpoint folder ``ref`` (else ``default``) means, without loading it: a folder, a shipped or local
    model name, ``hf:NAME`` (kept as that path), or a training run's newest complete checkpoint. An unknown
    name is an :class:`attnkit.pretrained.UnknownModelError` listing the known ones."""
    from ..pretrained import resolve_model

    return _newest_checkpoint(resolve_model(_name(ref, default)))


def newest_spec(spec: ModelSpec) -> ModelSpec:
    """``spec`` moved on to its training run's newest complete checkpoint (itself for a model that is no
    training run's, or when the run has none now): what a worker opens when the checkpoint a job named is gone."""
    from ..training.checkpoint import latest_checkpoint

    if spec.checkpoint is None:
        return spec
    newest = latest_checkpoint(spec.name)
    return spec if newest is None else dataclasses.replace(spec, checkpoint=str(newest))


def model_kind(path: str | os.PathLike) -> ModelKind | None:
    """The kind of model in folder ``path`` (as :func:`model_folder` returns it), from the files beside its
    weights; None when it is no model attnkit knows."""
    from ..pretrained import model_task

    task = model_task(path)
    return None if task == "?" else ModelKind(task)


def _ct2_folder(name: str) -> Path:
    """The CTranslate2 export ``name`` means: a folder, else an export of that name under
    ``$ATTNKIT_HOME/models`` or among the shipped models (a folder that is not there is the loader's error)."""
    from ..paths import attnkit_home
    from ..pretrained import PRETRAINED_DIR

    path = Path(name).expanduser()
    if not path.is_dir() and "/" not in name and os.sep not in name:
        for folder in (attnkit_home() / "models" / name, PRETRAINED_DIR / name):
            if folder.is_dir():
                return folder
    return path


def _set_translator_options(tr, spec: ModelSpec) -> None:
    """The input spelling rule and the length penalty of a translator of either engine: ``keep_spelling``
    gives the model the input as typed; ``length_penalty`` is a GNMT ``α`` (for CTranslate2, its ``β``)."""
    tr.normalize_spelling = not spec.keep_spelling
    if spec.length_penalty is None:
        return
    if spec.engine == "ctranslate2":
        from ..deploy.ct2_engine import ctranslate2_length_penalty

        tr.length_penalty = ctranslate2_length_penalty(spec.length_penalty)
    else:
        from ..tasks.translation.generation import check_length_penalty

        tr.length_penalty = check_length_penalty(spec.length_penalty)


def _load(kind: ModelKind | None, path: Path, spec: ModelSpec):
    """The task wrapper of ``kind`` holding the model in ``path``. A folder of no known kind goes to the
    captioner's loader, whose error says what the checkpoint lacks."""
    if kind is ModelKind.TRANSLATOR:
        from ..tasks.translation import Translator

        return Translator.load(path, device=spec.device, dtype=spec.dtype)
    if kind is ModelKind.SELF_ATTENTION:  # a Hugging Face encoder-only or decoder-only model
        from ..hf import load_self_attention

        return load_self_attention(str(path), device=spec.device)
    if kind is ModelKind.LANGUAGE_MODEL:  # attnkit's own decoder-only model and its tokenizer
        from ..tasks.language_model.inference import LanguageModelGenerator

        return LanguageModelGenerator.load(path, device=spec.device, dtype=spec.dtype)
    from ..tasks.captioning import Captioner

    return Captioner.load(path, device=spec.device, dtype=spec.dtype)


def open_model(
    ref: str | os.PathLike | ModelSpec | None = None,
    *,
    default: str | os.PathLike | None = None,
    engine: str = "pytorch",
    device: str = "cpu",
    precision: str | None = None,
    keep_spelling: bool = False,
    length_penalty: float | None = None,
    kind: ModelKind | None = None,
) -> Model:
    """Open the model ``ref`` names (else ``default``, e.g. ``DEFAULT_TRANSLATION_MODEL``) as a :class:`Model`.

    ``ref``: a shipped or local model name, a folder, a training run's folder (its newest complete
    checkpoint, named on stderr), ``hf:NAME``, a CTranslate2 export (``engine="ctranslate2"``: a folder, or a
    name under ``$ATTNKIT_HOME/models``), or a :class:`ModelSpec` (what a worker process or a followed
    training run passes: its own settings then replace the keyword ones, and its ``checkpoint`` is opened as
    it is). ``device``, ``precision`` (``"fp16"``, ``"bf16"``, ``"int8"``…) place a PyTorch model; a
    translator reads the input as typed with ``keep_spelling`` and searches with ``length_penalty`` (a GNMT
    ``α``) unless a call says otherwise. ``kind``: load with that kind's wrapper whatever the checkpoint
    holds (a command that needs a translator; a checkpoint of another kind is then that wrapper's error);
    None: the checkpoint's own kind.

    Errors are the library's own: :class:`attnkit.pretrained.UnknownModelError` (which lists the known
    names), :class:`attnkit.training.checkpoint.CheckpointError`, :class:`attnkit.deploy.manifest.DeployError`.
    """
    if isinstance(ref, ModelSpec):
        spec = ref
    else:
        if engine == "ctranslate2" and not (ref or default):
            from ..deploy.manifest import DeployError

            raise DeployError(_NO_CT2_MODEL)
        spec = ModelSpec(
            _name(ref, default),
            device=device,
            dtype=precision,
            engine=engine,
            keep_spelling=keep_spelling,
            length_penalty=length_penalty,
        )
    if spec.engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {spec.engine!r}")
    if kind is not None and not isinstance(kind, ModelKind):
        raise TypeError(f"kind must be a ModelKind or None, got {kind!r}")
    if spec.engine == "ctranslate2":
        from ..deploy.ct2_engine import CT2Translator

        path = _ct2_folder(spec.name)
        impl = CT2Translator.load(path, device=spec.device)
        _set_translator_options(impl, spec)
        return Model(Path(spec.name).name, ModelKind.TRANSLATOR, impl, spec, path)
    folder: Path | None
    if spec.checkpoint is not None:  # a training run's checkpoint, named for its run
        path = folder = Path(spec.checkpoint)
        label = spec.label
    else:
        from ..pretrained import HF_PREFIX, resolve_model

        resolved = resolve_model(spec.name)
        path = _newest_checkpoint(resolved)
        if path != resolved:  # a training run: the spec keeps its folder and the checkpoint opened
            spec = dataclasses.replace(spec, name=str(resolved), checkpoint=str(path))
        label = spec.label or path.name
        hub = str(path).startswith(HF_PREFIX) and not path.is_dir()  # a hub name: no folder of its own
        folder = None if hub else path
    found = kind or model_kind(path)
    impl = _load(found, path, spec)
    if found is ModelKind.TRANSLATOR:
        _set_translator_options(impl, spec)
    if found is ModelKind.LANGUAGE_MODEL:
        impl.source = label  # the name its answers give (a text model's ``source``)
    return Model(label, found or ModelKind.CAPTIONER, impl, spec, folder)
