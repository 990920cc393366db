"""Scene batches for training, and image files for captioning."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ...data.scenes import ScenesDataset, collate_captions
from ...training.data import Batches, shuffled


def scene_order(n: int, per_epoch: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The scene indices of ``epoch``: the stretch ``[e·S, (e+1)·S)`` (``S = per_epoch``) of an endless
    stream of permutations of the ``n`` scenes (permutation ``k`` drawn from ``(seed, k)``), so a
    short "epoch" still sees every scene in turn."""
    start, stop = epoch * per_epoch, (epoch + 1) * per_epoch
    out: list[int] = []
    while start < stop:
        k, off = divmod(start, n)
        take = min(n - off, stop - start)
        perm = shuffled(n, seed, k) if shuffle else list(range(n))
        out += perm[off:off + take]
        start += take
    return out


def scene_batches(dataset: ScenesDataset, *, batch_size: int, seed: int, scenes_per_epoch: int | None = None,
                  shuffle: bool = True) -> Batches:
    """Resumable batches of collated scenes (see :func:`scene_order` for what an epoch is)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n, per_epoch = len(dataset), int(scenes_per_epoch) if scenes_per_epoch else len(dataset)

    def plan(epoch):
        idx = scene_order(n, per_epoch, seed, epoch, shuffle)
        return [idx[i:i + batch_size] for i in range(0, len(idx), batch_size)]

    return Batches(plan, lambda idx, epoch, i: collate_captions([dataset[j] for j in idx]),
                   fingerprint={"seed": seed, "per_epoch": per_epoch})

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
    ``ValueError`` naming the file."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image {path} does not exist")
    try:
        with Image.open(path) as im:
            return image_to_canvas(im, canvas)
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ValueError(f"cannot read image {path}: not a readable image file ({type(exc).__name__}: {exc})") from None
