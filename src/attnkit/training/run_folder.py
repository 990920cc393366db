"""A training run's folder (``--out-dir``): what the run writes there, named in its manifest first.

A run writes ``train_config.json``, ``train_log.jsonl``, ``step-XXXXXXXX/`` checkpoints and ``best/``,
and, while it saves, ``<name>.tmp-XXXXXXXX`` / ``<name>.old-XXXXXXXX`` folders beside them. Each is
named in the folder's ``attnkit-files.json`` (:class:`attnkit.output_folder.WrittenFolder`) before it is
written, so that:

- a run starts only in a new or empty folder, or in a run's folder (one with that manifest);
- a name in the way that the run did not write (a ``best/`` of the user's, their ``train_config.json``)
  is refused, never replaced;
- the leftovers of an interrupted save are removed at the next start because the manifest names
  them; a ``notes.tmp-1`` of the user's is never touched.

A run folder made by attnkit before the manifest (a ``train_log.jsonl``, ``step-*`` folders with
``COMPLETE``) is adopted: its log, its config and its COMPLETE-marked ``step-*`` and ``best`` folders
are taken as the run's own; anything else in it is left alone.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from ..output_folder import WrittenFolder
from ..paths import COMPLETE_NAME
from .checkpoint import save_checkpoint
from .progress import LOG_NAME

__all__ = [
    "BEST_NAME",
    "RUN_KIND",
    "TRAIN_CONFIG_NAME",
    "check_run_folder",
    "open_run_folder",
    "save_in_run",
]

TRAIN_CONFIG_NAME = "train_config.json"  # the task config a run was started with
BEST_NAME = "best"
RUN_KIND = "training-run"
_OWN_CHECKPOINT = re.compile(r"^(step-\d+|best)$")


def _earlier_run(path: Path) -> list[str] | None:
    """The names a run written before manifests left in ``path`` (its log, config and COMPLETE-marked
    checkpoints), or None when ``path`` is not such a run (no ``train_log.jsonl``)."""
    if not (path / LOG_NAME).is_file():
        return None
    names = [LOG_NAME]
    names += [n for n in (TRAIN_CONFIG_NAME, TRAIN_CONFIG_NAME + ".tmp") if (path / n).is_file()]
    names += [
        p.name
        for p in path.iterdir()
        if _OWN_CHECKPOINT.match(p.name) and p.is_dir() and not p.is_symlink() and (p / COMPLETE_NAME).is_file()
    ]
    return names


def check_run_folder(out_dir: str | os.PathLike) -> None:
    """Refuse, before any work, an ``out_dir`` a run must not write: a file, or a non-empty folder that
    is not a run's (an :class:`attnkit.output_folder.OutputFolderError` naming what it holds)."""
    WrittenFolder.check(out_dir, RUN_KIND, adopt=_earlier_run)


def open_run_folder(out_dir: str | os.PathLike) -> WrittenFolder:
    """The run folder ``out_dir`` for writing (created when new, an earlier run's adopted), with its manifest."""
    return WrittenFolder.open(out_dir, RUN_KIND, adopt=_earlier_run)


def save_in_run(folder: WrittenFolder, name: str, **kwargs) -> Path:
    """:func:`attnkit.training.checkpoint.save_checkpoint` to ``folder/name`` (``kwargs``: its arguments),
    with the checkpoint and its two temporaries named in the run's manifest before they are written.
    A ``name`` in the way that the run did not write, or an earlier checkpoint there holding a file of
    the user's, is refused and nothing is removed."""
    token = uuid.uuid4().hex[:8]
    tmp, old = f"{name}.tmp-{token}", f"{name}.old-{token}"
    folder.claim(name)
    folder.claim_temporaries(tmp, old)
    try:
        return save_checkpoint(folder.path / name, staging=folder.path / tmp, aside=folder.path / old, **kwargs)
    finally:
        folder.release(tmp, old)  # the names of those gone; an interrupted save's stay listed, for the next start
