"""Captioned scenes of real Fashion-MNIST photos, with ground-truth boxes.

Why: a Show-Attend-and-Tell captioner should look at the item a word names.
With photos placed on a known canvas we know exactly where each item is, so we
can measure attention correctness, not just caption quality.

A scene is a square grayscale canvas (default 64x64) cut into a 2x2 grid of
places (top left, top right, bottom left, bottom right). It holds 1..max_items
photos at distinct places; each 28x28 photo sits at a small random offset inside
its quadrant and never leaves it. Items are numbered in reading order (top left,
top right, bottom left, bottom right), which is also the order the caption names
them in::

    a coat at the bottom left
    a sneaker at the top left and a bag at the bottom right
    a dress at the top left and a boot at the top right and a shirt at the bottom right

Each item phrase is ``a <class word> at the <row> <col>``; phrases are joined by
``and``. ``word_item[j]`` is the item index named by caption word ``j`` (only the
class word names an item) and ``-1`` for every other word.

Boxes are tight boxes of an item's non-zero pixels, ``(x0, y0, x1, y1)`` in canvas
pixels, half-open: ``image[y0:y1, x0:x1]`` is exactly the box.

Splits never share photos: train scenes draw from Fashion-MNIST train images
``[0, 55000)``, valid scenes from the held-out train images ``[55000, 60000)``,
test scenes from the 10,000 test images only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ...checks import Range, check
from ...paths import atomic_write_bytes, attnkit_home
from ..idx import FASHION_MNIST_ROOT, FASHION_WORDS, load_fashion_mnist
from ..vocab import VOCAB_FILENAME, CaptionVocab

__all__ = [
    "PHOTO",
    "PLACES",
    "SPLITS",
    "VALID_HOLDOUT",
    "CaptionVocab",
    "ScenesConfig",
    "ScenesDataset",
    "collate_captions",
    "load_scenes",
    "make_scenes",
    "pad_captions",
    "parse_caption",
    "prepare_scenes",
    "save_scene_png",
    "scan_caption",
    "scene_caption",
]

#: Place names, indexed by place id; place p is grid row p // 2, column p % 2.
PLACES: tuple[str, ...] = ("top left", "top right", "bottom left", "bottom right")
#: Side of a Fashion-MNIST photo in pixels.
PHOTO = 28
#: How many of the last Fashion-MNIST train images are held out for validation scenes.
VALID_HOLDOUT = 5000
SPLITS = ("train", "valid", "test")
MAX_PLACES = len(PLACES)
#: Bump when the stored format or the generator changes, so old caches are not reused.
FORMAT_VERSION = 1
_SPLIT_STREAM = {"train": 0, "valid": 1, "test": 2}


def _check_int(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    return check(name, int(value), Range(lo, high=None if hi is None else hi + 1, integer=True))


@dataclass(frozen=True)
class ScenesConfig:
    """Everything that determines a prepared scene set (its hash names the cache folder)."""

    canvas: int = 64
    n_train: int = 20000
    n_valid: int = 1000
    n_test: int = 1000
    max_items: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        _check_canvas(self.canvas)
        _check_int("n_train", self.n_train, 1)
        _check_int("n_valid", self.n_valid, 0)
        _check_int("n_test", self.n_test, 0)
        _check_int("max_items", self.max_items, 1, MAX_PLACES)
        _check_int("seed", self.seed, 0)

    def to_dict(self) -> dict:
        return {**asdict(self), "format_version": FORMAT_VERSION}

    def hash(self) -> str:
        """Short stable hash of the config (and format version): the cache folder name."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def n(self, split: str) -> int:
        return {"train": self.n_train, "valid": self.n_valid, "test": self.n_test}[split]


def _check_canvas(canvas: Any) -> int:
    canvas = _check_int("canvas", canvas, 2 * PHOTO)
    if canvas % 2:
        raise ValueError(f"canvas: expected an even size (two equal quadrants per side), got {canvas}")
    return canvas


# --------------------------------------------------------------------------- captions


def scene_caption(classes: Sequence[int], places: Sequence[int]) -> tuple[str, list[int]]:
    """Caption for items given in reading order, and its ``word_item`` list.

    ``classes[k]``/``places[k]`` are item k's class id and place id. Returns the
    caption string and, for each of its words, the index of the item it names
    (the class word) or -1.
    """
    if len(classes) != len(places) or len(classes) == 0:
        raise ValueError(f"classes/places: expected equal non-zero lengths, got {len(classes)} and {len(places)}")
    words: list[str] = []
    word_item: list[int] = []
    for k, (c, p) in enumerate(zip(classes, places)):
        if k:
            words.append("and")
            word_item.append(-1)
        phrase = ["a", FASHION_WORDS[int(c)], "at", "the", *PLACES[int(p)].split()]
        words.extend(phrase)
        word_item.extend([-1, k, -1, -1, -1, -1])
    return " ".join(words), word_item


def scan_caption(words: Sequence[str]) -> list[tuple[int, int, int | None]]:
    """Every item a caption names, read leniently (a generated caption may break the grammar):
    ``[(word position, class id, place id or None), ...]``, one per class word, with the place the
    words ``at the <row> <col>`` right after it give (None when they do not)."""
    out = []
    for i, w in enumerate(words):
        if w in FASHION_WORDS:
            tail = list(words[i + 1 : i + 5])
            where = f"{tail[2]} {tail[3]}" if len(tail) == 4 and tail[:2] == ["at", "the"] else None
            out.append((i, FASHION_WORDS.index(w), PLACES.index(where) if where in PLACES else None))
    return out


def parse_caption(text: str) -> list[tuple[int, int]]:
    """Parse a caption of the scene grammar (``a <class> at the <row> <col>`` joined by ``and``) back
    into ``[(class id, place id), ...]``: :func:`scan_caption`, then a check that the caption is
    exactly the grammar's rendering of what was found. Raises ValueError, quoting the caption,
    when it does not follow the grammar.
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    found = scan_caption(text.split())
    items = [(c, p) for _, c, p in found if p is not None]
    canonical = " and ".join(f"a {FASHION_WORDS[c]} at the {PLACES[p]}" for c, p in items)
    if not items or len(items) != len(found) or canonical != text:
        raise ValueError(f"text: not a scene caption: {text!r}")
    return items


# --------------------------------------------------------------------------- generation


def _tight_boxes(photos: np.ndarray) -> np.ndarray:
    """Half-open tight box (x0, y0, x1, y1) of non-zero pixels for each photo (N, 28, 28).

    An all-zero photo (none exist in Fashion-MNIST) gets the full 28x28 box.
    """
    nz = photos > 0
    rows, cols = nz.any(axis=2), nz.any(axis=1)  # (N, 28) each

    def span(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        has = a.any(axis=1)
        first = np.where(has, a.argmax(axis=1), 0)
        last = np.where(has, a.shape[1] - a[:, ::-1].argmax(axis=1), a.shape[1])
        return first, last

    y0, y1 = span(rows)
    x0, x1 = span(cols)
    return np.stack([x0, y0, x1, y1], axis=1).astype(np.int32)


def make_scenes(
    photos: np.ndarray,
    labels: np.ndarray,
    n: int,
    *,
    pool: np.ndarray | None = None,
    canvas: int = 64,
    max_items: int = 4,
    rng: np.random.Generator | int = 0,
) -> dict[str, np.ndarray]:
    """Generate ``n`` scenes from ``photos``/``labels``, drawing photos only from ``pool``.

    ``pool`` is an array of allowed photo indices (default: all). Returns a dict of
    arrays (items padded to 4 with -1): ``images`` uint8 (n, C, C), ``n_items``,
    ``classes`` (n, 4), ``places`` (n, 4), ``source`` (n, 4) photo indices,
    ``offsets`` (n, 4, 2) photo top-left (x, y), ``boxes`` (n, 4, 4),
    ``captions`` str (n,), ``word_item`` (n, L) padded with -1, ``n_words`` (n,).
    Within a scene the photos are distinct.
    """
    if not isinstance(photos, np.ndarray) or photos.ndim != 3 or photos.shape[1:] != (PHOTO, PHOTO):
        raise ValueError(
            f"photos: expected an array (N, {PHOTO}, {PHOTO}), got {getattr(photos, 'shape', type(photos))}"
        )
    labels = np.asarray(labels)
    if labels.shape != photos.shape[:1]:
        raise ValueError(f"labels: expected shape ({photos.shape[0]},), got {labels.shape}")
    n = _check_int("n", n, 0)
    canvas = _check_canvas(canvas)
    max_items = _check_int("max_items", max_items, 1, MAX_PLACES)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    pool = np.arange(len(photos)) if pool is None else np.asarray(pool, dtype=np.int64)
    if pool.ndim != 1 or len(pool) < max_items:
        raise ValueError(
            f"pool: expected a 1-D index array of at least max_items={max_items} photos, got shape {pool.shape}"
        )
    if pool.min() < 0 or pool.max() >= len(photos):
        raise ValueError(f"pool: indices must lie in [0, {len(photos)}), got [{pool.min()}, {pool.max()}]")

    half = canvas // 2
    slack = half - PHOTO  # jitter range inside a quadrant: offsets 0..slack
    n_items = rng.integers(1, max_items + 1, size=n)
    # Distinct places per scene, sorted into reading order (= item order).
    places = np.argsort(rng.random((n, MAX_PLACES)), axis=1)
    # Distinct photos per scene: redraw the (rare) rows with a repeat.
    picks = rng.integers(0, len(pool), size=(n, MAX_PLACES))
    for _ in range(100):
        srt = np.sort(picks, axis=1)
        dup = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
        if not dup.any():
            break
        picks[dup] = rng.integers(0, len(pool), size=(int(dup.sum()), MAX_PLACES))
    jitter = rng.integers(0, slack + 1, size=(n, MAX_PLACES, 2))

    present = np.arange(MAX_PLACES)[None, :] < n_items[:, None]
    places = np.where(present, places, MAX_PLACES)  # absent items sort last
    places = np.sort(places, axis=1)
    places = np.where(present, places, -1)
    source = np.where(present, pool[picks], -1)
    classes = np.where(present, labels[np.maximum(source, 0)], -1).astype(np.int64)
    qx, qy = (places % 2) * half, (places // 2) * half
    offsets = np.stack([qx + jitter[..., 0], qy + jitter[..., 1]], axis=-1)
    offsets = np.where(present[..., None], offsets, -1).astype(np.int32)
    photo_boxes = _tight_boxes(photos[np.maximum(source, 0)].reshape(-1, PHOTO, PHOTO)).reshape(n, MAX_PLACES, 4)
    boxes = photo_boxes + np.concatenate([offsets, offsets], axis=-1)
    boxes = np.where(present[..., None], boxes, -1).astype(np.int32)

    images = np.zeros((n, canvas, canvas), dtype=np.uint8)
    for k in range(MAX_PLACES):  # one vectorised paste per item slot
        idx = np.nonzero(present[:, k])[0]
        if not len(idx):
            continue
        ys = offsets[idx, k, 1][:, None] + np.arange(PHOTO)[None, :]  # (m, 28)
        xs = offsets[idx, k, 0][:, None] + np.arange(PHOTO)[None, :]
        images[idx[:, None, None], ys[:, :, None], xs[:, None, :]] = photos[source[idx, k]]

    captions, word_items = [], []
    for i in range(n):
        m = int(n_items[i])
        cap, wi = scene_caption(classes[i, :m], places[i, :m])
        captions.append(cap)
        word_items.append(wi)
    n_words = np.array([len(w) for w in word_items], dtype=np.int64)
    width = int(n_words.max()) if n else 0
    word_item = np.full((n, width), -1, dtype=np.int64)
    for i, wi in enumerate(word_items):
        word_item[i, : len(wi)] = wi
    return {
        "images": images,
        "n_items": n_items.astype(np.int64),
        "classes": classes,
        "places": places.astype(np.int64),
        "source": source.astype(np.int64),
        "offsets": offsets,
        "boxes": boxes,
        "captions": np.array(captions, dtype=np.str_),
        "word_item": word_item,
        "n_words": n_words,
    }


# --------------------------------------------------------------------------- preparing and loading


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # uncompressed: loads fast, and ~100 MB for the default train split
    return buf.getvalue()


def prepare_scenes(
    home: str | os.PathLike | None = None,
    *,
    canvas: int = 64,
    n_train: int = 20000,
    n_valid: int = 1000,
    n_test: int = 1000,
    max_items: int = 4,
    seed: int = 0,
    force: bool = False,
    root: str | os.PathLike = FASHION_MNIST_ROOT,
) -> Path:
    """Generate train/valid/test scenes once and cache them; return their folder.

    Writes ``<home>/scenes/<config hash>/{train,valid,test}.npz``, ``vocab.json``
    (from the train captions) and ``config.json``, each atomically; ``config.json``
    goes last, so its presence marks a complete set. An existing complete set is
    reused unless ``force``. ``home`` defaults to ``attnkit_home()``. Each split
    has its own random stream from ``seed``, so e.g. changing ``n_train`` leaves the
    test scenes unchanged.
    """
    cfg = ScenesConfig(canvas=canvas, n_train=n_train, n_valid=n_valid, n_test=n_test, max_items=max_items, seed=seed)
    out = Path(home if home is not None else attnkit_home()).expanduser() / "scenes" / cfg.hash()
    if not force and (out / "config.json").is_file() and all((out / f"{s}.npz").is_file() for s in SPLITS):
        return out
    train_photos, train_labels = load_fashion_mnist("train", root)
    if len(train_photos) <= VALID_HOLDOUT:
        raise ValueError(f"root: expected more than {VALID_HOLDOUT} train photos, got {len(train_photos)}")
    cut = len(train_photos) - VALID_HOLDOUT
    sources = {
        "train": (train_photos, train_labels, np.arange(cut), "train"),
        "valid": (train_photos, train_labels, np.arange(cut, len(train_photos)), "train"),
    }
    if cfg.n_test:
        test_photos, test_labels = load_fashion_mnist("test", root)
        sources["test"] = (test_photos, test_labels, np.arange(len(test_photos)), "test")
    else:  # nothing drawn: an empty set with the right fields
        sources["test"] = (train_photos[:0], train_labels[:0], None, "test")
    vocab = None
    for split in SPLITS:
        photos, labels, pool, source_split = sources[split]
        rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, _SPLIT_STREAM[split]]))
        if cfg.n(split):
            arrays = make_scenes(
                photos, labels, cfg.n(split), pool=pool, canvas=cfg.canvas, max_items=cfg.max_items, rng=rng
            )
        else:
            arrays = _empty_scenes(cfg.canvas)
        arrays["source_split"] = np.array(source_split)
        arrays["config"] = np.array(json.dumps(cfg.to_dict(), sort_keys=True))
        atomic_write_bytes(out / f"{split}.npz", _npz_bytes(arrays))
        if split == "train":
            vocab = CaptionVocab.from_captions(arrays["captions"].tolist())
    vocab.save(out / VOCAB_FILENAME)
    atomic_write_bytes(out / "config.json", json.dumps(cfg.to_dict(), indent=1, sort_keys=True).encode())
    return out


def _empty_scenes(canvas: int) -> dict[str, np.ndarray]:
    z = lambda *s, dt=np.int64: np.zeros(s, dtype=dt)
    return {
        "images": z(0, canvas, canvas, dt=np.uint8),
        "n_items": z(0),
        "classes": z(0, 4),
        "places": z(0, 4),
        "source": z(0, 4),
        "offsets": z(0, 4, 2, dt=np.int32),
        "boxes": z(0, 4, 4, dt=np.int32),
        "captions": np.array([], dtype=np.str_),
        "word_item": z(0, 0),
        "n_words": z(0),
    }


class ScenesDataset(Dataset):
    """A split of prepared scenes as a torch Dataset.

    Item ``i`` is a dict: ``image`` float (1, C, C) in [0, 1]; ``caption`` str;
    ``caption_ids`` long (L + 2,) with bos/eos (when a vocab is set);
    ``boxes`` long (n_items, 4) half-open (x0, y0, x1, y1); ``classes`` and
    ``places`` long (n_items,); ``word_item`` long (L,) item index per caption
    word or -1; ``index`` int. ``arrays`` holds the raw numpy arrays.
    """

    def __init__(self, arrays: dict[str, np.ndarray], vocab: CaptionVocab | None = None) -> None:
        missing = {"images", "captions", "boxes", "n_items", "word_item", "n_words"} - set(arrays)
        if missing:
            raise ValueError(f"arrays: missing fields {sorted(missing)}")
        self.arrays = arrays
        self.vocab = vocab
        self.canvas = int(arrays["images"].shape[-1])

    @classmethod
    def from_npz(cls, path: str | os.PathLike, vocab: CaptionVocab | None = None) -> ScenesDataset:
        """Load a split file written by prepare_scenes."""
        with np.load(Path(path), allow_pickle=False) as z:
            return cls({k: z[k] for k in z.files}, vocab)

    def __len__(self) -> int:
        return len(self.arrays["images"])

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"i: index {i} out of range for {len(self)} scenes")
        a = self.arrays
        m, L = int(a["n_items"][i]), int(a["n_words"][i])
        caption = str(a["captions"][i])
        item = {
            "image": torch.from_numpy(a["images"][i]).float().div_(255.0).unsqueeze(0),
            "caption": caption,
            "boxes": torch.from_numpy(a["boxes"][i, :m].astype(np.int64)),
            "classes": torch.from_numpy(a["classes"][i, :m]),
            "places": torch.from_numpy(a["places"][i, :m]),
            "word_item": torch.from_numpy(a["word_item"][i, :L].copy()),
            "index": int(i) % len(self),
        }
        if self.vocab is not None:
            item["caption_ids"] = torch.tensor(self.vocab.encode(caption), dtype=torch.long)
        return item


def load_scenes(split: str, home: str | os.PathLike | None = None, **config: Any) -> ScenesDataset:
    """Prepare (if needed, cached) and load one split as a ScenesDataset with its vocab.

    ``config`` takes prepare_scenes' keywords (canvas, n_train, ..., seed, force, root).
    """
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {SPLITS}, got {split!r}")
    folder = prepare_scenes(home, **config)
    return ScenesDataset.from_npz(folder / f"{split}.npz", CaptionVocab.load(folder / VOCAB_FILENAME))


def pad_captions(ids: Sequence[Sequence[int] | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoded captions (bos, words, eos) as one long ``(B, T)`` tensor padded with ``CaptionVocab.PAD``,
    and their lengths ``(B,)``."""
    lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
    captions = torch.full((len(ids), int(lengths.max())), CaptionVocab.PAD, dtype=torch.long)  # (B, T)
    for b, x in enumerate(ids):
        captions[b, : len(x)] = torch.as_tensor(x, dtype=torch.long)
    return captions, lengths


def collate_captions(batch: Sequence[dict[str, Any]], vocab: CaptionVocab | None = None) -> dict[str, Any]:
    """Batch ScenesDataset items for a captioner.

    Returns ``images`` (B, 1, C, C); ``captions`` long (B, T) = bos, words, eos,
    padded with 0; ``lengths`` long (B,) counting bos and eos; ``word_item`` long
    (B, T) item index named by the token at each position (-1 for bos/eos/pad and
    non-item words); ``word_boxes`` long (B, T, 4) that item's box (-1 where none)
    and ``word_has_box`` bool (B, T) -- the ground truth for attention correctness,
    aligned with ``captions`` (token t's attention is the one used to predict it);
    ``boxes`` (B, 4, 4) and ``n_items`` (B,) for all items; ``texts`` list[str].
    Items need ``caption_ids`` (dataset with a vocab) or pass ``vocab`` here.
    """
    if not batch:
        raise ValueError("batch: expected at least one item, got none")
    ids = []
    for it in batch:
        if "caption_ids" in it:
            ids.append(it["caption_ids"])
        elif vocab is not None:
            ids.append(torch.tensor(vocab.encode(it["caption"]), dtype=torch.long))
        else:
            raise ValueError("vocab: items have no caption_ids; pass a CaptionVocab or give the dataset one")
    captions, lengths = pad_captions(ids)
    B, T = captions.shape
    word_item = torch.full((B, T), -1, dtype=torch.long)
    boxes = torch.full((B, MAX_PLACES, 4), -1, dtype=torch.long)
    n_items = torch.zeros(B, dtype=torch.long)
    for b, (it, x) in enumerate(zip(batch, ids)):
        wi = it["word_item"]
        if len(wi) != len(x) - 2:
            raise ValueError(f"batch: item {b} has {len(wi)} word_item entries for {len(x) - 2} caption words")
        word_item[b, 1 : 1 + len(wi)] = wi
        m = len(it["boxes"])
        boxes[b, :m] = it["boxes"]
        n_items[b] = m
    has = word_item >= 0
    word_boxes = torch.gather(boxes, 1, word_item.clamp(min=0).unsqueeze(-1).expand(B, T, 4))
    word_boxes = torch.where(has.unsqueeze(-1), word_boxes, torch.full_like(word_boxes, -1))
    return {
        "images": torch.stack([it["image"] for it in batch]),
        "captions": captions,
        "lengths": lengths,
        "word_item": word_item,
        "word_boxes": word_boxes,
        "word_has_box": has,
        "boxes": boxes,
        "n_items": n_items,
        "texts": [it["caption"] for it in batch],
    }


# --------------------------------------------------------------------------- pictures


def save_scene_png(
    image: np.ndarray | torch.Tensor,
    path: str | os.PathLike,
    *,
    scale: int = 1,
    boxes: np.ndarray | torch.Tensor | None = None,
) -> Path:
    """Write a scene as a PNG (atomically) and return its path.

    ``image`` is uint8 (C, C) or float (C, C)/(1, C, C) in [0, 1]. ``scale``
    enlarges it (nearest neighbour) so the small canvas is visible; ``boxes``
    (n, 4) half-open canvas boxes, if given, are drawn in colour.
    """
    from PIL import Image, ImageDraw

    scale = _check_int("scale", scale, 1)
    arr = image.detach().cpu().numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 2:
        raise ValueError(f"image: expected (C, C) or (1, C, C), got shape {arr.shape}")
    if arr.dtype != np.uint8:
        arr = (np.clip(arr.astype(np.float64), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    img = Image.fromarray(np.ascontiguousarray(arr))  # 2-D uint8 -> mode "L"
    if scale > 1:
        img = img.resize((arr.shape[1] * scale, arr.shape[0] * scale), Image.NEAREST)
    if boxes is not None:
        img = img.convert("RGB")
        draw = ImageDraw.Draw(img)
        colours = [(255, 80, 80), (80, 200, 80), (80, 140, 255), (255, 200, 0)]
        for k, (x0, y0, x1, y1) in enumerate(np.asarray(boxes).reshape(-1, 4).tolist()):
            if x0 < 0:
                continue
            draw.rectangle([x0 * scale, y0 * scale, x1 * scale - 1, y1 * scale - 1], outline=colours[k % 4])
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return atomic_write_bytes(path, buf.getvalue())
