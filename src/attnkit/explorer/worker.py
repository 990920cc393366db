"""What runs inside a worker process of ``attnkit serve``: one heavy job (an attribution method, a big beam).

The server starts its workers from a fork server that has already imported torch and the model code
(:data:`PRELOAD`); a fresh worker loads the models while it waits for a job, off the job's clock. A worker
runs ``--worker-tasks`` jobs and is then replaced, so (with the default 1) all the memory a job took goes
back to the system when it ends, and a worker that dies (killed, out of memory) takes only its own job.

Workers run at a lower priority (``--worker-nice``, 10 by default) with ``--worker-threads`` torch threads
(1 by default), and there are one fewer than the cores by default, so the server's fast lane
(:mod:`attnkit.explorer.lane`) keeps a core for plain translations while attributions queue. Progress goes
through a shared array of doubles, one slot per running job, which the server reads when a client asks
``/api/progress/{job}``.
"""

from __future__ import annotations

import contextlib

__all__ = ["PRELOAD", "init", "run"]

# imported once by the fork server (a missing one, e.g. captum without the explain extra, is skipped)
PRELOAD = [
    "torch",
    "attnkit.explorer.payload",
    "attnkit.explorer.loading",
    "attnkit.tasks.translation",
    "attnkit.tasks.captioning",
    "attnkit.attribution",
    "captum.attr",
]

_SPECS: dict = {}
_MODELS: dict = {}
_PROGRESS = None


def init(specs: dict, progress, threads: int, nice: int = 10) -> None:
    """The worker's start: how to load each model (:class:`attnkit.explorer.loading.ModelSpec` by label),
    the shared progress array, the torch threads it may use and its niceness."""
    global _PROGRESS
    import os

    import torch

    with contextlib.suppress(OSError):
        os.nice(nice)  # heavy work yields the cores to the server's light requests (plain translations)
    _SPECS.update(specs)
    _PROGRESS = progress
    torch.set_num_threads(max(1, threads))
    for label in specs:  # before any job: a job's time limit counts its own work, not the loading
        _model(label)


def _model(label: str):
    if label not in _MODELS:
        from .loading import load_one

        _MODELS[label] = load_one(_SPECS[label])[2]
    return _MODELS[label]


def run(kind: str, label: str, slot: int, kwargs: dict) -> dict:
    """One job: a translation payload (``kind="translation"``), a caption payload (``"captioning"``) or a
    decoder-only model's attributed continuation (``"generation"``), with progress in ``slot``."""
    from .payload import caption_payload, translation_payload

    def progress(fraction: float) -> None:
        _PROGRESS[slot] = float(fraction)

    _PROGRESS[slot] = 0.0
    if kind == "generation":
        from .self_attention import generation_payload as build
    else:
        build = translation_payload if kind == "translation" else caption_payload
    return build(_model(label), model=label, progress=progress, **kwargs)
