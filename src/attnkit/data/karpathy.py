"""Captions in the Karpathy-split JSON format (Flickr8k / Flickr30k / COCO).

Why: the captioner should train on real captioned photos too, and these splits
are what the Show-Attend-and-Tell literature reports on. The format is::

    {"images": [{"filename": "x.jpg", "filepath": "val2014",   # filepath optional
                 "split": "train" | "val" | "test" | "restval",
                 "sentences": [{"tokens": ["a", "dog"], "raw": "A dog."}, ...]},
                ...]}

Images live under ``images_dir`` (``images_dir/filepath/filename`` when a
filepath is given and exists there, else ``images_dir/filename``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["KarpathyCaptions", "KARPATHY_SPLITS"]

KARPATHY_SPLITS = ("train", "val", "test", "restval")


def _caption(sentence: Any, where: str, json_path: Path) -> str:
    """Lower-case caption string of one sentence entry: its tokens, else its raw text split."""
    if not isinstance(sentence, dict):
        raise ValueError(f"json_path: {json_path}: {where} is not an object")
    tokens = sentence.get("tokens")
    if tokens is None:
        raw = sentence.get("raw")
        if not isinstance(raw, str):
            raise ValueError(f"json_path: {json_path}: {where} has neither 'tokens' nor 'raw'")
        tokens = raw.split()
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise ValueError(f"json_path: {json_path}: {where}.tokens is not a list of strings")
    return " ".join(t.strip().lower() for t in tokens if t.strip())


class KarpathyCaptions(Dataset):
    """One split of a Karpathy-format caption set as a torch Dataset.

    Item ``i`` is ``(image, captions)``: ``image`` float (C, H, W) in [0, 1] with
    C = 1 when ``grayscale`` else 3, resized to ``image_size`` (int: square, or
    (height, width)); ``captions`` is the list of that image's caption strings,
    lower-case, words joined by single spaces, each cut to ``max_len`` words when
    given. ``split="train"`` also takes the ``restval`` images unless
    ``include_restval=False`` (the usual Karpathy practice).

    Raises ValueError naming the JSON file and what is missing when it is
    malformed; FileNotFoundError / ValueError naming the image file when an image
    is missing or unreadable (checked when the item is read).
    """

    def __init__(
        self,
        json_path: str | os.PathLike,
        images_dir: str | os.PathLike,
        split: str,
        image_size: int | tuple[int, int] = 64,
        grayscale: bool = True,
        max_len: int | None = None,
        *,
        include_restval: bool = True,
    ) -> None:
        if split not in KARPATHY_SPLITS:
            raise ValueError(f"split: expected one of {KARPATHY_SPLITS}, got {split!r}")
        if isinstance(image_size, bool) or not isinstance(image_size, (int, tuple, list)):
            raise TypeError(f"image_size: expected an int or (height, width), got {type(image_size).__name__}")
        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if len(size) != 2 or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size):
            raise ValueError(f"image_size: expected a positive int or (height, width), got {image_size!r}")
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1):
            raise ValueError(f"max_len: expected None or a positive int, got {max_len!r}")
        self.json_path = Path(json_path)
        self.images_dir = Path(images_dir)
        if not self.images_dir.is_dir():
            raise FileNotFoundError(f"images_dir: folder not found: {self.images_dir}")
        self.split = split
        self.size = (int(size[0]), int(size[1]))
        self.grayscale = bool(grayscale)
        self.max_len = max_len
        wanted = {split, "restval"} if (split == "train" and include_restval) else {split}
        self.entries: list[tuple[Path, list[str]]] = []
        for path, split_of, caps in self._read_json():
            if split_of in wanted:
                if max_len is not None:
                    caps = [" ".join(c.split()[:max_len]) for c in caps]
                self.entries.append((path, caps))

    def _read_json(self) -> list[tuple[Path, str, list[str]]]:
        """Parse and validate the whole JSON file: (image path, split, captions) per image."""
        jp = self.json_path
        if not jp.is_file():
            raise FileNotFoundError(f"json_path: file not found: {jp}")
        try:
            data = json.loads(jp.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"json_path: {jp} is not valid JSON ({e})") from e
        if not isinstance(data, dict) or not isinstance(data.get("images"), list):
            raise ValueError(f"json_path: {jp}: missing the top-level 'images' list")
        out = []
        for i, img in enumerate(data["images"]):
            where = f"images[{i}]"
            if not isinstance(img, dict):
                raise ValueError(f"json_path: {jp}: {where} is not an object")
            name = img.get("filename")
            if not isinstance(name, str) or not name:
                raise ValueError(f"json_path: {jp}: {where} has no 'filename'")
            split_of = img.get("split")
            if split_of not in KARPATHY_SPLITS:
                raise ValueError(
                    f"json_path: {jp}: {where} ({name}) has split {split_of!r}, expected one of {KARPATHY_SPLITS}"
                )
            sentences = img.get("sentences")
            if not isinstance(sentences, list) or not sentences:
                raise ValueError(f"json_path: {jp}: {where} ({name}) has no 'sentences' list")
            caps = [_caption(s, f"{where}.sentences[{j}]", jp) for j, s in enumerate(sentences)]
            sub = img.get("filepath")
            path = self.images_dir / name
            if isinstance(sub, str) and sub and (self.images_dir / sub / name).exists():
                path = self.images_dir / sub / name
            out.append((path, split_of, caps))
        return out

    def __len__(self) -> int:
        return len(self.entries)

    def captions(self) -> list[str]:
        """Every caption of this split (e.g. to build a CaptionVocab from the train split)."""
        return [c for _, caps in self.entries for c in caps]

    def load_image(self, path: Path) -> torch.Tensor:
        """Read, convert (L or RGB) and resize one image to a float (C, H, W) tensor in [0, 1]."""
        from PIL import Image, UnidentifiedImageError

        if not path.is_file():
            raise FileNotFoundError(f"image not found: {path} (listed in {self.json_path})")
        try:
            with Image.open(path) as im:
                im = im.convert("L" if self.grayscale else "RGB")
                if im.size != (self.size[1], self.size[0]):
                    im = im.resize((self.size[1], self.size[0]), Image.BILINEAR)
                arr = np.asarray(im, dtype=np.uint8)
        except (UnidentifiedImageError, OSError, ValueError) as e:
            raise ValueError(f"image unreadable: {path} ({e})") from e
        t = torch.from_numpy(arr.copy()).float().div_(255.0)
        return t.unsqueeze(0) if t.ndim == 2 else t.permute(2, 0, 1).contiguous()

    def __getitem__(self, i: int) -> tuple[torch.Tensor, list[str]]:
        path, caps = self.entries[i]
        return self.load_image(path), list(caps)
