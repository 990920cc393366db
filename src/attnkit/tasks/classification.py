"""Classifying Fashion-MNIST photos: a classifier whose conv encoder can start a captioner's."""

from __future__ import annotations

__all__ = ["ClassifierTaskConfig", "photo_batches", "train_classifier"]

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..checks import COUNT, LEARNING_RATE, check_fields
from ..config import option
from ..data.datasets.scenes import PHOTO
from ..device import to_device
from ..errors import ConfigError
from ..models.captioner import ENCODER_CHANNELS
from ..models.classifier import ClassifierConfig, FashionClassifier
from ..training.data import Batches, shuffled
from ..training.optim import adam
from ..training.run_config import RunConfig, TaskConfig, run_options


@dataclass
class ClassifierTaskConfig(TaskConfig):
    """``attnkit train classifier``: Fashion-MNIST photos at random offsets on a small canvas, and the
    classifier's config nested (``model_config``; ``--channels`` gives its conv widths)."""

    channels: str | None = option(
        None,
        "conv block widths, comma-separated (default: "
        f"{','.join(map(str, ENCODER_CHANNELS))}, the captioner encoder's layout)",
    )
    batch_size: int = option(128, "photos per batch", check=COUNT)
    lr: float = option(2e-3, "Adam's learning rate", check=LEARNING_RATE)
    model_config: ClassifierConfig = option(default_factory=ClassifierConfig, help="the classifier's config")
    run: RunConfig = run_options(out_dir="runs/classifier", epochs=2, save_every_steps=200)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.channels is not None:
            try:
                channels = [int(c) for c in str(self.channels).split(",")]
            except ValueError:
                raise ConfigError(
                    f"channels must be comma-separated ints such as 32,64,96, got {self.channels!r}"
                ) from None
            self.model_config = dataclasses.replace(self.model_config, channels=channels)
        if self.model_config.canvas < PHOTO:
            raise ConfigError(f"canvas must be >= {PHOTO} (the photos' side), got {self.model_config.canvas}")


def photo_batches(
    photos: np.ndarray, labels: np.ndarray, *, batch_size: int, canvas: int, seed: int, shuffle: bool = True
) -> Batches:
    """Resumable batches of Fashion-MNIST photos pasted at random offsets on a ``canvas`` square (the
    offsets of batch ``i`` of epoch ``e`` drawn from ``(seed, e, i)``; ``shuffle=False``: in order, centred)."""
    photos_t = torch.from_numpy(photos)
    labels_t = torch.from_numpy(labels.astype(np.int64))
    n = len(labels_t)

    def plan(epoch):
        order = shuffled(n, seed * 7919, epoch) if shuffle else list(range(n))
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]

    def make(idx, epoch, i):
        g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) * 100_003 + i)
        slack = canvas - PHOTO
        off = (
            torch.randint(0, slack + 1, (len(idx), 2), generator=g)
            if shuffle
            else torch.full((len(idx), 2), slack // 2)
        )
        images = torch.zeros(len(idx), 1, canvas, canvas)
        for k, j in enumerate(idx):
            x, y = off[k].tolist()
            images[k, 0, y : y + PHOTO, x : x + PHOTO] = photos_t[j].float() / 255.0
        return {"images": images, "labels": labels_t[list(idx)]}

    return Batches(plan, make, fingerprint={"seed": seed})


def train_classifier(cfg: ClassifierTaskConfig, *, resume: bool = False) -> dict:
    """Train the Fashion-MNIST classifier on train photos ``[0, 55000)`` (the scenes' train pool);
    validate on the held-out ``[55000, 60000)``. Test photos are never seen."""
    from ..data.datasets.scenes import VALID_HOLDOUT
    from ..data.idx import load_fashion_mnist
    from ..training import Trainer

    photos, labels = load_fashion_mnist("train")
    cut = len(photos) - VALID_HOLDOUT
    cfg.run.start()
    model = FashionClassifier(cfg.model_config)
    valid = photo_batches(
        photos[cut:], labels[cut:], batch_size=500, canvas=cfg.model_config.canvas, seed=0, shuffle=False
    )

    def loss_fn(m, batch):
        logits = m(batch["images"])
        loss = F.cross_entropy(logits, batch["labels"], reduction="sum")
        acc = float((logits.argmax(-1) == batch["labels"]).float().mean())
        return loss, len(batch["labels"]), {"acc": acc}

    def valid_fn(m):
        right = n = 0
        valid.set_epoch(0)
        for b in valid:
            b = to_device(b, next(m.parameters()).device)
            right += int((m(b["images"]).argmax(-1) == b["labels"]).sum())
            n += len(b["labels"])
        return {"valid_acc": right / n}

    trainer = Trainer(
        model,
        adam(model.parameters(), lr=cfg.lr),
        cfg.run,
        task_config=cfg,
        loss_fn=loss_fn,
        train_batches=photo_batches(
            photos[:cut], labels[:cut], batch_size=cfg.batch_size, canvas=cfg.model_config.canvas, seed=cfg.run.seed
        ),
        valid_fn=valid_fn,
        metric_for_best="valid_acc",
        greater_is_better=True,
    )
    return trainer.fit(resume=resume)
