"""``attnkit.json``: what travels beside an engine export, so the export translates on its own.

An engine's own files say how to run the network; they do not say how attnkit turns text into its
input and back, nor how it searches. This small JSON does, and the engine path reads nothing else
of attnkit's:

- ``tokenizer`` / ``tokenizer_sha256``: the sentencepiece model copied into the export, and its
  digest (the one :func:`attnkit.tasks.translation.lexical_shortlist.tokenizer_digest` computes);
- ``source_language`` / ``target_language``: the language pair;
- ``length_penalty`` / ``gnmt_length_penalty``: the ``β`` of the engine's own length penalty, and the
  GNMT ``α`` attnkit searches the same model with (its ``generation.json``); the two formulas differ,
  and ``β = 5α / 6`` ranks alike near 25 pieces (:func:`attnkit.deploy.ct2_engine.ctranslate2_length_penalty`);
- ``max_src_len``, ``max_len``: the longest source accepted, the most tokens decoded;
- ``alignment``: which cross-attention the engine returns as the alignment;
- ``files``: every file the export wrote, the only ones ``attnkit export --force`` replaces
  (:mod:`attnkit.output_folder`).

Torch-free: it imports only the standard library.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..errors import AttnkitError
from ..output_folder import ENGINE_FORMAT as FORMAT
from ..output_folder import ENGINE_MANIFEST as FILENAME

__all__ = ["FILENAME", "FORMAT", "DeployError", "read_manifest", "tokenizer_sha256", "write_manifest"]

VERSION = 1


class DeployError(AttnkitError, ValueError):
    """A model that cannot be exported to an engine, or an export that cannot be used."""


def tokenizer_sha256(path: str | os.PathLike) -> str:
    """sha256 of a ``tokenizer.model`` file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_manifest(folder: str | os.PathLike, manifest: dict) -> Path:
    """Write ``folder/attnkit.json`` (``format`` and ``version`` added, and ``files``: every file already
    in ``folder``, so an export writes its manifest last). The list is what ``attnkit export --force``
    may replace later, and nothing else (:mod:`attnkit.output_folder`)."""
    folder = Path(folder)
    files = sorted(
        rel
        for p in folder.rglob("*")
        if (p.is_symlink() or not p.is_dir()) and (rel := p.relative_to(folder).as_posix()) != FILENAME
    )
    path = folder / FILENAME
    path.write_text(
        json.dumps({"format": FORMAT, "version": VERSION, "files": files, **manifest}, indent=2, ensure_ascii=False)
        + "\n",
        encoding="utf-8",
    )
    return path


def read_manifest(folder: str | os.PathLike, *, engine: str) -> dict:
    """The manifest of an ``engine`` export in ``folder``; a :class:`DeployError` that says what
    is wrong when the folder is not one (no manifest, another engine, a changed tokenizer)."""
    folder = Path(folder)
    path = folder / FILENAME
    if not path.is_file():
        from ..pretrained import hf_source

        if hf_source(folder) is not None:  # a Hugging Face model: no attnkit export can be made of it
            raise DeployError(
                f"{folder} is a Hugging Face model; the {engine} engine serves attnkit translators exported with "
                f"`attnkit export MODEL OUT --format {engine}`, and a Hugging Face model is served with the "
                "default engine (leave out --engine)"
            )
        hint = (
            "it is an attnkit PyTorch model: use --engine pytorch, or export it with "
            f"`attnkit export {folder} OUT --format {engine}`"
            if (folder / "model.safetensors").is_file()
            else f"make one with `attnkit export MODEL OUT --format {engine}`"
        )
        raise DeployError(f"{folder} is not an attnkit {engine} export (no {FILENAME}); {hint}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DeployError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DeployError(f"{path} is not an attnkit export manifest (format {FORMAT!r} expected)")
    if manifest.get("engine") != engine:
        raise DeployError(f"{folder} is a {manifest.get('engine')!r} export, not a {engine} one")
    tok = folder / manifest.get("tokenizer", "tokenizer.model")
    if not tok.is_file():
        raise DeployError(f"{folder}: the export's tokenizer {tok.name} is missing")
    if tokenizer_sha256(tok) != manifest.get("tokenizer_sha256"):
        raise DeployError(f"{tok}: the tokenizer was changed after export (its sha256 differs from {FILENAME}'s)")
    return manifest
