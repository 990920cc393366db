"""Caption sets in the Karpathy-split JSON format (Flickr8k, Flickr30k, COCO), read and checked.

The format Karpathy & Fei-Fei published their Flickr8k/30k and COCO splits in, and the one the Show,
Attend and Tell literature reports on, so people can train ``attnkit train captioning --captions
dataset_flickr8k.json --images Flicker8k_Dataset/`` on their own photos::

    {"images": [{"filename": "x.jpg", "filepath": "val2014",   # filepath optional
                 "split": "train" | "val" | "test" | "restval",
                 "sentences": [{"tokens": ["a", "dog"], "raw": "A dog."}, ...]},
                ...]}

An image lives at ``images_dir/filepath/filename`` when that file exists, else at
``images_dir/filename``. This module reads the captions and finds the files; turning a file into the
captioner's input is :func:`attnkit.tasks.captioning.load_image_file`'s job.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, no_such_file

__all__ = ["KARPATHY_SPLITS", "KarpathyImage", "karpathy_split", "read_karpathy"]

KARPATHY_SPLITS = ("train", "val", "test", "restval")


@dataclass(frozen=True)
class KarpathyImage:
    """One image of the set: its file, its split and its captions (lower-case words joined by one space)."""

    path: Path
    split: str
    captions: tuple[str, ...]


def _caption(sentence: Any, where: str) -> str:
    """The caption of one sentence entry: its ``tokens``, else its ``raw`` text split on spaces."""
    if not isinstance(sentence, dict):
        raise InputError(f"{where} is not an object")
    tokens = sentence.get("tokens")
    if tokens is None:
        raw = sentence.get("raw")
        if not isinstance(raw, str):
            raise InputError(f"{where} has neither 'tokens' nor 'raw'")
        tokens = raw.split()
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise InputError(f"{where}.tokens is not a list of strings")
    words = [w.lower() for t in tokens for w in t.split()]
    if not words:
        raise InputError(f"{where} is an empty caption")
    return " ".join(words)


def read_karpathy(json_path: str | os.PathLike, images_dir: str | os.PathLike) -> list[KarpathyImage]:
    """Every image of the set, in file order (pick a split with :func:`karpathy_split`).

    Raises ``FileNotFoundError`` for a missing file or folder and :class:`attnkit.errors.InputError`
    (a ``ValueError``) naming the file and the entry for a malformed one. Image files are checked
    when they are read, not here.
    """
    jp, root = Path(json_path), Path(images_dir)
    if not jp.is_file():
        raise FileNotFoundError(no_such_file(jp))
    if not root.is_dir():
        raise FileNotFoundError(no_such_file(root, "folder"))
    try:
        data = json.loads(jp.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{jp} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise InputError(f"{jp}: no top-level 'images' list (is it a Karpathy-split file?)")
    out = []
    for i, img in enumerate(data["images"]):
        where = f"{jp}: images[{i}]"
        if not isinstance(img, dict):
            raise InputError(f"{where} is not an object")
        name = img.get("filename")
        if not isinstance(name, str) or not name:
            raise InputError(f"{where} has no 'filename'")
        split_of = img.get("split")
        if split_of not in KARPATHY_SPLITS:
            raise InputError(f"{where} ({name}) has split {split_of!r}, expected one of {KARPATHY_SPLITS}")
        sentences = img.get("sentences")
        if not isinstance(sentences, list) or not sentences:
            raise InputError(f"{where} ({name}) has no 'sentences' list")
        captions = tuple(_caption(s, f"{where}.sentences[{j}]") for j, s in enumerate(sentences))
        sub = img.get("filepath")
        path = root / sub / name if isinstance(sub, str) and sub and (root / sub / name).exists() else root / name
        out.append(KarpathyImage(path, split_of, captions))
    return out


def karpathy_split(images: list[KarpathyImage], split: str, *, include_restval: bool = True) -> list[KarpathyImage]:
    """The images of ``split``; ``"train"`` takes the ``restval`` images too unless ``include_restval=False``
    (Karpathy's usual practice: restval is the part of COCO's val2014 that his split trains on)."""
    if split not in KARPATHY_SPLITS:
        raise InputError(f"split must be one of {KARPATHY_SPLITS}, got {split!r}")
    wanted = {split, "restval"} if split == "train" and include_restval else {split}
    return [im for im in images if im.split in wanted]
