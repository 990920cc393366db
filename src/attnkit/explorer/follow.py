"""Following a model that is still training, so a learner can watch its attention form.

A model given to ``attnkit serve`` as a training run's folder (``--out-dir`` of ``attnkit train``) is served
from the run's newest complete checkpoint, and *followed*: when a request for it arrives and at least
``--follow-every`` seconds have passed since the last look, the server lists the run's checkpoints again
(:func:`attnkit.training.checkpoint.list_checkpoints`, which returns only folders with their ``COMPLETE``
marker, so a checkpoint still being written is never read) and, when there is a newer one, loads it in a
thread (off the event loop and off the fast lane, so other models' requests go on meanwhile) and swaps it in:
the model, its :class:`~attnkit.service.ModelSpec` (which the heavy jobs carry to the workers, so they
load the same checkpoint) and its ``/api/models`` entry change together, under :attr:`Follower.lock`. A
request already running keeps the model it started with. A newer checkpoint that fails to load (corrupt,
or not a model of this kind) is reported once in the server's log and skipped; the old model goes on serving.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..service import ModelKind, open_model
from .loading import LoadedModels, describe, explorer_model

__all__ = ["Follower"]

log = logging.getLogger("attnkit.explorer")


class Follower:
    """Moves each training run's model in ``models`` on to the run's newest complete checkpoint (see the module
    docstring); ``every``: the least seconds between two looks at one run (0: never look)."""

    def __init__(self, models: LoadedModels, every: float, clock: Callable[[], float] = time.monotonic):
        self.models, self.every, self.clock = models, every, clock
        self.lock = threading.Lock()  # held while a model, its spec and its info are read or swapped together
        runs = [label for label, spec in models.specs.items() if spec.checkpoint is not None]
        self._looking = {label: threading.Lock() for label in runs}  # one look at a time per run
        self._checked = {label: clock() for label in runs}
        self.failed: set[str] = set()  # checkpoints that did not load (reported once, never tried again)

    def due(self, label: str) -> bool:
        """Whether ``label`` is a followed run whose last look was at least ``every`` seconds ago."""
        return self.every > 0 and label in self._looking and self.clock() - self._checked[label] >= self.every

    def refresh(self, label: str) -> str | None:
        """Look once (when due) for a checkpoint of ``label``'s run newer than the one served and swap the newest
        that loads in; the name of the checkpoint swapped in, or None. Blocking: call it in a thread."""
        from ..training.checkpoint import checkpoint_step, list_checkpoints

        with self._looking[label]:
            if not self.due(label):  # another request looked meanwhile
                return None
            self._checked[label] = self.clock()
            spec = self.models.specs[label]
            now = checkpoint_step(spec.checkpoint) or 0
            try:
                found = list_checkpoints(spec.name)
            except OSError:  # the run's folder is being changed or went away: the model served so far stays
                return None
            newer = [p for p in found if checkpoint_step(p) > now and str(p) not in self.failed]
            for path in reversed(newer):  # the newest first; an older one only when a newer one does not load
                new = dataclasses.replace(spec, checkpoint=str(path))
                try:
                    opened = open_model(new)
                    model = explorer_model(opened)
                    info = describe(opened, self.models.info[label].scores)
                except Exception as exc:  # whatever broke it, the model served so far goes on serving
                    self.failed.add(str(path))
                    log.warning(
                        "attnkit serve: %s: %s does not load, still serving %s (%s)",
                        label,
                        path.name,
                        Path(spec.checkpoint).name,
                        exc,
                    )
                    continue
                group = self.models.translators if opened.kind is ModelKind.TRANSLATOR else self.models.captioners
                with self.lock:
                    group[label] = model
                    self.models.specs[label] = new
                    self.models.info[label] = info
                log.info("attnkit serve: %s now serves %s", label, path.name)
                return path.name
        return None
