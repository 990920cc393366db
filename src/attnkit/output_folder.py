"""What attnkit may write, replace or remove in a folder: only what its own manifest says it wrote.

Every command that writes a folder (``attnkit export`` in each format, ``attnkit train --out-dir``,
``attnkit demo --out``) goes through this module, so that none of them deletes or replaces a file of
the user's: a thesis beside a model, a ``notes.tmp-1``, a ``best/`` folder the user made by hand.
attnkit knows what is its own only from a manifest it wrote itself:

- a **checkpoint** folder's ``COMPLETE`` (:mod:`attnkit.training.checkpoint`), written last, lists
  every file of the checkpoint;
- an **engine export**'s ``attnkit.json`` (:mod:`attnkit.deploy.manifest`) lists every file of the export;
- a folder attnkit writes **entries into** beside the user's own files (a training run, the demo's
  pictures) has ``attnkit-files.json`` (:class:`WrittenFolder`): the top-level names attnkit wrote,
  and the temporaries it is about to write, named *before* they are created, so an interrupted
  save's leftovers are known to be attnkit's and a user's ``x.tmp-123`` is never taken for one.

Two ways to write, then:

- a whole folder (a checkpoint, an export): :func:`check_output_folder` before the work (a new or
  empty folder; with ``force``, one whose manifest lists every file in it, and nothing else) and
  :func:`replace_output_folder` to swap the finished folder in, the old one renamed aside and
  removed only once the new one is in place; an output that is, holds or lies inside a folder
  being read (``sources``) is refused;
- entries in a folder (:class:`WrittenFolder`): each name is claimed before it is written, and a
  name in the way that the manifest does not list is refused.

A refusal is an :class:`OutputFolderError` naming the folder and the files in the way, and nothing
is removed. A single file (``--output``, ``--plot``, ``--html``) is written whole or not at all by
:func:`attnkit.paths.atomic_writer`, which this module's own writes use too. Torch-free, standard library only, at the bottom layer so that every layer may use it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from .errors import AttnkitError
from .paths import COMPLETE_NAME, atomic_write_text, fsync_dir

__all__ = [
    "ENGINE_FORMAT",
    "ENGINE_MANIFEST",
    "FOLDER_FORMAT",
    "FOLDER_MANIFEST",
    "OutputFolderError",
    "WrittenFolder",
    "check_output_folder",
    "check_sources",
    "files_in",
    "foreign_files",
    "owned_files",
    "remove_owned_folder",
    "replace_output_folder",
    "staging_beside",
]

ENGINE_MANIFEST = "attnkit.json"  # an engine export's manifest (attnkit.deploy.manifest writes it)
ENGINE_FORMAT = "attnkit-engine-export"
FOLDER_MANIFEST = "attnkit-files.json"  # a WrittenFolder's manifest
FOLDER_FORMAT = "attnkit-folder"
_SHOWN = 3


class OutputFolderError(AttnkitError, ValueError):
    """A folder attnkit was asked to write holds files it did not write (or is the folder being read):
    refused, nothing removed."""


def _shown(names: Iterable[str]) -> str:
    names = sorted(names)
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def files_in(folder: str | os.PathLike) -> set[str]:
    """Every entry under ``folder`` that is not a folder (files, links), relative, ``/``-separated;
    an empty sub-folder counts as an entry too (``sub/``), so that it is never removed unseen."""
    folder = Path(folder)
    out = set()
    for p in folder.rglob("*"):
        if p.is_symlink() or not p.is_dir():
            out.add(p.relative_to(folder).as_posix())
        elif not any(p.iterdir()):
            out.add(p.relative_to(folder).as_posix() + "/")
    return out


def _read_json(path: Path) -> object:
    if not path.is_file() or path.is_symlink():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def owned_files(folder: str | os.PathLike) -> set[str] | None:
    """The files (relative, ``/``-separated) that attnkit wrote into ``folder`` as a whole, read from its
    manifest, the manifest included: a checkpoint's ``COMPLETE``, or an engine export's ``attnkit.json``.
    ``None`` when ``folder`` holds neither. An engine manifest from before the list was kept lists
    nothing: then the folder's existing files are taken as the export's (the manifest vouches for it)."""
    folder = Path(folder)
    complete = _read_json(folder / COMPLETE_NAME)
    if isinstance(complete, dict) and isinstance(complete.get("files"), dict):
        return {*complete["files"], COMPLETE_NAME}
    engine = _read_json(folder / ENGINE_MANIFEST)
    if isinstance(engine, dict) and engine.get("format") == ENGINE_FORMAT:
        files = engine.get("files")
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            return files_in(folder)
        return {*files, ENGINE_MANIFEST}
    return None


def foreign_files(folder: str | os.PathLike) -> list[str]:
    """The files in ``folder`` that its attnkit manifest does not list (every file, without one), sorted."""
    owned = owned_files(folder) or set()
    return sorted(files_in(folder) - owned)


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_sources(out: str | os.PathLike, sources: Iterable[str | os.PathLike]) -> None:
    """Refuse an output folder ``out`` that is one of ``sources`` (the folders a command reads), holds
    one, or lies inside one and already exists: writing it would replace what is being read. A new
    folder inside a source that is not itself a checkpoint or an export (a training run's folder) is
    fine: nothing of the source's is touched. Paths are compared resolved (links, ``..``)."""
    target = Path(out).resolve()
    for source in sources:
        src = Path(source).resolve()
        if target == src:
            raise OutputFolderError(f"{out} is the folder being exported; nothing was written: choose another folder")
        if _within(src, target):
            raise OutputFolderError(
                f"{out} holds {source}, the folder being exported; nothing was written: choose another folder"
            )
        if _within(target, src):
            if owned_files(src) is not None:
                raise OutputFolderError(
                    f"{out} lies inside {source}, the model being exported (a folder there would not be "
                    "the model's); nothing was written: choose a folder outside it"
                )
            if target.exists():
                raise OutputFolderError(
                    f"{out} lies inside {source}, the folder being exported, and already exists; nothing "
                    "was written: choose a new folder"
                )


def check_output_folder(
    out: str | os.PathLike,
    *,
    force: bool,
    sources: Iterable[str | os.PathLike] = (),
    owned: Callable[[Path], set[str] | None] = owned_files,
) -> None:
    """Refuse an ``out`` a whole-folder write must not replace: a file, a symbolic link, one of ``sources``
    (:func:`check_sources`), or a non-empty folder (without ``force``; with it, unless an attnkit manifest,
    ``COMPLETE`` or ``attnkit.json``, lists every file in it). ``owned``: how the manifest is read (the
    files it lists, or None without one), for a folder whose manifest is a command's own (a prepared
    corpus's ``meta.json``); default :func:`owned_files`.

    Called before the work (so a refusal costs nothing) and again by :func:`replace_output_folder`
    just before anything is removed."""
    path = Path(out)
    if path.is_symlink():
        raise OutputFolderError(f"{out} is a symbolic link; give the folder itself, or a new folder")
    check_sources(path, sources)
    path = path.resolve()  # "." and "..": a real name, for the messages and for the rename aside
    if not path.exists():
        return
    if not path.is_dir():
        raise OutputFolderError(f"{path} is a file; give a folder")
    if not any(path.iterdir()):
        return
    if not force:
        raise OutputFolderError(
            f"{path} exists and is not empty; choose another folder, or pass --force to replace an export"
        )
    listed = owned(path)
    if listed is None:
        raise OutputFolderError(
            f"{path} is not a folder attnkit wrote (no attnkit export {ENGINE_MANIFEST} or checkpoint "
            f"{COMPLETE_NAME} in it; it holds {_shown(files_in(path))}), and attnkit replaces only an earlier "
            "export or checkpoint of its own; nothing was removed: choose another folder"
        )
    others = sorted(files_in(path) - listed)
    if others:
        raise OutputFolderError(
            f"{path} holds files the earlier attnkit export or checkpoint there did not write ({_shown(others)}); "
            "nothing was removed: move them away or choose another folder"
        )


def _move(src: Path, dst: Path) -> None:
    """``os.replace``, or a copying move when ``src`` is on another file system (a system temp folder)."""
    try:
        os.replace(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.move(str(src), str(dst))


def replace_output_folder(
    staging: str | os.PathLike,
    out: str | os.PathLike,
    *,
    force: bool,
    sources: Iterable[str | os.PathLike] = (),
    aside: str | os.PathLike | None = None,
    owned: Callable[[Path], set[str] | None] = owned_files,
) -> Path:
    """Move the finished folder ``staging`` to ``out``, replacing an earlier attnkit folder there (checked
    again by :func:`check_output_folder`). The old folder is renamed to ``aside`` (default
    ``.<name>.old-<pid>`` beside it) first and removed only once the new one is in place, so an
    interrupted replace leaves one whole folder, not a mix. ``owned``: as for :func:`check_output_folder`.
    Returns ``out``, resolved."""
    check_output_folder(out, force=force, sources=sources, owned=owned)
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if out.exists():  # empty, or an earlier attnkit folder holding nothing else
        old = Path(aside) if aside is not None else out.with_name(f".{out.name}.old-{os.getpid()}")
        if old.exists() or old.is_symlink():
            raise OutputFolderError(f"{old} is in the way of replacing {out}; nothing was removed: move it away")
        os.replace(out, old)
    try:
        _move(Path(staging), out)
    except BaseException:
        if old is not None and not out.exists():
            os.replace(old, out)
        raise
    fsync_dir(out.parent)  # the rename itself made durable before the old folder goes
    if old is not None:
        shutil.rmtree(old)
    return out


def staging_beside(out: str | os.PathLike):
    """A temporary folder (a ``tempfile.TemporaryDirectory`` context) to assemble a whole-folder output in,
    beside ``out`` when its parent exists (else in the system's temporary folder): on the same file system,
    so that :func:`replace_output_folder`'s move is one ``rename`` and a process killed at any instant leaves
    ``out`` as the old folder, the new one, or absent (between the two renames, the old one kept aside as
    ``.<name>.old-<pid>``), never a half-copied folder. A kill leaves the hidden ``.<name>.tmp-*`` behind."""
    import tempfile

    out = Path(out).resolve()
    parent = out.parent if out.parent.is_dir() else None
    return tempfile.TemporaryDirectory(prefix=f".{out.name}.tmp-", dir=parent)


def remove_owned_folder(path: str | os.PathLike) -> None:
    """Remove ``path``, a checkpoint or export folder, only when its manifest lists every file in it;
    else an :class:`OutputFolderError` naming the folder and the files that are not attnkit's."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        raise OutputFolderError(f"{path} is not a folder attnkit wrote; nothing was removed")
    if owned_files(path) is None:
        raise OutputFolderError(
            f"{path} has no attnkit manifest ({COMPLETE_NAME} or {ENGINE_MANIFEST}); nothing was removed"
        )
    others = foreign_files(path)
    if others:
        raise OutputFolderError(
            f"{path} holds files attnkit did not write ({_shown(others)}); nothing was removed: move them away"
        )
    shutil.rmtree(path)


class WrittenFolder:
    """A folder attnkit writes named entries into (files and folders at its top level) beside the user's
    own files, with ``attnkit-files.json``: the names it wrote (``files``) and the temporaries it may
    leave when interrupted (``temporaries``), each listed before it is created.

    ``kind`` (``"training-run"``, ``"demo"``) says which command's folder it is; another command's is
    refused. Build one with :meth:`open`; every method that writes the manifest does so atomically."""

    def __init__(self, path: Path, kind: str, files: Iterable[str] = (), temporaries: Iterable[str] = ()):
        self.path = Path(path)
        self.kind = kind
        self.files: set[str] = set(files)
        self.temporaries: set[str] = set(temporaries)

    # ------------------------------------------------------------------ opening

    @staticmethod
    def _check_kind(kind: str) -> None:
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"kind must be a non-empty str, got {kind!r}")

    @classmethod
    def read(cls, path: str | os.PathLike, kind: str | None = None) -> WrittenFolder | None:
        """The manifest of ``path`` (of ``kind``, when given), or None when it has none; a manifest that
        is unreadable or another command's is an :class:`OutputFolderError`."""
        path = Path(path)
        manifest_path = path / FOLDER_MANIFEST
        if not manifest_path.exists() and not manifest_path.is_symlink():
            return None
        data = _read_json(manifest_path)
        if (
            not isinstance(data, dict)
            or data.get("format") != FOLDER_FORMAT
            or not all(isinstance(data.get(k), list) for k in ("files", "temporaries"))
        ):
            raise OutputFolderError(
                f"{manifest_path} is not an attnkit manifest attnkit can read; nothing was changed: choose another folder"
            )
        if kind is not None and data.get("kind") != kind:
            raise OutputFolderError(
                f"{path} is attnkit's {data.get('kind')!r} folder, not a {kind} one; nothing was changed: "
                "choose another folder"
            )
        names = [n for k in ("files", "temporaries") for n in data[k]]
        if not all(isinstance(n, str) and _plain_name(n) for n in names):
            raise OutputFolderError(f"{manifest_path} lists a name that is not a plain file name; nothing was changed")
        return cls(path, str(data.get("kind")), data["files"], data["temporaries"])

    @classmethod
    def check(
        cls, path: str | os.PathLike, kind: str, *, adopt: Callable[[Path], Iterable[str] | None] | None = None
    ) -> None:
        """What :meth:`open` refuses, checked without creating or writing anything (a command calls it
        before its work): ``path`` must be new, an empty folder, a folder with this ``kind``'s manifest,
        or one ``adopt`` recognises as attnkit's own from before manifests (it returns the names attnkit
        wrote there, or None)."""
        cls._plan(Path(path), kind, adopt)

    @classmethod
    def _plan(cls, path: Path, kind: str, adopt) -> WrittenFolder | None:
        cls._check_kind(kind)
        if path.exists() and not path.is_dir():
            raise OutputFolderError(f"{path} is a file; give a folder")
        if not path.exists() or not any(path.iterdir()):
            return None  # new: open() writes an empty manifest
        found = cls.read(path, kind)
        if found is not None:
            return found
        names = adopt(path) if adopt is not None else None
        if names is not None:
            return cls(path, kind, names)
        raise OutputFolderError(
            f"{path} is not empty and attnkit did not write it (no {FOLDER_MANIFEST}; it holds "
            f"{_shown(files_in(path))}); nothing was changed: choose a new or empty folder"
        )

    @classmethod
    def open(
        cls, path: str | os.PathLike, kind: str, *, adopt: Callable[[Path], Iterable[str] | None] | None = None
    ) -> WrittenFolder:
        """The folder ``path`` for writing, created when new, with its manifest written (see :meth:`check`
        for what is refused)."""
        path = Path(path)
        folder = cls._plan(path, kind, adopt)
        if folder is None:
            path.mkdir(parents=True, exist_ok=True)
            folder = cls(path, kind)
            folder._save()
        elif not (path / FOLDER_MANIFEST).exists():  # adopted: its manifest from now on
            folder._save()
        return folder

    def _save(self) -> None:
        atomic_write_text(
            self.path / FOLDER_MANIFEST,
            json.dumps(
                {
                    "format": FOLDER_FORMAT,
                    "version": 1,
                    "kind": self.kind,
                    "files": sorted(self.files),
                    "temporaries": sorted(self.temporaries),
                },
                indent=1,
            )
            + "\n",
        )

    # ------------------------------------------------------------------ writing

    def owns(self, name: str) -> bool:
        """Whether ``name`` (a top-level entry) is one attnkit wrote here, or a temporary of its own."""
        return name in self.files or name in self.temporaries

    def _claim(self, names: Iterable[str], into: set[str]) -> None:
        new = []
        for name in names:
            if not isinstance(name, str) or not _plain_name(name):
                raise ValueError(f"name must be a plain file name (no folders), got {name!r}")
            if self.owns(name):
                continue
            entry = self.path / name
            if entry.exists() or entry.is_symlink():
                raise OutputFolderError(
                    f"{self.path} holds {name}, which attnkit did not write (not in {FOLDER_MANIFEST}); nothing "
                    f"was changed: move it away or choose another folder"
                )
            new.append(name)
        if new:
            into.update(new)
            self._save()

    def claim(self, *names: str) -> list[Path]:
        """Name ``names`` in the manifest before they are written (those it already names are fine);
        one in the way that attnkit did not write is an :class:`OutputFolderError`. Their paths."""
        self._claim(names, self.files)
        return [self.path / n for n in names]

    def claim_temporaries(self, *names: str) -> list[Path]:
        """:meth:`claim` for temporaries: names removed by :meth:`clean_temporaries` when found later."""
        self._claim(names, self.temporaries)
        return [self.path / n for n in names]

    def release(self, *names: str) -> None:
        """Drop ``names`` from the manifest (entries or temporaries that are gone); an entry still there
        is kept listed, as attnkit's."""
        gone = [n for n in names if self.owns(n) and not (self.path / n).exists() and not (self.path / n).is_symlink()]
        if gone:
            self.files.difference_update(gone)
            self.temporaries.difference_update(gone)
            self._save()

    def clean_temporaries(self, keep: Iterable[str] = ()) -> list[Path]:
        """Remove the temporaries the manifest names that are still there (an interrupted save's), except
        ``keep``; only those: any other ``*.tmp-*`` is not attnkit's. The removed paths."""
        keep = set(keep)
        removed = []
        for name in sorted(self.temporaries - keep):
            p = self.path / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
                removed.append(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
                removed.append(p)
        self.release(*(self.temporaries - keep))
        return removed

    def remove(self, name: str) -> None:
        """Remove the entry ``name``: one the manifest names, and, for a folder, one whose own manifest
        (``COMPLETE``, ``attnkit.json``) lists every file in it; else an :class:`OutputFolderError`."""
        p = self.path / name
        if not self.owns(name):
            raise OutputFolderError(f"{p} was not written by attnkit (not in {FOLDER_MANIFEST}); nothing was removed")
        if p.is_dir() and not p.is_symlink():
            remove_owned_folder(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
        self.release(name)


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and name != FOLDER_MANIFEST
