"""What runs inside a worker process of ``attnkit serve``: one heavy job (an attribution method, a big beam).

The server starts its workers from a fork server that has already imported torch and the model code
(:data:`PRELOAD`); a fresh worker loads the models while it waits for a job, off the job's clock. A worker
runs ``--worker-tasks`` jobs and is then replaced, so (with the default 1) all the memory a job took goes
back to the system when it ends, and a worker that dies (killed, out of memory) takes only its own job.

Workers run at a lower priority (``--worker-nice``, 10 by default) with ``--worker-threads`` torch threads
(1 by default), and there are one fewer than the cores by default, so the server's fast lane
(:mod:`attnkit.explorer.lane`, at the normal priority) takes the cores first for plain translations while
attributions queue. Progress goes
through a shared array of doubles, one slot per running job, which the server reads when a client asks
``/api/progress/{job}``. A job whose answer is streamed (``/api/flow/stream``) is given a file the server
made for it: the worker appends each part of the answer to it as one JSON line as soon as it is computed,
and the server reads the lines back as they come (a line is complete once its newline is written).
"""

from __future__ import annotations

import contextlib

__all__ = ["PRELOAD", "init", "run"]

# imported once by the fork server (a missing one, e.g. captum without the explain extra, is skipped)
PRELOAD = [
    "torch",
    "attnkit.explorer.payload",
    "attnkit.service",
    "attnkit.explorer.loading",
    "attnkit.tasks.translation",
    "attnkit.tasks.captioning",
    "attnkit.attribution",
    "captum.attr",
]

_SPECS: dict = {}
_MODELS: dict = {}  # label -> (spec, model): the checkpoint a job last asked for, one model per label
_PROGRESS = None


def init(specs: dict, progress, threads: int, nice: int = 10) -> None:
    """The worker's start: how to load each model (:class:`attnkit.service.ModelSpec` by label),
    the shared progress array, the torch threads it may use and its niceness."""
    global _PROGRESS
    import os

    import torch

    with contextlib.suppress(OSError):
        os.nice(nice)  # heavy work yields the cores to the server's light requests (plain translations)
    _SPECS.update(specs)
    _PROGRESS = progress
    torch.set_num_threads(max(1, threads))
    for label, spec in specs.items():  # before any job: a job's time limit counts its own work, not the loading
        if spec.checkpoint is None:
            _model(label, spec)
            continue
        # a training run: its newest checkpoint now is the one the next job most likely asks for (the one of
        # the pool's start may be gone, removed by the run's --keep-last); a job loads its own if it differs
        with contextlib.suppress(Exception):
            _model(label, _newest(spec))


def _newest(spec):
    """``spec`` moved on to its training run's newest complete checkpoint (:func:`attnkit.service.newest_spec`)."""
    from ..service import newest_spec

    return newest_spec(spec)


def _model(label: str, spec):
    """The model ``spec`` loads (a job's own: a followed training run's spec names the checkpoint the server
    shows), cached by label and spec: a job for a newer checkpoint replaces the cached one."""
    cached = _MODELS.get(label)
    if cached is None or cached[0] != spec:
        from .loading import open_spec

        _MODELS.pop(label, None)  # the old checkpoint's memory goes before the new one is read
        _MODELS[label] = (spec, open_spec(spec))
    return _MODELS[label][1]


def run(label: str, slot: int, request, spec=None, stream: str | None = None):
    """One job: ``request`` (a typed record of :mod:`attnkit.service.requests`: a translation, a caption or a
    decoder-only model's attributed continuation) on model ``label``, with progress in ``slot``; returns its
    :class:`~attnkit.service.Analysis` (the server builds the answer from it). ``spec``: the model to use
    (default: the one the worker started with); a checkpoint removed meanwhile by a training run's
    ``--keep-last`` gives way to the run's newest, and the analysis's ``spec`` names the one it was made with.
    ``stream``: the server's file to append each part of a streamed answer to, one JSON line each (the routes'
    layers of an :class:`~attnkit.service.LMViewRequest`)."""
    import dataclasses
    import json
    from pathlib import Path

    from ..service import CaptionRequest, GenerationRequest, LMViewRequest, TranslationRequest, analyse

    def progress(fraction: float) -> None:
        _PROGRESS[slot] = float(fraction)

    if not isinstance(request, (TranslationRequest, CaptionRequest, GenerationRequest, LMViewRequest)):
        raise TypeError(f"a worker runs a service request, got {type(request).__name__}")
    _PROGRESS[slot] = 0.0
    spec = spec if spec is not None else _SPECS[label]
    if spec.checkpoint is not None and not Path(spec.checkpoint).is_dir():
        spec = _newest(spec)
    model = dataclasses.replace(_model(label, spec), label=label, spec=spec)  # named as the server names it
    if stream is None:
        return analyse(model, request, progress)
    with open(stream, "a", encoding="utf-8") as out:

        def on_layer(part: dict) -> None:
            out.write(json.dumps({"event": "layer", **part}, separators=(",", ":")) + "\n")
            out.flush()

        return analyse(model, request, progress, on_layer=on_layer)
