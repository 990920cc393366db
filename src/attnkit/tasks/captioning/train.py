"""Training a soft or hard captioner with the shared trainer, on the scenes or on Karpathy-format photos."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ...data.datasets.scenes import ScenesDataset, collate_captions, load_scenes
from ...data.karpathy import karpathy_split, read_karpathy
from ...data.vocab import CaptionVocab
from ...device import to_device
from ...errors import InputError
from ...pretrained import resolve_model
from ...training.checkpoint import CheckpointError, load_model
from ...training.data import Batches
from ...training.optim import adam
from .config import VOCAB_FILE, CaptioningConfig
from .data import collate_photo_captions, photo_caption_batches, scene_batches
from .inference import Captioner
from .loss import caption_loss_fn, update_reward_baseline
from .metrics import caption_scores

# ---------------------------------------------------------------------------------------- training


def _valid_fn(batch: dict, vocab: CaptionVocab):
    """Validation: the NLL of ``batch``'s captions and the BLEU-4 / exact match of greedy captions against them."""

    def valid_fn(model):
        out = caption_loss_fn(model.config)(model, to_device(batch, next(model.parameters()).device))
        cm = Captioner(model, vocab)
        hyps = [r["caption"] for r in cm.caption(batch["images"])]
        sc = caption_scores(hyps, batch["texts"])
        return {"valid_nll": out[2]["nll"], "valid_bleu4": sc["bleu4"], "valid_exact_match": sc["exact_match"]}

    return valid_fn


def _scene_data(cfg: CaptioningConfig, home) -> tuple[Batches, dict, CaptionVocab]:
    """Training batches, the validation batch and the vocabulary of the Fashion-MNIST scenes."""
    train = load_scenes("train", home, canvas=cfg.model_config.canvas)
    valid = load_scenes("valid", home, canvas=cfg.model_config.canvas)
    if cfg.limit_train:
        train = ScenesDataset(
            {
                k: (v[: cfg.limit_train] if getattr(v, "ndim", 0) and len(v) == len(train) else v)
                for k, v in train.arrays.items()
            },
            train.vocab,
        )
    batches = scene_batches(train, batch_size=cfg.batch_size, seed=cfg.run.seed, scenes_per_epoch=cfg.scenes_per_epoch)
    return batches, collate_captions([valid[i] for i in range(min(cfg.valid_scenes, len(valid)))]), train.vocab


def _photo_data(cfg: CaptioningConfig) -> tuple[Batches, dict, CaptionVocab]:
    """The same from a Karpathy-split caption set: train on every (train or restval image, caption) pair,
    with a vocabulary of the training captions' words; validate on the first ``valid_scenes`` val images,
    each against its first caption."""
    images = read_karpathy(cfg.captions, cfg.images)
    train, valid = karpathy_split(images, "train")[: cfg.limit_train or None], karpathy_split(images, "val")
    if not train or not valid:
        raise InputError(
            f"{cfg.captions}: training needs 'train' (or 'restval') and 'val' images; "
            f"it has {len(train)} and {len(valid)}"
        )
    vocab = CaptionVocab.from_captions(c for im in train for c in im.captions)
    canvas = cfg.model_config.canvas
    batches = photo_caption_batches(
        train, vocab, canvas=canvas, batch_size=cfg.batch_size, seed=cfg.run.seed, pairs_per_epoch=cfg.scenes_per_epoch
    )
    return (
        batches,
        collate_photo_captions([(im, im.captions[0]) for im in valid[: cfg.valid_scenes]], vocab, canvas),
        vocab,
    )


def build_captioner(cfg: CaptioningConfig, vocab_size: int):
    """Show, Attend and Tell from ``cfg.model_config``, for a vocabulary of ``vocab_size``; the grid
    follows the canvas (each conv block halves it)."""
    from ...models.captioner import ShowAttendTell

    mc = cfg.model_config
    return ShowAttendTell(dataclasses.replace(mc, vocab_size=vocab_size, grid=mc.canvas // 2 ** len(mc.channels)))


def train_captioning(cfg: CaptioningConfig, *, resume: bool = False, home: str | Path | None = None) -> dict:
    """Train a soft or hard captioner with the shared trainer, on the scenes or (``cfg.captions``) on
    Karpathy-format photos; returns the trainer's summary."""
    from ...training import Trainer

    train_batches, valid_batch, vocab = _photo_data(cfg) if cfg.captions else _scene_data(cfg, home)
    cfg.run.start()
    model = build_captioner(cfg, len(vocab))
    if cfg.encoder_from:  # a model name or a folder, as every model argument
        _load_encoder_trunk(model, resolve_model(cfg.encoder_from, home=home))
    if cfg.init_from:
        warm_start(model, resolve_model(cfg.init_from, home=home))
    optimizer = adam(model.parameters(), lr=cfg.lr)
    trainer = Trainer(
        model,
        optimizer,
        cfg.run,
        task_config=cfg,
        loss_fn=caption_loss_fn(model.config),
        after_step=update_reward_baseline,
        train_batches=train_batches,
        valid_fn=_valid_fn(valid_batch, vocab),
        metric_for_best="valid_bleu4",
        greater_is_better=True,
        extra_files={VOCAB_FILE: vocab.to_bytes()},
    )
    return trainer.fit(resume=resume)


def _load_encoder_trunk(model, classifier_dir: str | Path) -> None:
    """Copy a Fashion-MNIST classifier's conv encoder (trunk and head) into the captioner's."""

    clf, _, _ = load_model(classifier_dir)
    src = getattr(clf, "encoder", None)
    if src is None or not hasattr(src, "trunk"):
        raise CheckpointError(f"{classifier_dir}: not a classifier checkpoint with a conv encoder")
    try:
        model.encoder.trunk.load_state_dict(src.trunk.state_dict())
        model.encoder.head.load_state_dict(src.head.state_dict())
    except RuntimeError as exc:
        raise CheckpointError(f"{classifier_dir}: its encoder does not fit this captioner ({exc})") from None


def warm_start(model, captioner_dir: str | Path) -> list[str]:
    """Initialise ``model`` from another captioner's weights; returns the names copied.

    Every tensor whose name and shape match is copied. The LSTM's input weights are copied column
    by column when only the input size differs (a ``context_to_lstm`` model warm-starting one
    without: the word-embedding columns come first and are kept, the context columns dropped).
    """

    src, _, _ = load_model(captioner_dir, model_type="captioner")
    theirs, ours = src.state_dict(), model.state_dict()
    copied = []
    with torch.no_grad():
        for k, v in ours.items():
            if k not in theirs:
                continue
            w = theirs[k].to(v.dtype)
            if w.shape == v.shape:
                v.copy_(w)
            elif k == "cell.weight_ih" and w.shape[0] == v.shape[0]:
                n = min(w.shape[1], v.shape[1])
                v[:, :n].copy_(w[:, :n])
            else:
                continue
            copied.append(k)
    return copied
