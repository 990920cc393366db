"""Checkpoints: atomic, verifiable folders that rebuild a model and resume training.

A checkpoint is a folder::

    step-00001200/
      config.json          the model config (a JSON object with "model_type" and "attnkit_version")
      model.safetensors    the model's state_dict (every key, each a contiguous copy)
      trainer_state.pt     optimizer, scheduler, RNG states, data position, counters (optional)
      <extra files>        e.g. tokenizer.model, vocab.json
      COMPLETE             written last: a JSON manifest with each file's size and sha256

Why this shape:

* **Atomic.** The folder is assembled under ``<name>.tmp-XXXXXXXX`` next to its final place; every
  file in it is written to a temp file, flushed, fsynced and ``os.replace``-d; the ``COMPLETE``
  manifest goes last; only then is the folder renamed to its final name. A crash at any point
  leaves either the previous checkpoint or a ``.tmp-`` folder that :func:`list_checkpoints`
  ignores and :func:`load_checkpoint` refuses ("incomplete").
* **Verifiable.** The manifest's sizes and hashes catch truncated or bit-rotted files; the
  parsers' own errors (safetensors, JSON, torch.load) are re-raised as :class:`CheckpointError`
  naming the file.
* **Tied weights.** safetensors refuses tensors that share storage, so every key is saved as its
  own contiguous clone. ``model.load_state_dict`` copies values into parameters in place, so ties
  that the model's constructor creates (embedding = output projection) survive the round trip.
* **Small shipped models.** ``dtype=torch.float16`` casts floating tensors on save; loading into a
  float32 model casts back (``Tensor.copy_``).
* **Rebuildable.** the model registry (:mod:`attnkit.models.registry`) maps ``config["model_type"]`` to a class with a
  ``from_config(config: dict)`` classmethod, so :func:`load_model` needs only the folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import uuid
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save

from ..errors import AttnkitError
from ..models.registry import build_model
from ..output_folder import (
    OutputFolderError,
    WrittenFolder,
    check_output_folder,
    foreign_files,
    remove_owned_folder,
    replace_output_folder,
)
from ..paths import (
    COMPLETE_NAME,
    atomic_write_bytes,
    fsync_dir,
)  # one atomic write for the package: temp file, fsync, os.replace
from ..version import __version__

__all__ = [
    "COMPLETE_NAME",
    "CONFIG_NAME",
    "TRAINER_STATE_NAME",
    "WEIGHTS_NAME",
    "Checkpoint",
    "CheckpointError",
    "Export",
    "average_checkpoints",
    "checkpoint_step",
    "export_checkpoint",
    "is_training_run",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_into",
    "load_model",
    "rotate_checkpoints",
    "save_checkpoint",
    "step_dir_name",
    "unwrap_model",
]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
TRAINER_STATE_NAME = "trainer_state.pt"
_RESERVED = {CONFIG_NAME, WEIGHTS_NAME, TRAINER_STATE_NAME, COMPLETE_NAME}
_STEP_RE = re.compile(r"^step-(\d+)$")
_MAX_KEYS_SHOWN = 5


class CheckpointError(AttnkitError):
    """A checkpoint folder is missing, incomplete, corrupt or does not fit the model."""


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns.

    ``files`` maps every file name in the folder (including extra files such as
    ``tokenizer.model``) to its path, so callers can open tokenizers without guessing names.
    """

    path: Path
    config: dict
    state_dict: dict[str, torch.Tensor]
    trainer_state: dict | None
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def step(self) -> int | None:
        """The optimizer step this checkpoint was taken at, if it has a trainer state."""
        return None if self.trainer_state is None else self.trainer_state.get("step")


# ----------------------------------------------------------------------------- atomic writes


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_folder(
    path: Path, files: Mapping[str, bytes], *, staging: Path | None = None, aside: Path | None = None
) -> None:
    """Assemble ``files`` in ``staging`` (default ``<path>.tmp-XXXXXXXX`` beside it) with a COMPLETE
    manifest, then swap it in for ``path``: an earlier checkpoint there is renamed to ``aside`` (default
    ``<path>.old-XXXXXXXX``) and removed once the new one is in place. A ``path`` holding anything its
    COMPLETE does not list is refused (:func:`attnkit.output_folder.replace_output_folder`), nothing removed."""
    path = Path(path)
    check_output_folder(path, force=True)  # before any work: a folder of the user's is refused here
    path.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    tmp = Path(staging) if staging is not None else path.with_name(f"{path.name}.tmp-{token}")
    tmp.mkdir()  # a new name: never one of the user's
    manifest = {"attnkit_version": __version__, "files": {}}
    for name, data in files.items():
        atomic_write_bytes(tmp / name, data)
        manifest["files"][name] = {"size": len(data), "sha256": _sha256(data)}
    atomic_write_bytes(tmp / COMPLETE_NAME, json.dumps(manifest, indent=1).encode())
    fsync_dir(tmp)
    # A crash between the two renames leaves no `path`, only `.old-` and a complete `.tmp-`; both are
    # ignored by list_checkpoints, which then falls back to the previous step.
    try:
        replace_output_folder(
            tmp, path, force=True, aside=aside if aside is not None else path.with_name(f"{path.name}.old-{token}")
        )
    except OutputFolderError:  # the folder changed since the check: ours is removed, theirs kept
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(path.parent)


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DistributedDataParallel/DataParallel wrappers."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return model


def _model_type_of(model: torch.nn.Module) -> str:
    return getattr(type(model), "model_type", None) or type(model).__name__


# ----------------------------------------------------------------------------- save / load


def save_checkpoint(
    dir: str | os.PathLike,
    *,
    model: torch.nn.Module,
    config: Mapping[str, Any],
    trainer_state: dict | None = None,
    extra_files: Mapping[str, bytes] | None = None,
    dtype: torch.dtype | None = None,
    staging: str | os.PathLike | None = None,
    aside: str | os.PathLike | None = None,
) -> Path:
    """Write a checkpoint folder atomically and return its path.

    ``dir`` must be new, empty, or an earlier checkpoint (or export) whose manifest lists every file
    in it, which is then replaced; a folder holding anything else is an
    :class:`attnkit.output_folder.OutputFolderError` naming those files, and nothing is removed.
    ``staging`` / ``aside``: where the folder is assembled and where an earlier one is moved before it
    is removed (default: beside ``dir``, with a random suffix); a training run names them in its
    manifest first, so that an interrupted save's leftovers are known to be its own.

    ``config`` (a dict or a dataclass instance) is written as config.json with ``model_type`` (taken from the registered class
    when absent) and ``attnkit_version`` added. ``dtype`` (e.g. ``torch.float16``) casts floating
    tensors for smaller shipped files; leave it ``None`` for resumable training checkpoints.
    ``trainer_state`` is saved with ``torch.save`` and must hold only tensors, numbers, strings,
    lists/tuples/dicts (it is loaded back with ``weights_only=True``).
    ``extra_files`` maps plain file names (no folders) to bytes, e.g. ``{"tokenizer.model": b"..."}``.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"save_checkpoint: model must be a torch.nn.Module, got {type(model).__name__}")
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    if not isinstance(config, Mapping):
        raise TypeError(f"save_checkpoint: config must be a dict or a dataclass instance, got {type(config).__name__}")
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"save_checkpoint: dtype must be a floating torch.dtype or None, got {dtype!r}")
    if trainer_state is not None and not isinstance(trainer_state, dict):
        raise TypeError(f"save_checkpoint: trainer_state must be a dict or None, got {type(trainer_state).__name__}")
    model = unwrap_model(model)
    cfg = dict(config)
    own_type = _model_type_of(model)
    if "model_type" in cfg and getattr(type(model), "model_type", None) and cfg["model_type"] != own_type:
        raise ValueError(
            f"save_checkpoint: config['model_type']={cfg['model_type']!r} but the model is registered as {own_type!r}"
        )
    cfg.setdefault("model_type", own_type)
    cfg["attnkit_version"] = __version__
    try:
        config_bytes = json.dumps(cfg, indent=2, sort_keys=True).encode()
    except TypeError as e:
        raise TypeError(f"save_checkpoint: config must be JSON-serialisable: {e}") from e

    tensors = {}
    for k, v in model.state_dict().items():
        if not isinstance(v, torch.Tensor):
            continue
        v = v.detach().to("cpu")
        if dtype is not None and v.is_floating_point():
            v = v.to(dtype)
        tensors[k] = v.contiguous().clone()  # own storage: safetensors refuses shared/tied tensors
    meta = {"format": "pt", "attnkit_version": __version__, "model_type": cfg["model_type"]}
    files: dict[str, bytes] = {CONFIG_NAME: config_bytes, WEIGHTS_NAME: _st_save(tensors, metadata=meta)}
    if trainer_state is not None:
        buf = io.BytesIO()
        torch.save(trainer_state, buf)
        files[TRAINER_STATE_NAME] = buf.getvalue()
    for name, data in (extra_files or {}).items():
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
            raise ValueError(f"save_checkpoint: extra_files name {name!r} must be a plain file name")
        if name in _RESERVED:
            raise ValueError(f"save_checkpoint: extra_files name {name!r} is reserved")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"save_checkpoint: extra_files[{name!r}] must be bytes, got {type(data).__name__}")
        files[name] = bytes(data)
    path = Path(dir)
    _write_folder(
        path,
        files,
        staging=Path(staging) if staging is not None else None,
        aside=Path(aside) if aside is not None else None,
    )
    return path


def _read_manifest(path: Path) -> dict:
    marker = path / COMPLETE_NAME
    if not marker.is_file():
        raise CheckpointError(f"checkpoint {path} is incomplete: no {COMPLETE_NAME} marker (a save was interrupted?)")
    try:
        manifest = json.loads(marker.read_text())
        files = manifest["files"]
        if not isinstance(files, dict):
            raise TypeError("'files' is not an object")
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: corrupt {COMPLETE_NAME} manifest {marker}: {e}") from e
    return manifest


def _check_file(path: Path, name: str, entry: dict | None, verify: bool) -> Path:
    f = path / name
    if not f.is_file():
        raise CheckpointError(f"checkpoint {path}: missing file {f}")
    if entry is not None:
        size = f.stat().st_size
        if size != entry.get("size"):
            raise CheckpointError(
                f"checkpoint {path}: file {f} is truncated or corrupt ({size} bytes, manifest says {entry.get('size')})"
            )
        if verify and _sha256_file(f) != entry.get("sha256"):
            raise CheckpointError(f"checkpoint {path}: file {f} is corrupt (sha256 differs from the manifest)")
    return f


def load_checkpoint(
    dir: str | os.PathLike,
    map_location: str | torch.device = "cpu",
    *,
    load_trainer_state: bool = True,
    verify: bool = True,
) -> Checkpoint:
    """Read a checkpoint folder written by :func:`save_checkpoint`.

    Raises :class:`CheckpointError`, naming the offending file, if the folder or a file is
    missing, the save never completed, or a file is truncated/corrupt. ``verify`` also checks
    each file's sha256 against the manifest (sizes are always checked).
    """
    path = Path(dir)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint folder {path} does not exist")
    manifest = _read_manifest(path)
    entries = manifest["files"]

    cfg_file = _check_file(path, CONFIG_NAME, entries.get(CONFIG_NAME), verify)
    try:
        config = json.loads(cfg_file.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint {path}: corrupt JSON in {cfg_file}: {e}") from e
    if not isinstance(config, dict) or "model_type" not in config:
        raise CheckpointError(f"checkpoint {path}: {cfg_file} must be a JSON object with a 'model_type' key")

    w_file = _check_file(path, WEIGHTS_NAME, entries.get(WEIGHTS_NAME), verify)
    try:
        state_dict = _st_load(w_file.read_bytes())
    except (SafetensorError, ValueError, RuntimeError, OSError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: corrupt safetensors file {w_file}: {e}") from e
    if str(map_location) != "cpu":
        state_dict = {k: v.to(map_location) for k, v in state_dict.items()}

    trainer_state = None
    ts_file = path / TRAINER_STATE_NAME
    if TRAINER_STATE_NAME in entries or ts_file.exists():
        _check_file(path, TRAINER_STATE_NAME, entries.get(TRAINER_STATE_NAME), verify)
        if load_trainer_state:
            try:
                trainer_state = torch.load(ts_file, map_location=map_location, weights_only=True)
            except Exception as e:  # torch.load raises many types (RuntimeError, UnpicklingError, EOFError...)
                raise CheckpointError(f"checkpoint {path}: corrupt trainer state {ts_file}: {e}") from e
            if not isinstance(trainer_state, dict):
                raise CheckpointError(f"checkpoint {path}: {ts_file} does not hold a dict")

    files = {}
    for name in entries:
        files[name] = _check_file(path, name, entries[name], False)
    return Checkpoint(path=path, config=config, state_dict=state_dict, trainer_state=trainer_state, files=files)


def _fmt_keys(keys: Iterable[str], shapes: Mapping[str, torch.Tensor] | None = None) -> str:
    keys = sorted(keys)
    shown = []
    for k in keys[:_MAX_KEYS_SHOWN]:
        shown.append(f"{k} {tuple(shapes[k].shape)}" if shapes is not None else k)
    more = f" (+{len(keys) - _MAX_KEYS_SHOWN} more)" if len(keys) > _MAX_KEYS_SHOWN else ""
    return ", ".join(shown) + more


def load_into(
    model: torch.nn.Module,
    state_dict: Mapping[str, torch.Tensor],
    *,
    strict: bool = True,
    source: str | os.PathLike | None = None,
) -> torch.nn.Module:
    """Load ``state_dict`` into ``model`` after checking keys and shapes; returns the model.

    Raises :class:`CheckpointError` listing the first few missing, unexpected and
    shape-mismatched keys (with shapes), instead of torch's long RuntimeError. With
    ``strict=False`` only shape mismatches are errors. Floating dtypes are cast (fp16 -> fp32).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"load_into: model must be a torch.nn.Module, got {type(model).__name__}")
    model = unwrap_model(model)
    own = model.state_dict()
    where = f"checkpoint {source}" if source is not None else "state_dict"
    missing = set(own) - set(state_dict)
    unexpected = set(state_dict) - set(own)
    mismatched = [k for k in own.keys() & state_dict.keys() if tuple(own[k].shape) != tuple(state_dict[k].shape)]
    problems = []
    if mismatched:
        shown = [
            f"{k}: checkpoint {tuple(state_dict[k].shape)} vs model {tuple(own[k].shape)}"
            for k in sorted(mismatched)[:_MAX_KEYS_SHOWN]
        ]
        more = f" (+{len(mismatched) - _MAX_KEYS_SHOWN} more)" if len(mismatched) > _MAX_KEYS_SHOWN else ""
        problems.append(f"{len(mismatched)} shape mismatch(es): " + "; ".join(shown) + more)
    if strict and missing:
        problems.append(f"{len(missing)} missing key(s): " + _fmt_keys(missing, own))
    if strict and unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): " + _fmt_keys(unexpected, state_dict))
    if problems:
        raise CheckpointError(f"{where} does not fit {type(model).__name__}: " + "; ".join(problems))
    model.load_state_dict(dict(state_dict), strict=strict)
    return model


def load_model(
    dir: str | os.PathLike,
    *,
    map_location: str | torch.device = "cpu",
    model_type: str | None = None,
    strict: bool = True,
) -> tuple[torch.nn.Module, dict, Checkpoint]:
    """Rebuild the registered model class from config.json and load its weights.

    Returns ``(model, config, checkpoint)`` with the model in eval mode on ``map_location``.
    ``model_type``, if given, must match the checkpoint's (else :class:`CheckpointError`).
    The trainer state is not loaded (``checkpoint.trainer_state`` is None).
    """
    ckpt = load_checkpoint(dir, map_location, load_trainer_state=False)
    cfg_file = ckpt.path / CONFIG_NAME
    if model_type is not None and ckpt.config.get("model_type") != model_type:
        raise CheckpointError(
            f"checkpoint {ckpt.path}: {cfg_file} has model_type={ckpt.config.get('model_type')!r}, expected {model_type!r}"
        )
    try:
        model = build_model(ckpt.config)
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"checkpoint {ckpt.path}: cannot build a model from {cfg_file}: {e}") from e
    model.to(map_location)
    load_into(model, ckpt.state_dict, strict=strict, source=ckpt.path / WEIGHTS_NAME)
    model.eval()
    return model, ckpt.config, ckpt


# ----------------------------------------------------------------------------- folders of checkpoints


def step_dir_name(step: int) -> str:
    """The folder name for the checkpoint at optimizer step ``step``: ``step-00001200``."""
    return f"step-{int(step):08d}"


def list_checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """Complete ``step-*`` checkpoint folders in ``out_dir``, oldest step first.

    Folders without a COMPLETE marker and ``.tmp-``/``.old-`` leftovers of interrupted saves are
    skipped. Contents are not verified here; :func:`load_checkpoint` does that.
    """
    out = Path(out_dir)
    if not out.is_dir():
        return []
    found = []
    for p in out.iterdir():
        m = _STEP_RE.match(p.name)
        if m and p.is_dir() and (p / COMPLETE_NAME).is_file():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The optimizer step a ``step-XXXXXXXX`` folder was saved at (from its name), or None for another name."""
    m = _STEP_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def is_training_run(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a training run's folder (``--out-dir``: a ``train_log.jsonl`` and no ``config.json``
    of its own; its models are the ``step-*`` checkpoints inside), rather than a model folder."""
    from .progress import LOG_NAME

    path = Path(path)
    return path.is_dir() and (path / LOG_NAME).is_file() and not (path / CONFIG_NAME).is_file()


def latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete step checkpoint in ``out_dir``, or None."""
    ckpts = list_checkpoints(out_dir)
    return ckpts[-1] if ckpts else None


def rotate_checkpoints(
    out_dir: str | os.PathLike, keep_last: int, *, folder: WrittenFolder | None = None
) -> list[Path]:
    """Delete all but the newest ``keep_last`` step checkpoints (``best`` is never touched).

    Only checkpoints attnkit wrote are deleted: when ``out_dir`` has a run manifest (``folder``, or the
    one read from ``out_dir``), only those it lists; and only folders whose ``COMPLETE`` lists every
    file in them. One holding a file of the user's is kept, with a warning naming it and the file (a
    training run goes on: a note put beside a checkpoint must not cost the run). Returns the deleted
    paths. ``keep_last=None`` or ``0`` keeps everything.
    """
    if keep_last is None or keep_last <= 0:
        return []
    if folder is None:
        folder = WrittenFolder.read(out_dir)
    ckpts = list_checkpoints(out_dir)
    doomed = []
    for p in ckpts[:-keep_last]:
        if folder is not None and not folder.owns(p.name):
            continue
        others = foreign_files(p)
        if others:
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            warnings.warn(
                f"keep_last: the old checkpoint {p} holds files attnkit did not write ({shown}); it is kept: "
                "move them away and remove it yourself",
                stacklevel=2,
            )
            continue
        doomed.append(p)
    for p in doomed:
        if folder is not None:
            folder.remove(p.name)
        else:
            remove_owned_folder(p)
    return doomed


def remove_stale_temporaries(out_dir: str | os.PathLike, *, folder: WrittenFolder | None = None) -> list[Path]:
    """Remove the leftovers of interrupted saves in ``out_dir``: only the temporaries its run manifest
    (``folder``, or the one read from ``out_dir``) names; no manifest, nothing removed. A ``*.tmp-*``
    or ``*.old-*`` of the user's is never touched. Returns the removed paths."""
    if folder is None:
        folder = WrittenFolder.read(out_dir) if Path(out_dir).is_dir() else None
    return [] if folder is None else folder.clean_temporaries()


def average_checkpoints(dirs: Iterable[str | os.PathLike]) -> dict[str, torch.Tensor]:
    """Mean of the floating tensors of several checkpoints (e.g. the last k); others from the last one.

    Averages in float64 and casts back to each tensor's saved dtype. All checkpoints must have
    the same keys and shapes (else :class:`CheckpointError`). Load the result with :func:`load_into`.
    """
    dirs = [Path(d) for d in dirs]
    if not dirs:
        raise ValueError("average_checkpoints: dirs must name at least one checkpoint")
    acc: dict[str, torch.Tensor] = {}
    ref: dict[str, torch.Tensor] = {}
    for i, d in enumerate(dirs):
        sd = load_checkpoint(d, load_trainer_state=False).state_dict
        if i == 0:
            ref = sd
            acc = {k: v.double() for k, v in sd.items() if v.is_floating_point()}
            continue
        if set(sd) != set(ref):
            diff = set(sd) ^ set(ref)
            raise CheckpointError(f"average_checkpoints: {d} has different keys from {dirs[0]}: {_fmt_keys(diff)}")
        for k, v in sd.items():
            if v.shape != ref[k].shape:
                raise CheckpointError(
                    f"average_checkpoints: {d} key {k} has shape {tuple(v.shape)}, {dirs[0]} has {tuple(ref[k].shape)}"
                )
            if k in acc:
                acc[k] += v.double()
            else:
                ref[k] = v  # non-float tensors (counters, int buffers): keep the last one's
    n = len(dirs)
    return {k: (acc[k] / n).to(v.dtype) if k in acc else v for k, v in ref.items()}


@dataclass(frozen=True)
class Export:
    """What :func:`export_checkpoint` wrote: the folder, the checkpoints its weights come from, its size."""

    path: Path
    sources: list[Path]
    size_bytes: int


def export_checkpoint(
    source: str | os.PathLike,
    out: str | os.PathLike,
    *,
    average_last: int | None = None,
    dtype: torch.dtype | None = torch.float16,
    extra_files: Mapping[str, bytes] | None = None,
    force: bool = False,
) -> Export:
    """Write a shippable copy of a checkpoint to ``out``: the weights (cast to ``dtype``; ``None`` keeps
    them), the config and the extra files (tokenizer, vocabulary), without the trainer state.

    ``average_last=k``: ``source`` is a run folder and the weights are the mean of its last ``k``
    step checkpoints (Vaswani et al. 2017, §6.1: "averaging the last 5 checkpoints"); the config and
    extra files come from the newest. Too few checkpoints is a :class:`CheckpointError`.
    ``extra_files``: files to add to the copy (or to replace there), e.g. a translator's ``generation.json``.

    ``out`` must be a new or empty folder; with ``force``, an earlier export or checkpoint whose manifest
    lists every file in it, which is replaced (the old one removed only once the new one is in place).
    ``out`` may not be ``source`` or a checkpoint read, hold one, or lie inside one; a new folder inside a
    run folder is fine (:func:`attnkit.output_folder.check_sources`). Else an
    :class:`attnkit.output_folder.OutputFolderError`, before any work, and nothing is removed.
    """
    sources = [Path(source)]
    if average_last is not None:
        found = list_checkpoints(source)
        if len(found) < average_last:
            listed = f": {', '.join(p.name for p in found)}" if found else ""
            raise CheckpointError(f"{source} holds {len(found)} complete step checkpoint(s){listed}")
        sources = found[-average_last:]
    check_output_folder(out, force=force, sources=dict.fromkeys([Path(source), *sources]))
    model, config, ckpt = load_model(sources[-1])
    if len(sources) > 1:
        load_into(model, average_checkpoints(sources), source=f"mean of {len(sources)} checkpoints")
    extra = {name: Path(p).read_bytes() for name, p in ckpt.files.items() if name not in _RESERVED}
    extra.update(extra_files or {})
    path = save_checkpoint(out, model=model, config=config, extra_files=extra, dtype=dtype)
    size = sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())
    return Export(Path(path), sources, size)
