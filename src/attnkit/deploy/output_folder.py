"""Where an export is written: a new or empty folder, or one an earlier attnkit export wrote; never another.

``attnkit export MODEL OUT --force`` replaces an earlier export in ``OUT``. What it must not do is
remove a folder the user made (``--force ~/Documents`` by a slip of the shell history), or the
user's own files put beside an export. So an export writes, last, its manifest (``attnkit.json``,
:mod:`attnkit.deploy.manifest`), which lists every file the export wrote; and ``--force`` replaces
``OUT`` only when that manifest is there and ``OUT`` holds nothing else. Anything else is a
:class:`attnkit.deploy.manifest.DeployError` naming the folder (and the files that are not the
export's), and nothing is removed.

Every export format uses :func:`check_output_folder` before its work and
:func:`replace_output_folder` to put the finished export in place. Torch-free: standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .manifest import FILENAME, FORMAT, DeployError

__all__ = ["check_output_folder", "export_files", "replace_output_folder"]


def export_files(folder: str | os.PathLike) -> set[str] | None:
    """The files (paths relative to ``folder``, ``/``-separated) that an attnkit export wrote into
    ``folder``, read from its manifest; ``None`` when ``folder`` holds no attnkit export manifest.
    A manifest from before the list was kept lists nothing beyond itself: then only the folder's
    existing files are known, and they are taken as the export's (the manifest vouches for the folder)."""
    path = Path(folder) / FILENAME
    if not path.is_file() or path.is_symlink():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None
    files = manifest.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return _files_in(Path(folder))
    return {*files, FILENAME}


def _files_in(folder: Path) -> set[str]:
    """Every entry under ``folder`` that is not a folder (files, links), relative, ``/``-separated."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_symlink() or not p.is_dir()}


def check_output_folder(out: str | os.PathLike, *, force: bool) -> None:
    """Refuse an ``out`` an export must not write: a file, a symbolic link, or a non-empty folder
    (without ``force``; with it, unless an earlier attnkit export wrote it and it holds nothing else).

    Called before the export's work (so a refusal costs nothing) and again by
    :func:`replace_output_folder` just before anything is removed."""
    out = Path(out)
    if out.is_symlink():
        raise DeployError(f"{out} is a symbolic link; give the folder itself, or a new folder")
    out = out.resolve()  # "." and "..": a real name, for the messages and for the rename aside
    if not out.exists():
        return
    if not out.is_dir():
        raise DeployError(f"{out} is a file; give a folder")
    if not any(out.iterdir()):
        return
    if not force:
        raise DeployError(f"{out} exists and is not empty; choose another folder, or pass --force to replace an export")
    written = export_files(out)
    if written is None:
        raise DeployError(
            f"--force replaces only a folder an attnkit export wrote, and {out} is not one (no attnkit export "
            f"{FILENAME} in it); nothing was removed: choose another folder"
        )
    others = sorted(_files_in(out) - written)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise DeployError(
            f"--force: {out} holds files the earlier export did not write ({shown}); nothing was removed: "
            "move them away or choose another folder"
        )


def replace_output_folder(staging: str | os.PathLike, out: str | os.PathLike, *, force: bool) -> Path:
    """Move the finished export ``staging`` to ``out``, replacing the earlier export there (checked
    again by :func:`check_output_folder`). The old folder is renamed aside first and removed only
    once the new one is in place, so an interrupted replace leaves one whole export, not a mix."""
    check_output_folder(out, force=force)
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if out.exists():  # empty, or an earlier export
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    try:
        shutil.move(str(staging), str(out))
    except BaseException:
        if old is not None and not out.exists():
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old)
    return out
