"""Caption batches for training (the scenes, or photos with Karpathy-format captions), and image files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...data.datasets.scenes import ScenesDataset, collate_captions, pad_captions
from ...data.karpathy import KarpathyImage
from ...data.vocab import CaptionVocab
from ...errors import InputError, no_such_file
from ...training.data import Batches, shuffled


def scene_order(n: int, per_epoch: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The example indices of ``epoch``: the stretch ``[e·S, (e+1)·S)`` (``S = per_epoch``) of an endless
    stream of permutations of the ``n`` examples (permutation ``k`` drawn from ``(seed, k)``), so a
    short "epoch" still sees every example in turn."""
    start, stop = epoch * per_epoch, (epoch + 1) * per_epoch
    out: list[int] = []
    while start < stop:
        k, off = divmod(start, n)
        take = min(n - off, stop - start)
        perm = shuffled(n, seed, k) if shuffle else list(range(n))
        out += perm[off : off + take]
        start += take
    return out


def _stream_batches(
    n: int, collate: Callable[[Sequence[int]], Any], *, batch_size: int, seed: int, per_epoch: int | None, shuffle: bool
) -> Batches:
    """Resumable batches of ``collate(indices)`` over ``n`` examples, epochs as :func:`scene_order` cuts them."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if n < 1:
        raise ValueError("there are no examples to make batches of")
    per_epoch = int(per_epoch) if per_epoch else n

    def plan(epoch):
        idx = scene_order(n, per_epoch, seed, epoch, shuffle)
        return [idx[i : i + batch_size] for i in range(0, len(idx), batch_size)]

    return Batches(plan, lambda idx, epoch, i: collate(idx), fingerprint={"seed": seed, "per_epoch": per_epoch})


def scene_batches(
    dataset: ScenesDataset, *, batch_size: int, seed: int, scenes_per_epoch: int | None = None, shuffle: bool = True
) -> Batches:
    """Resumable batches of collated scenes (see :func:`scene_order` for what an epoch is)."""
    return _stream_batches(
        len(dataset),
        lambda idx: collate_captions([dataset[j] for j in idx]),
        batch_size=batch_size,
        seed=seed,
        per_epoch=scenes_per_epoch,
        shuffle=shuffle,
    )


def collate_photo_captions(pairs: Sequence[tuple[KarpathyImage, str]], vocab: CaptionVocab, canvas: int) -> dict:
    """A batch of (image, caption) pairs: ``images (B, 1, C, C)`` (read by :func:`load_image_file`),
    ``captions (B, T)`` (bos, words, eos; unknown words → unk), ``lengths (B,)`` and ``texts``."""
    captions, lengths = pad_captions([vocab.encode(c) for _, c in pairs])
    return {
        "images": torch.stack([load_image_file(im.path, canvas) for im, _ in pairs]),
        "captions": captions,
        "lengths": lengths,
        "texts": [c for _, c in pairs],
    }


def photo_caption_batches(
    images: Sequence[KarpathyImage],
    vocab: CaptionVocab,
    *,
    canvas: int,
    batch_size: int,
    seed: int,
    pairs_per_epoch: int | None = None,
    shuffle: bool = True,
) -> Batches:
    """Resumable batches of every (image, one of its captions) pair, epochs as :func:`scene_order` cuts them;
    images are read from their files as each batch is made."""
    pairs = [(im, c) for im in images for c in im.captions]
    return _stream_batches(
        len(pairs),
        lambda idx: collate_photo_captions([pairs[j] for j in idx], vocab, canvas),
        batch_size=batch_size,
        seed=seed,
        per_epoch=pairs_per_epoch,
        shuffle=shuffle,
    )


def image_to_canvas(im, canvas: int) -> torch.Tensor:
    """A PIL image as the captioner's ``(1, canvas, canvas)`` float input in [0, 1]: any size or colour
    mode, converted to grayscale (``L``) and resized bilinearly; transparency composited on black
    (the scenes' background)."""
    from PIL import Image

    im.load()
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        im = im.convert("RGBA")
        im = Image.alpha_composite(Image.new("RGBA", im.size, (0, 0, 0, 255)), im)
    im = im.convert("L")
    if im.size != (canvas, canvas):
        im = im.resize((canvas, canvas), Image.BILINEAR)
    arr = np.asarray(im, dtype=np.float32) / 255.0
    return torch.from_numpy(arr.copy()).unsqueeze(0)


def load_image_file(path: str | Path, canvas: int) -> torch.Tensor:
    """Read an image file as :func:`image_to_canvas` converts it. Raises ``FileNotFoundError`` or
    :class:`attnkit.errors.InputError` (a ``ValueError``) naming the file."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(no_such_file(path))
    try:
        with Image.open(path) as im:
            return image_to_canvas(im, canvas)
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise InputError(f"cannot read image {path}: not a readable image file ({type(exc).__name__}: {exc})") from None
